"""Each request's id, its access line and its audit events through the Flask app (a failed run at
WARNING, a 500 at ERROR with the request's id, a ladder reset), read as the JSON lines `log_format: json`
writes."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.http import (
    LOG_XID,
    OPERATOR_TOKEN,
    Server,
    alert,
    bearer,
    notification,
    notify_playbook,
    real_firing,
)
from tests.support.realsystems import WebhookRecorder

JsonLog = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def json_log() -> Iterator[JsonLog]:
    """The records of the test as the JSON lines `configure_logging("json")` writes (its formatter and filter)."""
    from remediate.logs.setup import RequestIdFilter, json_formatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(level)


def _audit(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["logger"] == "remediate.audit" and r["event"] == event]


def _access(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["logger"] == "remediate.access"]


def test_a_request_without_an_id_gets_one_of_its_own_on_its_access_line_and_its_events(
    server: Server, json_log: JsonLog
) -> None:
    response = server.webhook(real_firing())

    request_id = response.headers["X-Request-Id"]
    assert len(request_id) == 32
    records = json_log()
    [access] = _access(records)
    assert (access["request_id"], access["route"], access["status"], access["principal"]) == (
        request_id, "/webhook", 200, "token",
    )  # fmt: skip
    assert [r["request_id"] for r in _audit(records, "alert_received") + _audit(records, "decision")] == [
        request_id
    ] * 2


def test_a_duplicate_decision_is_logged_at_debug_an_accepted_one_at_info(server: Server, json_log: JsonLog) -> None:
    server.webhook(real_firing())
    server.webhook(real_firing())  # AlertManager sends it again (a group change, repeat_interval)

    assert [(d["decision"], d["level"]) for d in _audit(json_log(), "decision")] == [
        ("accepted", "INFO"), ("duplicate", "DEBUG"),
    ]  # fmt: skip


def test_a_failed_run_ends_with_a_warning_naming_its_outcome_and_error(
    make_server: Callable[..., Server], json_log: JsonLog
) -> None:
    with WebhookRecorder(status=404, path="/hook") as receiver:
        server = make_server(playbooks={"notify.yaml": notify_playbook(receiver.url)})
        run_id = server.webhook(real_firing()).get_json()["runs"][0]
        server.drain()

    [ended] = _audit(json_log(), "run_ended")
    assert (ended["level"], ended["run_id"], ended["outcome"]) == ("WARNING", run_id, "failed")
    assert "404" in ended["error"]
    assert ended["duration_s"] >= 0


def test_a_succeeded_run_ends_at_info(server: Server, json_log: JsonLog) -> None:
    server.webhook(real_firing())
    server.drain()

    [started] = _audit(json_log(), "run_started")
    [ended] = _audit(json_log(), "run_ended")
    assert (started["playbook"], ended["level"], ended["outcome"]) == ("log-xid", "INFO", "succeeded")


def test_an_internal_error_is_logged_at_error_with_the_requests_id(server: Server, json_log: JsonLog) -> None:
    def broken() -> Any:
        raise RuntimeError("a bug")

    server.app.add_url_rule("/broken", view_func=broken)
    response = server.client.get("/broken", headers={"X-Request-Id": "bug-1"})

    assert response.status_code == 500
    assert response.headers["X-Request-Id"] == "bug-1"
    records = json_log()
    [error] = [r for r in records if r["level"] == "ERROR"]
    assert error["request_id"] == "bug-1"
    assert "RuntimeError: a bug" in error["exc_info"]
    assert [(a["request_id"], a["status"]) for a in _access(records)] == [("bug-1", 500)]


def test_probes_and_scrapes_have_their_access_line_at_debug(server: Server, json_log: JsonLog) -> None:
    server.client.get("/healthz")
    server.client.get("/metrics")
    server.get("/pause")

    assert [(a["route"], a["level"]) for a in _access(json_log())] == [
        ("/healthz", "DEBUG"), ("/metrics", "DEBUG"), ("/pause", "INFO"),
    ]  # fmt: skip


LADDER = """\
name: hot
match: {alertname: GPUTemperatureHigh}
target: node
escalate:
  - name: cap-power
    holds_for: 1h
    steps: [{action: log, with: {message: "cap"}}]
"""


def test_a_ladder_reset_and_a_breaker_reset_that_reset_nothing(
    make_server: Callable[..., Server], json_log: JsonLog
) -> None:
    server = make_server(playbooks={"hot.yaml": LADDER, "log-xid.yaml": LOG_XID})
    server.webhook(notification(alert("hot-a", alertname="GPUTemperatureHigh", node="node-a")))

    reset = server.client.post(
        "/ladders/reset",
        json={"target": "node-a", "reason": "fixed the fan"},
        headers={**bearer(OPERATOR_TOKEN), "X-Request-Id": "ladder-1"},
    )
    assert reset.status_code == 200
    server.post("/breaker/reset", json={"reason": "closed anyway"})

    records = json_log()
    [event] = _audit(records, "ladder_reset")
    assert (event["level"], event["request_id"], event["principal"]) == ("WARNING", "ladder-1", "operator")
    assert (event["target"], event["playbook"], event["reason"], event["ladders"]) == (
        "node-a", None, "fixed the fan", 1,
    )  # fmt: skip
    assert _audit(records, "breaker_reset") == []  # a closed breaker: nothing was reset


def test_the_pages_approve_pause_and_resume_are_audit_events_of_the_signed_in_principal(
    make_server: Callable[..., Server], json_log: JsonLog
) -> None:
    from tests.integration.test_ui_pages import awaiting_run, csrf, log_in

    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    page = server.client.get(f"/ui/runs/{run_id}")
    assert server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(page)}).status_code == 302
    token = csrf(server.client.get("/ui/state"))
    assert server.client.post("/ui/pause", data={"csrf_token": token, "reason": "maintenance"}).status_code == 302
    assert server.client.post("/ui/resume", data={"csrf_token": token}).status_code == 302

    records = json_log()
    [approval] = _audit(records, "approval")
    [pause] = _audit(records, "pause")
    [resume] = _audit(records, "resume")
    assert (approval["principal"], approval["run_id"], approval["via"]) == ("operator", run_id, "ui")
    assert (pause["principal"], pause["reason"], pause["via"]) == ("operator", "maintenance", "ui")
    assert (resume["principal"], resume["via"]) == ("operator", "ui")
    approved = [a for a in _access(records) if a["route"] == "/ui/runs/<int:run_id>/approve"]
    assert [(a["principal"], a["request_id"]) for a in approved] == [("operator", approval["request_id"])]
