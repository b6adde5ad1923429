"""Structured logs: the real ``remediate serve`` with ``log_format: json`` writes one JSON object per
line (gunicorn's own messages too), an access line per request, and the audit events of what a request did,
joined by the request's id (the client's X-Request-Id, echoed back)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.server import NodeAgent, RemediateServer, notification, write_playbook
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

READ_TOKEN = "e2e-read-only-token-of-the-logging-test"

PLAYBOOK = """\
name: ask-before-log
match:
  alertname: E2EAuditTrail
target: node
mode: approve
cooldown: 0s
steps:
  - action: log
    with:
      message: "approved, acting on {{ labels.Hostname }}"
"""


def _json_lines(server: RemediateServer | NodeAgent) -> list[dict[str, Any]]:
    """Every line the process wrote, each parsed as JSON (a line that is not JSON fails the test)."""
    lines = server.log_path.read_text(encoding="utf-8").splitlines()
    records = []
    for line in lines:
        if line.startswith("--- start"):  # the test harness's own header
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a log line that is not JSON: {line!r}")
    return records


def _events(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("logger") == "remediate.audit" and r.get("event") == name]


def _access(records: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    [line] = [r for r in records if r["logger"] == "remediate.access" and r.get("request_id") == request_id]
    return line


def _post(server: RemediateServer, path: str, request_id: str, token: str | None, **body: Any) -> requests.Response:
    headers = {"X-Request-Id": request_id}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.post(f"{server.url}{path}", json=body or None, headers=headers, timeout=scaled(10))


def test_json_logs_carry_each_requests_id_its_access_line_and_its_audit_events(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    write_playbook(playbooks_dir, "ask", PLAYBOOK)
    server = start_server(env={"REMEDIATE_LOG_FORMAT": "json", "REMEDIATE_READ_TOKEN": READ_TOKEN})

    alert = notification("E2EAuditTrail", {"Hostname": "node-a"})
    response = requests.post(
        server.webhook_url, json=alert, headers={**server.auth, "X-Request-Id": "am-delivery-1"}, timeout=scaled(10)
    )
    assert response.status_code == 200, response.text
    assert response.headers["X-Request-Id"] == "am-delivery-1"
    [run_id] = response.json()["runs"]
    server.wait_for_run_status(run_id, "awaiting_approval")
    assert _post(server, f"/runs/{run_id}/approve", "op-approve-1", server.token, by="alice").status_code == 200
    server.wait_for_run_status(run_id, "succeeded")
    assert _post(server, "/pause", "op-pause-1", server.token, reason="maintenance").status_code == 200
    assert _post(server, "/resume", "op-resume-1", server.token).status_code == 200
    assert _post(server, "/pause", "anon-1", None).status_code == 401
    assert _post(server, "/pause", "reader-1", READ_TOKEN).status_code == 403
    # An id that is not sane is replaced by one of the server's own (it goes into every line).
    insane = requests.get(f"{server.url}/history", headers={**server.auth, "X-Request-Id": 'a b;"forged"'}, timeout=10)
    assert insane.status_code == 200
    assert len(insane.headers["X-Request-Id"]) == 32
    server.stop()

    records = _json_lines(server)
    assert {"time", "level", "logger", "message"} <= records[0].keys()
    assert [r for r in records if r["logger"].startswith("gunicorn")], "gunicorn's messages are JSON lines too"

    # The alert: its access line and its audit events share the id AlertManager (or a proxy) sent.
    access = _access(records, "am-delivery-1")
    assert (access["method"], access["route"], access["status"]) == ("POST", "/webhook", 200)
    assert access["principal"] == "token"
    assert isinstance(access["duration_ms"], float)
    [received] = _events(records, "alert_received")
    assert received["request_id"] == "am-delivery-1"
    assert (received["alerts"], received["firing"], received["resolved"], received["runs_queued"]) == (1, 1, 0, 1)
    [decision] = _events(records, "decision")
    assert decision["request_id"] == "am-delivery-1"
    assert (decision["playbook"], decision["target"], decision["run_id"]) == ("ask-before-log", "node-a", run_id)
    assert decision["decision"] == "accepted"
    assert decision["alertname"] == "E2EAuditTrail"

    [approval] = _events(records, "approval")
    assert (approval["request_id"], approval["principal"], approval["run_id"]) == ("op-approve-1", "token", run_id)
    assert _access(records, "op-approve-1")["route"] == "/runs/<int:run_id>/approve"

    # The run, in the executor process: no request's id, its outcome and duration.
    [started] = _events(records, "run_started")
    [ended] = _events(records, "run_ended")
    assert (started["run_id"], started["playbook"], started["target"]) == (run_id, "ask-before-log", "node-a")
    assert (ended["run_id"], ended["outcome"], ended["level"]) == (run_id, "succeeded", "INFO")
    assert ended["duration_s"] >= 0
    assert "request_id" not in ended

    [pause] = _events(records, "pause")
    assert (pause["request_id"], pause["principal"], pause["reason"]) == ("op-pause-1", "token", "maintenance")
    [resume] = _events(records, "resume")
    assert (resume["request_id"], resume["principal"]) == ("op-resume-1", "token")

    refusals = {r["request_id"]: r for r in _events(records, "auth_refused")}
    assert refusals.keys() == {"anon-1", "reader-1"}
    assert refusals["anon-1"]["level"] == "WARNING"
    assert (refusals["anon-1"]["reason"], refusals["anon-1"]["principal"]) == ("no_token", None)
    assert (refusals["reader-1"]["reason"], refusals["reader-1"]["principal"]) == ("wrong_role", "read")
    assert refusals["reader-1"]["route"] == "/pause"
    assert refusals["reader-1"]["role_needed"] == "operator"
    assert _access(records, "reader-1")["status"] == 403
    assert _access(records, "anon-1")["status"] == 401

    assert "forged" not in server.log_path.read_text(encoding="utf-8")


def test_the_node_agent_logs_json_lines_at_the_level_chosen(tmp_path: Path) -> None:
    agent = NodeAgent(tmp_path / "node-a", "node-a", env={"REMEDIATE_LOG_FORMAT": "json"})
    try:
        agent.start()
    finally:
        agent.stop()
    quiet = NodeAgent(
        tmp_path / "node-b", "node-b", env={"REMEDIATE_LOG_FORMAT": "json", "REMEDIATE_LOG_LEVEL": "warning"}
    )
    try:
        quiet.start()
    finally:
        quiet.stop()

    records = _json_lines(agent)
    assert [r for r in records if r["logger"] == "remediate.agent" and r["level"] == "INFO"], records
    assert [r for r in _json_lines(quiet) if r["level"] == "INFO"] == []
