"""Crash recovery of the real ``remediate serve``: SIGKILL the whole gunicorn process group, start again.

The store is the durable queue: an accepted run survives a crash, and a step
that was in flight when the executor died is marked ``interrupted`` and only
run again when its action is idempotent (``notify.webhook`` is not, so that run
fails and says why). Notifications are POSTed straight to ``/webhook``; no
AlertManager is needed to show this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import RemediateServer, notification, write_playbook
from tests.realsystems import WebhookRecorder

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
