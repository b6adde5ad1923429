"""Counters that count from zero, on the real `remediate serve` (gunicorn master, HTTP workers and the executor
process, prometheus_client's multiprocess files): each labelled counter whose label values are known is on
/metrics at 0 from the start, a reload's new playbook gets its zeros, and a real Prometheus that scrapes the
server across a restart sees the first failed run after it in `increase()` (a series born at 1 would count 0).
The reload gauges say 1 after the start, 0 after a refused SIGHUP (the success time kept), 1 after an applied one.
(One process serving alone: tests/integration/test_counters_from_zero.py.)"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from remediate.executor.agent_calls import AGENT_CALL_ERRORS
from tests.support.realsystems import Prometheus, free_port, wait_until
from tests.support.server import WAIT, RemediateServer, notification, scrape_metric, write_playbook

pytestmark = [pytest.mark.integration]

RELOAD_OK = "remediate_config_last_reload_successful"
RELOAD_TIME = "remediate_config_last_reload_success_timestamp_seconds"


def _failing(name: str) -> str:
    """A playbook whose one step fails at once: a webhook to a port nobody listens on, no retry."""
    return f"""\
name: {name}
match: {{alertname: {name}}}
steps:
  - action: notify.webhook
    with: {{url: "http://127.0.0.1:{free_port()}/hook", message: "{name}"}}
    retries: 0
    timeout: 10s
"""


def _samples(server: RemediateServer, name: str) -> dict[str, float]:
    """`name`'s samples on /metrics by their labels, as one string (`playbook=a,status=failed`)."""
    text = requests.get(f"{server.url}/metrics", timeout=WAIT).text
    return {
        ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_the_real_server_exports_its_zeros_and_a_reload_adds_those_of_new_playbooks(
    playbooks_dir: Path, start_server: Callable[..., RemediateServer]
) -> None:
    write_playbook(playbooks_dir, "first", _failing("first"))
    started = time.time()
    server = start_server(workers=2, executor_threads=1)

    runs = _samples(server, "remediate_runs_finished_total")
    assert runs == {f"playbook=first,status={s}": 0 for s in ("succeeded", "failed", "planned")}
    errors = _samples(server, "remediate_agent_call_errors_total")
    assert errors == {f"reason={reason}": 0 for reason in AGENT_CALL_ERRORS}
    assert _samples(server, "remediate_approval_announcements_total") == {"outcome=sent": 0, "outcome=failed": 0}
    assert _samples(server, "remediate_steps_total") == {
        "action=notify.webhook,outcome=succeeded": 0,
        "action=notify.webhook,outcome=failed": 0,
    }
    assert _samples(server, RELOAD_OK) == {"": 1}
    [start_time] = _samples(server, RELOAD_TIME).values()
    assert started <= start_time <= time.time()

    # A refused reload (SIGHUP to the master, as Prometheus' own is asked): 0, the last success's time kept.
    broken = write_playbook(playbooks_dir, "broken", "name: broken\nmatch: {alertname: B}\nsteps: []\nmode: no\n")
    os.kill(server.pid, signal.SIGHUP)
    wait_until(lambda: _samples(server, RELOAD_OK) == {"": 0}, WAIT, message="the refused reload's 0")
    assert _samples(server, RELOAD_TIME) == {"": start_time}

    broken.unlink()
    write_playbook(playbooks_dir, "second", _failing("second"))
    os.kill(server.pid, signal.SIGHUP)
    wait_until(lambda: _samples(server, RELOAD_OK) == {"": 1}, WAIT, message="the applied reload's 1")
    assert _samples(server, RELOAD_TIME)[""] > start_time
    # The new workers (forked with the set) and the executor process (which re-read it) wrote its zeros.
    wait_until(
        lambda: _samples(server, "remediate_runs_finished_total").get("playbook=second,status=failed") == 0,
        WAIT,
        message="the zeros of the playbook the reload added",
    )

    # POST /-/reload refused by the HTTP worker that read the files (the master is not asked): its 0 is the
    # most recent write, so it wins over the master's 1; the master's next success wins back.
    broken.write_text("name: broken\nmatch: {alertname: B}\nsteps: []\nmode: no\n")
    headers = {"Authorization": f"Bearer {server.token}"}
    assert requests.post(f"{server.url}/-/reload", headers=headers, timeout=WAIT).status_code == 422
    assert _samples(server, RELOAD_OK) == {"": 0}
    broken.unlink()
    assert requests.post(f"{server.url}/-/reload", headers=headers, timeout=WAIT).status_code == 200
    wait_until(lambda: _samples(server, RELOAD_OK) == {"": 1}, WAIT, message="the applied POST's 1")


def test_increase_over_a_restart_sees_the_first_failed_run(
    tmp_path: Path, playbooks_dir: Path, start_server: Callable[..., RemediateServer]
) -> None:
    write_playbook(playbooks_dir, "flaky", _failing("flaky"))
    server = start_server(workers=2, executor_threads=1)
    target = f"127.0.0.1:{server.port}"
    failed = 'remediate_runs_finished_total{status="failed", playbook="flaky"}'
    with Prometheus(
        tmp_path / "prometheus",
        scrape_targets=[target],
        rule_files=[],
        alertmanager_url=f"http://127.0.0.1:{free_port()}",
    ) as prom:
        prom.wait_until_scraping(timeout=WAIT)
        wait_until(lambda: prom.query(failed), WAIT, message="Prometheus scraped the failed runs' 0")
        before = _samples(server, "remediate_runs_finished_total")

        restarted = time.time()
        server.restart()
        after_start = _samples(server, "remediate_runs_finished_total")
        # Scraped after the restart: the new master's start time is in Prometheus.
        wait_until(
            lambda: prom.query(f"{RELOAD_TIME} > {restarted}"), WAIT, message="Prometheus scraped the new server"
        )
        answer = server.post_webhook(notification("flaky", {"node": "node-a"}, fingerprint="f1a4y"))
        assert answer.status_code == 200, answer.text
        server.wait_for_run(status="failed", playbook="flaky")
        wait_until(lambda: scrape_metric(f"{server.url}/metrics", "remediate_runs_finished_total", status="failed"),
                   WAIT, message="the failure counted")  # fmt: skip
        wait_until(lambda: [r for r in prom.query(failed) if float(r["value"][1]) == 1], WAIT, message="scraped at 1")
        after_failure = _samples(server, "remediate_runs_finished_total")
        [increase] = prom.query(f"sum(increase({failed}[1m]))")
        [resets] = prom.query(f"sum(resets({failed}[1m]))")

    print(f"\nremediate_runs_finished_total before the restart: {before}")
    print(f"remediate_runs_finished_total after the restart:  {after_start}")
    print(f"remediate_runs_finished_total after one failure:  {after_failure}")
    print(f"increase({failed}[1m]) = {increase['value'][1]} (counter resets seen: {resets['value'][1]})")
    assert before["playbook=flaky,status=failed"] == 0
    assert after_start["playbook=flaky,status=failed"] == 0
    assert after_failure["playbook=flaky,status=failed"] == 1
    # Extrapolated to the window's end at most a little: one failure, not ~0 (a series born at 1 gives 0).
    assert 1 <= float(increase["value"][1]) < 1.5
