"""The metrics a monitoring stack expects of the real ``remediate serve``: which build answers, every
request by route and code with its duration, the executor's heartbeat age, the writes the store could not take and
the duration of each call to a node agent, all read from its /metrics as Prometheus scrapes it."""

from __future__ import annotations

import platform
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from remediate import __version__
from tests.support.realsystems import free_port, wait_until
from tests.support.server import AGENT_TOKEN, WAIT, RemediateServer, notification, write_playbook
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

PLAYBOOK = """\
name: logged
match: {alertname: [Logged]}
steps:
  - action: log
    with: {message: "seen {{ labels.alertname }}"}
"""

NODE_PLAYBOOK = """\
name: scratch-full
match: {alertname: [ScratchAlmostFull]}
target: node
steps:
  - action: disk.cleanup
    with: {mountpoint: /scratch, free_bytes: 1GiB}
    timeout: 30s
"""


def scrape(server: RemediateServer) -> Samples:
    response = requests.get(f"{server.url}/metrics", timeout=scaled(10))
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def matching(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        key: value
        for (sample, key), value in samples.items()
        if sample == name and all(dict(key).get(k) == v for k, v in labels.items())
    }


def test_build_info_requests_by_route_and_the_heartbeat_age_are_on_metrics(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    write_playbook(playbooks_dir, "logged", PLAYBOOK)
    server = start_server(workers=2, executor_threads=1)
    for run in range(3):
        answer = server.post_webhook(notification("Logged", {"node": f"node-{run}"}, fingerprint=f"{run:016x}"))
        assert answer.status_code == 200, answer.text
    run_id = answer.json()["runs"][0]
    assert requests.get(f"{server.url}/runs/{run_id}", headers=server.auth, timeout=scaled(5)).ok
    assert requests.get(f"{server.url}/runs/999999", headers=server.auth, timeout=scaled(5)).status_code == 404
    assert requests.get(f"{server.url}/no/such/page", timeout=scaled(5)).status_code == 404
    assert requests.get(f"{server.url}/history", timeout=scaled(5)).status_code == 401
    wait_until(lambda: scrape(server).get(("remediate_executor_heartbeat_age_seconds", ())) is not None, WAIT)

    samples = scrape(server)

    [(info, one)] = matching(samples, "remediate_build_info").items()
    assert one == 1
    assert dict(info) == {"version": __version__, "python": platform.python_version(), "database": "sqlite"}
    # Counted by the URL rule, whichever worker answered: the run's id is no label.
    requests_total = matching(samples, "remediate_http_requests_total")
    assert requests_total[(("code", "200"), ("method", "POST"), ("route", "/webhook"))] == 3
    assert requests_total[(("code", "200"), ("method", "GET"), ("route", "/runs/<int:run_id>"))] == 1
    assert requests_total[(("code", "404"), ("method", "GET"), ("route", "/runs/<int:run_id>"))] == 1
    assert requests_total[(("code", "404"), ("method", "GET"), ("route", "no_route"))] == 1
    assert requests_total[(("code", "401"), ("method", "GET"), ("route", "/history"))] == 1
    assert not any("999999" in value or "/no/such" in value for key in requests_total for _, value in key)
    webhook = (("method", "POST"), ("route", "/webhook"))
    assert samples[("remediate_http_request_duration_seconds_count", webhook)] == 3
    assert samples[("remediate_http_request_duration_seconds_bucket", (("le", "+Inf"), *webhook))] == 3
    assert samples[("remediate_http_request_duration_seconds_sum", webhook)] > 0
    age = samples[("remediate_executor_heartbeat_age_seconds", ())]
    assert 0 <= age <= server_lease(server)
    # Every kind at 0 from the start: no write failed, and the first that does counts in increase().
    errors = matching(samples, "remediate_store_write_errors_total")
    assert {dict(key)["kind"]: value for key, value in errors.items()} == {
        "busy": 0, "unreachable": 0, "refused": 0, "file_replaced": 0
    }  # fmt: skip


def server_lease(server: RemediateServer) -> float:
    body = requests.get(f"{server.url}/readyz", timeout=scaled(5)).json()
    return float(body["executor"]["lease_s"])


def test_writes_the_store_could_not_take_are_counted_by_kind(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    write_playbook(playbooks_dir, "logged", PLAYBOOK)
    server = start_server(workers=1, executor_threads=1, env={"REMEDIATE_STORE_BUSY_TIMEOUT": "1"})
    assert requests.get(f"{server.url}/readyz", timeout=scaled(5)).status_code == 200

    # Another process holds SQLite's write lock: every write of the server waits its busy timeout and fails.
    other = sqlite3.connect(server.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 503, answer.text
        busy = scrape(server)  # reads still work under a writer's lock (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()

    assert matching(busy, "remediate_store_write_errors_total", kind="busy")[(("kind", "busy"),)] >= 1
    assert busy[("remediate_http_requests_total", (("code", "503"), ("method", "POST"), ("route", "/webhook")))] == 1


def test_each_call_to_a_node_agent_is_timed_by_action_and_outcome(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    write_playbook(playbooks_dir, "scratch-full", NODE_PLAYBOOK)
    nobody = f"http://127.0.0.1:{free_port()}"  # no agent listens there: every try is refused
    server = start_server(
        workers=1,
        executor_threads=1,
        env={
            "REMEDIATE_AGENTS": f"node-a={nobody}",
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_AGENT_RETRIES": "1",
        },
    )
    answer = server.post_webhook(notification("ScratchAlmostFull", {"node": "node-a", "mountpoint": "/scratch"}))
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: matching(scrape(server), "remediate_agent_call_duration_seconds_count", outcome="unreachable"),
        WAIT,
        message="an agent call timed",
    )

    samples = scrape(server)
    counts = matching(samples, "remediate_agent_call_duration_seconds_count")
    assert set(counts) == {(("action", "disk.cleanup"), ("outcome", "unreachable"))}
    assert samples[("remediate_agent_call_errors_total", (("reason", "unreachable"),))] == sum(counts.values())
