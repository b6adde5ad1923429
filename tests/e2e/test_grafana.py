"""The Grafana side, end to end: the real ``remediate serve`` (gunicorn) handles a few alerts (a run that
succeeds, one whose node agent is unreachable, a duplicate, a refused request), posts an annotation per
executed run to a local HTTP sink standing for Grafana, and a real Prometheus scrapes its /metrics; every
query of the shipped dashboard (docs/dashboards/remediate.json) is then sent to that Prometheus as Grafana
would send it, and must parse, and the dashboard must name only metrics the server really exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import dashboard
from tests.support.realsystems import Prometheus, WebhookRecorder, free_port
from tests.support.server import AGENT_TOKEN, RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

GRAFANA_TOKEN = "glsa_e2e-service-account-token"
LOG_PLAYBOOK = """\
name: note-xid
match:
  alertname: GpuXidError
target: node
cooldown: 0s
steps:
  - name: note
    action: log
    with: {message: "xid on {{ labels.Hostname }}"}
"""
# Its node has an agent in the map that nobody serves: the call fails, unreachable.
AGENT_PLAYBOOK = """\
name: reset-clocks
match:
  alertname: GpuClocksStuck
target: node
cooldown: 0s
steps:
  - name: reset
    action: gpu.reset_clocks
    with: {gpu: "0"}
    retries: 0
"""


@pytest.fixture
def grafana() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="") as sink:
        yield sink


@pytest.fixture
def server(
    tmp_path: Path, playbooks_dir: Path, grafana: WebhookRecorder, start_server: Callable[..., RemediateServer]
) -> RemediateServer:
    write_playbook(playbooks_dir, "note-xid", LOG_PLAYBOOK)
    write_playbook(playbooks_dir, "reset-clocks", AGENT_PLAYBOOK)
    token_file = tmp_path / "grafana-token"
    token_file.write_text(GRAFANA_TOKEN + "\n")
    return start_server(
        env={
            "REMEDIATE_GRAFANA_URL": grafana.url,
            "REMEDIATE_GRAFANA_TOKEN_FILE": str(token_file),
            "REMEDIATE_PUBLIC_URL": "https://remediate.example.com/",
            "REMEDIATE_AGENTS": f"node-gone=http://127.0.0.1:{free_port()}",
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_AGENT_RETRIES": "1",
        }
    )


def handle_a_few_alerts(server: RemediateServer) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run that succeeds, one that fails on its agent, a duplicate of the first, a wrong token."""
    xid = notification("GpuXidError", {"Hostname": "node-a", "training_job": "llama"}, fingerprint="aaaa000000000001")
    assert server.post_webhook(xid).status_code == 200
    stuck = notification("GpuClocksStuck", {"Hostname": "node-gone"}, fingerprint="aaaa000000000002")
    assert server.post_webhook(stuck).status_code == 200
    succeeded = server.wait_for_run(status="succeeded", playbook="note-xid")
    failed = server.wait_for_run(status="failed", playbook="reset-clocks")
    assert server.post_webhook(xid).status_code == 200  # the same occurrence again: a duplicate, no run
    assert server.post_webhook(xid, token="not-the-token").status_code == 401
    return succeeded, failed


def exported_families(server: RemediateServer) -> set[str]:
    text = requests.get(f"{server.url}/metrics", timeout=scaled(5)).text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_each_executed_run_is_annotated_in_grafana_and_the_dashboards_queries_parse_on_its_metrics(
    tmp_path: Path, server: RemediateServer, grafana: WebhookRecorder, watch_log: Callable[..., None]
) -> None:
    succeeded, failed = handle_a_few_alerts(server)

    # Grafana annotations: one per executed run, none for the duplicate.
    for entry in (succeeded, failed):
        grafana.wait_for(lambda r, e=entry: r.json is not None and f"run {e['run_id']})" in r.json["text"])
    wait_until(lambda: server.metric("remediate_grafana_annotations_total", outcome="posted") == 2, 10)
    posted = grafana.requests
    assert len(posted) == 2
    for request in posted:
        assert (request.method, request.path) == ("POST", "/api/annotations")
        assert request.header("Authorization") == f"Bearer {GRAFANA_TOKEN}"
    by_playbook = {r.json["tags"][1]: r.json for r in posted}
    ok = by_playbook["playbook:note-xid"]
    assert ok["tags"] == ["remediate", "playbook:note-xid", "node:node-a", "status:succeeded"]
    detail = server.run(succeeded["run_id"])
    assert ok["time"] == int(detail["started_at"] * 1000)
    assert ok["time"] <= ok["timeEnd"] <= int(detail["finished_at"] * 1000) + 1000
    assert "GpuXidError" in ok["text"] and "node-a" in ok["text"] and "succeeded" in ok["text"]
    link = f'<a href="https://remediate.example.com/ui/runs/{succeeded["run_id"]}">run {succeeded["run_id"]}</a>'
    assert link in ok["text"]  # public_url: the annotation links to the run's page
    bad = by_playbook["playbook:reset-clocks"]
    assert bad["tags"] == ["remediate", "playbook:reset-clocks", "node:node-gone", "status:failed"]
    assert "unreachable" in bad["text"]

    # A real Prometheus scrapes the server; Grafana's queries go to its HTTP API.
    with Prometheus(
        tmp_path / "prometheus",
        scrape_targets=[server.url.removeprefix("http://")],
        rule_files=[],
        alertmanager_url=f"http://127.0.0.1:{free_port()}",
    ) as prom:
        watch_log("prometheus", prom)
        wait_until(lambda: prom.query('remediate_runs_finished_total{playbook="reset-clocks"}'), 30)

        refused = []
        for query in dashboard.queries(dashboard.load()):
            response = requests.get(f"{prom.url}/api/v1/query", params={"query": query.promql}, timeout=scaled(5))
            if response.status_code != 200 or response.json()["status"] != "success":
                refused.append((query.panel, query.promql, response.status_code, response.text[:300]))
        for selector in dashboard.variable_selectors(dashboard.load()):
            response = requests.get(f"{prom.url}/api/v1/series", params={"match[]": selector}, timeout=scaled(5))
            if response.status_code != 200 or not response.json()["data"]:
                refused.append(("variable", selector, response.status_code, response.text[:300]))
        assert refused == []

        # The panels of the issue show what happened, read through the dashboard's own queries.
        def values(title: str, label: str) -> dict[str, float]:
            (query,) = [q for q in dashboard.queries(dashboard.load()) if q.panel == title]
            # rate() and increase() answer once two scrapes are in their window.
            found = wait_until(lambda: prom.query(query.promql), 10, message=f"{title}: no series")
            return {s["metric"].get(label, ""): float(s["value"][1]) for s in found}

        assert values("Runs finished by playbook", "playbook").keys() == {"note-xid", "reset-clocks"}
        assert values("Decisions by kind", "decision").keys() >= {"accepted", "duplicate"}
        # Every reason is exported at 0 from the start (increase() then counts the first error); one happened.
        errors = values("Agent call errors", "reason")
        assert errors.keys() == {"unreachable", "ambiguous", "bad_answer"}
        assert errors["ambiguous"] == errors["bad_answer"] == 0
        assert values("Webhook requests refused", "code").keys() == {"401"}
        assert values("Paused", "") == {"": 0.0}
        # The training job keeps its label through the scrape: a `job` label would arrive as exported_job.
        (series,) = wait_until(lambda: prom.query("remediate_report_job_incidents"), 10, message="no job figures")
        assert series["metric"]["training_job"] == "llama", series
        assert "exported_job" not in series["metric"], series

    # Every metric the dashboard names is one the server exported.
    families = exported_families(server)
    used = {name for q in dashboard.queries(dashboard.load()) for name in dashboard.metric_names(q.promql)}
    assert used, "no metric found in the dashboard's queries"
    assert {name for name in used if not dashboard.exported(name, families)} == set()


def test_a_grafana_that_fails_delays_and_fails_no_run(server: RemediateServer, grafana: WebhookRecorder) -> None:
    grafana.status = 500

    succeeded, failed = handle_a_few_alerts(server)

    assert (succeeded["status"], failed["status"]) == ("succeeded", "failed")
    # Each annotation was tried a few times, then given up: counted, never retried forever.
    wait_until(lambda: server.metric("remediate_grafana_annotations_total", outcome="failed") == 2, 20)
    assert len(grafana.requests) == 2 * 3
    assert server.metric("remediate_grafana_annotations_total", outcome="posted") == 0
    assert GRAFANA_TOKEN not in server.log_tail(400)
