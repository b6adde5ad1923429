"""Crash recovery of the real ``remediate serve``: SIGKILL the whole gunicorn process group, start again.

The store is the durable queue: an accepted run survives a crash, and a step
that was in flight when the executor died is marked ``interrupted`` and only
run again when its action is idempotent (``notify.webhook`` is not, so that run
fails and says why). Notifications are POSTed straight to ``/webhook``; no
AlertManager is needed to show this.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.actions.base import ActionRegistry
from remediate.actions.log import LogAction
from remediate.actions.notify import NotifyWebhookAction
from remediate.config.settings import ExecutorSettings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer, notification, write_playbook
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

StartServer = Callable[..., RemediateServer]

SLOW = 5.0  # seconds the recorder takes to answer: the step is surely in flight when we kill


def _playbook(name: str, alertname: str, recorder: WebhookRecorder) -> str:
    return f"""\
name: {name}
match:
  alertname: {alertname}
target: node
cooldown: 0s
steps:
  - name: notify
    action: notify.webhook
    with:
      url: {recorder.url}
      message: "{{{{ labels.alertname }}}} on {{{{ labels.Hostname }}}}"
    retries: 0
  - name: log-after
    action: log
    with:
      message: "notified about {{{{ labels.Hostname }}}}"
"""


def test_step_in_flight_at_a_crash_is_interrupted_and_not_run_again(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder
) -> None:
    write_playbook(playbooks_dir, "crash", _playbook("crash-in-flight", "E2ECrashInFlight", recorder))
    recorder.delay = SLOW
    server = start_server()

    response = server.post_webhook(notification("E2ECrashInFlight", {"Hostname": "node-a"}))
    assert response.status_code == 200, response.text
    [run_id] = response.json()["runs"]

    running = server.wait_for_run_status(run_id, "running")
    recorder.wait_for(timeout=10)  # the POST has reached the recorder, which sits on it
    step = server.run(run_id)["steps"][0]
    assert step["status"] == "running", running
    assert [a["outcome"] for a in step["attempts"]] == [None]

    server.kill()  # SIGKILL master and workers: no shutdown hook, no chance to record anything
    crashed = time.monotonic()
    server.start()
    detail = server.wait_for_run_status(run_id, "failed")
    print(f"\nrecovered {time.monotonic() - crashed:.2f} s after the restart began")

    notify, log_after = detail["steps"]
    assert notify["status"] == "interrupted"
    assert "notify.webhook is not idempotent" in notify["error"]
    assert "not run again" in notify["error"]
    assert [a["outcome"] for a in notify["attempts"]] == ["interrupted"]
    assert log_after["status"] == "skipped"  # nothing after the interrupted step ran
    assert log_after["error"] == "skipped: step 0 notify (notify.webhook) failed"
    assert log_after["attempts"] == []
    assert "notify.webhook is not idempotent" in detail["error"]
    assert detail["error"].startswith("step 0 notify (notify.webhook)")
    [entry] = server.runs(alertname="E2ECrashInFlight")
    assert entry["status"] == "failed"
    assert entry["run"]["error"] == detail["error"]
    # The POST was made once, before the crash, and not repeated after it.
    time.sleep(0.5)
    assert len(recorder.requests) == 1


def test_queued_run_survives_a_crash_and_runs_after_restart(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder
) -> None:
    write_playbook(playbooks_dir, "queued", _playbook("crash-queued", "E2ECrashQueued", recorder))
    server = start_server(executor_threads=0)  # accepts and stores, executes nothing

    response = server.post_webhook(notification("E2ECrashQueued", {"Hostname": "node-b"}))
    assert response.status_code == 200, response.text
    [run_id] = response.json()["runs"]
    [entry] = server.runs(alertname="E2ECrashQueued")
    assert entry["run_id"] == run_id
    assert entry["decision"] == "accepted"
    assert entry["status"] == "queued"
    time.sleep(0.3)
    assert server.run(run_id)["status"] == "queued"
    assert recorder.requests == []

    server.kill()
    server.start(executor_threads=2)
    detail = server.wait_for_run_status(run_id, "succeeded", "failed")

    assert detail["status"] == "succeeded", detail
    assert [(s["name"], s["status"]) for s in detail["steps"]] == [("notify", "succeeded"), ("log-after", "succeeded")]
    assert detail["target"] == "node-b"
    [entry] = server.runs(alertname="E2ECrashQueued")
    assert entry["status"] == "succeeded"
    [posted] = recorder.requests
    assert posted.json["run_id"] == run_id
    assert posted.json["message"] == "E2ECrashQueued on node-b"
    # The same notification again (AlertManager re-sends): a duplicate, not a second run.
    again = server.post_webhook(notification("E2ECrashQueued", {"Hostname": "node-b"}))
    assert again.status_code == 200
    assert again.json()["decisions"] == {"duplicate": 1}
    assert len(server.runs(alertname="E2ECrashQueued")) == 1


# --------------------------------------------------------------------------- a stalled executor

EXECUTOR_PROCESS = """
import sys, time
from remediate.actions.base import ActionRegistry
from remediate.actions.log import LogAction
from remediate.actions.notify import NotifyWebhookAction
from remediate.config.settings import ExecutorSettings
from remediate.executor.loop import Executor
from remediate.store import Store

store = Store.open(sys.argv[1])
registry = ActionRegistry([LogAction(), NotifyWebhookAction()])
lease = ExecutorSettings(threads=1, poll_interval=0.05, lease=float(sys.argv[2]))
Executor(store=store, registry=registry, settings=lease).start()
print("started", flush=True)
time.sleep(120)
"""


def test_a_sigstopped_executor_loses_its_run_after_the_lease_and_nothing_is_done_twice_or_overwritten(
    tmp_path: Path, recorder: WebhookRecorder
) -> None:
    """Two executors on one SQLite file, one a real process SIGSTOPped mid-POST for 3x `stale_after`:
    the other used to take its run over (notify POSTed twice, `failed` then overwritten `succeeded`).
    No run stays `running` without a live heartbeat, whoever holds it. The other takes
    it over once its heartbeat is a lease old; notify.webhook is not idempotent, so it is not POSTed again
    (the run fails: a person checks), and the stalled executor, continued, writes nothing more to it."""
    stale_after = 1.0
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = Store.open(url)
    registry = ActionRegistry([LogAction(), NotifyWebhookAction()])
    playbook = {
        "name": "notify-then-log",
        "match": {"alertname": "StalledExecutor"},
        "target": "node",
        "steps": [
            {"name": "notify", "action": "notify.webhook", "with": {"url": recorder.url}, "retries": 2},
            {"name": "log", "action": "log", "with": {"message": "after {{ labels.Hostname }}"}},
        ],
    }
    engine = Engine(
        store=store, playbooks=PlaybookSet([parse_playbook(playbook, registry, source="pb.yaml")]), registry=registry
    )

    def queue(node: str) -> int:
        body = json.dumps(notification_payload(alert_payload("StalledExecutor", labels={"Hostname": node})))
        (decision,) = engine.ingest_body(body.encode(), received_at=time.time()).decisions
        assert decision.run_id is not None, decision.reason
        return decision.run_id

    recorder.delay = 1.0  # the POST is in flight while the executor is stopped
    stalled_run = queue("node-a")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-c", EXECUTOR_PROCESS, url, str(stale_after)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    other = Executor(
        store=store, registry=registry, settings=ExecutorSettings(threads=1, poll_interval=0.05, lease=stale_after)
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        recorder.wait_for(lambda r: r.json["run_id"] == stalled_run, timeout=10)
        os.kill(child.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        others = [queue("node-b"), queue("node-c")]
        other.start()
        # 3x stale_after: the other executor's recovery looks every stale_after/4 and runs what is queued.
        wait_until(lambda: all(run_json_of(store, r)["status"] == "succeeded" for r in others), timeout=10)
        time.sleep(max(0.0, stopped + 3 * stale_after - time.monotonic()))
        taken = run_json_of(store, stalled_run)
        assert taken["status"] == "failed", taken
        assert [a["outcome"] for a in taken["steps"][0]["attempts"]] == ["interrupted"]
        assert "notify.webhook is not idempotent, so it is not run again" in taken["error"]
        os.kill(child.pid, signal.SIGCONT)
        time.sleep(2 * stale_after)  # the continued executor finds its claim gone (its next write checks it)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.terminate()
        child.wait(scaled(5))
        if child.stdout is not None:
            child.stdout.close()
        other.stop(timeout=5)

    assert run_json_of(store, stalled_run) == taken  # not overwritten by the stalled executor
    runs = [run_json_of(store, r) for r in others]
    assert [r["status"] for r in runs] == ["succeeded"] * 2
    for run in runs:
        assert [(s["status"], [a["outcome"] for a in s["attempts"]]) for s in run["steps"]] == [
            ("succeeded", ["succeeded"]),
            ("succeeded", ["succeeded"]),
        ]
    posted = sorted(r.json["run_id"] for r in recorder.requests)
    assert posted == sorted([stalled_run, *others])  # one POST per run
    store.close()
