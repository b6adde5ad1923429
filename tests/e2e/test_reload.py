"""Reload without restart, on the real `remediate serve` (gunicorn master, HTTP workers,
the executor process), as Prometheus does it: SIGHUP to the master and POST /-/reload (operator role).

An invalid file keeps the running set (the answer and the log say which file and why); a valid set applies
to the alerts received after the reload in every HTTP worker and in the executor process, which goes on
(not restarted); a run already running finishes with the steps it started with.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.support.processes import child_pids
from tests.support.realsystems import WebhookRecorder, wait_until
from tests.support.server import WAIT, RemediateServer, notification, write_playbook

pytestmark = [pytest.mark.integration]

READ_TOKEN = "e2e-read-only-token-5678"


def _logged(name: str, alertname: str) -> str:
    return f"""\
name: {name}
match: {{alertname: {alertname}}}
steps:
  - action: log
    with: {{message: "{name} saw {{{{ labels.node }}}}"}}
"""


BROKEN = """\
name: broken
match: {alertname: Broken}
steps:
  - action: no.such.action
"""


def _post(server: RemediateServer, alertname: str, node: str) -> list[int]:
    """The runs an alert queued (its fingerprint: one per node, so no alert is a duplicate of another)."""
    answer = server.post_webhook(notification(alertname, {"node": node}, fingerprint=f"{alertname}-{node}"))
    assert answer.status_code == 200, answer.text
    runs: list[int] = answer.json()["runs"]
    return runs


def _reload(server: RemediateServer, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{server.url}/-/reload", headers=headers, timeout=WAIT)


def _workers(server: RemediateServer, executor: int) -> set[int]:
    return child_pids(server.pid) - {executor}


def _executor_pid(server: RemediateServer) -> int:
    """The executor process: the master's child that says so in its log line."""
    line = _log_after(server, 0, "Started the executor process")
    return int(line.split("pid: ")[1].split(",")[0])


def _applied_everywhere(server: RemediateServer, mark: int, executor: int, workers: set[int]) -> None:
    """Waits until a reload asked after `mark` reached every process: the executor process re-read the set
    (within a second of the master's signal) and the old HTTP `workers` stopped (new ones, forked with the
    set, serve). The POST answers before that: it says the master holds the new set."""
    _log_after(server, mark, "executor process: reloaded")
    wait_until(lambda: not _workers(server, executor) & workers, WAIT, message="the old workers replaced")


def _log_after(server: RemediateServer, mark: int, text: str) -> str:
    """Waits for a log line containing `text` written after `mark` (a length of the log)."""
    return wait_until(
        lambda: next((x for x in server.log_path.read_text()[mark:].splitlines() if text in x), None),
        WAIT,
        message=f"a log line with {text!r}",
    )


def test_post_reload_refuses_a_bad_file_then_applies_a_good_set_in_every_process(
    playbooks_dir: Path, start_server: Callable[..., RemediateServer]
) -> None:
    write_playbook(playbooks_dir, "first", _logged("first", "First"))
    server = start_server(workers=2, executor_threads=1, env={"REMEDIATE_READ_TOKEN": READ_TOKEN})
    executor = _executor_pid(server)
    assert _post(server, "Second", "node-a") == []  # no playbook matches it yet

    assert _reload(server).status_code == 401
    assert _reload(server, READ_TOKEN).status_code == 403

    write_playbook(playbooks_dir, "second", _logged("second", "Second"))
    broken = write_playbook(playbooks_dir, "broken", BROKEN)
    workers = _workers(server, executor)
    mark = len(server.log_path.read_text())
    refused = _reload(server, server.token)

    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["error"] == "invalid_playbooks"
    assert body["file"] == str(broken)
    assert "no.such.action" in body["message"], body
    assert "reload_asked principal=token outcome=refused" in _log_after(server, mark, str(broken))  # audit events
    # Nothing changed: the same workers serve the running set.
    assert _workers(server, executor) == workers
    assert _post(server, "Second", "node-b") == []

    broken.unlink()
    mark = len(server.log_path.read_text())
    applied = _reload(server, server.token)

    assert applied.status_code == 200, applied.text
    assert applied.json() == {"reloaded": True, "count": 2, "playbooks": ["first", "second"], "sinks": []}
    _log_after(server, mark, 'reload outcome=applied playbooks=2 loaded="2 playbooks (first, second)')
    _log_after(server, mark, "executor process: reloaded 2 playbooks (first, second)")
    # Every HTTP worker was replaced; the executor process was not (its runs go on).
    wait_until(lambda: not _workers(server, executor) & workers, WAIT, message="the old workers replaced")
    assert executor in child_pids(server.pid)
    for node in ("node-c", "node-d", "node-e", "node-f"):  # both workers, whichever takes each
        (run,) = _post(server, "Second", node)
        assert server.wait_for_run_status(run, "succeeded")["playbook"] == "second"


def test_sighup_to_the_master_refuses_a_bad_file_then_reloads(
    playbooks_dir: Path, start_server: Callable[..., RemediateServer]
) -> None:
    write_playbook(playbooks_dir, "first", _logged("first", "First"))
    server = start_server(workers=2, executor_threads=1)
    executor = _executor_pid(server)
    workers = _workers(server, executor)

    broken = write_playbook(playbooks_dir, "broken", "name: broken\nmatch: [not a mapping\n")
    write_playbook(playbooks_dir, "second", _logged("second", "Second"))
    mark = len(server.log_path.read_text())
    server._proc.send_signal(signal.SIGHUP)

    line = _log_after(server, mark, "reload outcome=refused")  # the audit event (docs/logging.md)
    assert str(broken) in line and "not valid YAML" in line, line
    assert 'running="1 playbooks (first)' in line, line
    assert _workers(server, executor) == workers
    assert _post(server, "Second", "node-a") == []

    broken.unlink()
    mark = len(server.log_path.read_text())
    server._proc.send_signal(signal.SIGHUP)

    _log_after(server, mark, 'reload outcome=applied playbooks=2 loaded="2 playbooks (first, second)')
    _log_after(server, mark, "executor process: reloaded 2 playbooks")
    wait_until(lambda: not _workers(server, executor) & workers, WAIT, message="the old workers replaced")
    assert executor in child_pids(server.pid)
    (run,) = _post(server, "Second", "node-b")
    assert server.wait_for_run_status(run, "succeeded")["playbook"] == "second"


def _held(url: str, version: str) -> str:
    """A run held in its first step (a POST the recorder answers when the test says) then one that says `version`."""
    return f"""\
name: held
match: {{alertname: Held}}
steps:
  - {{name: hold, action: notify.webhook, with: {{url: "{url}", message: hold, timeout: 120}}, retries: 0}}
  - {{name: say, action: notify.webhook, with: {{url: "{url}", message: "{version}"}}, retries: 0}}
"""


def test_a_run_running_during_a_reload_finishes_with_the_steps_it_started_with(
    playbooks_dir: Path, start_server: Callable[..., RemediateServer], recorder: WebhookRecorder
) -> None:
    recorder.gate = threading.Event()
    held = write_playbook(playbooks_dir, "held", _held(recorder.url, "v1"))
    server = start_server(workers=2, executor_threads=2)
    executor = _executor_pid(server)
    (old,) = _post(server, "Held", "node-a")
    recorder.wait_for(lambda r: r.json["run_id"] == old and r.json["message"] == "hold")

    held.write_text(_held(recorder.url, "v2"))  # the playbook edited while its run is in its first step
    workers, mark = _workers(server, executor), len(server.log_path.read_text())
    assert _reload(server, server.token).status_code == 200
    _applied_everywhere(server, mark, executor, workers)
    (new,) = _post(server, "Held", "node-b")
    recorder.wait_for(lambda r: r.json["run_id"] == new and r.json["message"] == "hold")
    recorder.gate.set()

    for run in (old, new):
        assert server.wait_for_run_status(run, "succeeded", "failed")["status"] == "succeeded"
    said = {r.json["run_id"]: r.json["message"] for r in recorder.requests if r.json["message"] != "hold"}
    assert said == {old: "v1", new: "v2"}
    assert executor in child_pids(server.pid)  # never restarted: the run went on in it


def test_a_server_without_an_executor_process_reloads_too(
    playbooks_dir: Path, start_server: Callable[..., RemediateServer]
) -> None:
    """--executor-threads 0 (replicas that only take webhooks): gunicorn's master without one, same SIGHUP."""
    write_playbook(playbooks_dir, "first", _logged("first", "First"))
    server = start_server(workers=1, executor_threads=0)
    (worker,) = child_pids(server.pid)
    write_playbook(playbooks_dir, "second", _logged("second", "Second"))
    mark = len(server.log_path.read_text())

    assert _reload(server, server.token).json()["count"] == 2

    _log_after(server, mark, 'reload outcome=applied playbooks=2 loaded="2 playbooks (first, second)')
    wait_until(lambda: worker not in child_pids(server.pid), WAIT, message="the old worker replaced")
    assert len(_post(server, "Second", "node-a")) == 1  # queued for an executor elsewhere


TOLD = """\
name: told
match: {alertname: Told}
steps:
  - {name: tell, action: notify, with: {sink: oncall, message: "told {{ labels.node }}"}, retries: 0}
"""


def test_a_reload_reads_the_sinks_of_the_settings_file_again(
    tmp_path: Path, playbooks_dir: Path, start_server: Callable[..., RemediateServer], recorder: WebhookRecorder
) -> None:
    """The settings file's `sinks` are part of the live set: a sink added there reaches the executor process
    with a reload, and a sink written wrong is refused (naming the file) while the running sinks go on."""
    settings_file = tmp_path / "remediate.yaml"
    settings_file.write_text("sinks: {}\n")
    write_playbook(playbooks_dir, "told", TOLD)
    server = start_server(workers=1, executor_threads=1, env={"REMEDIATE_CONFIG": str(settings_file)})
    executor = _executor_pid(server)
    (before,) = _post(server, "Told", "node-a")
    failed = server.wait_for_run_status(before, "succeeded", "failed")
    assert failed["status"] == "failed" and "sink 'oncall' is not configured" in str(failed), failed

    settings_file.write_text(f"sinks:\n  oncall: {{type: webhook, url: '{recorder.url}'}}\n")
    workers, mark = _workers(server, executor), len(server.log_path.read_text())
    applied = _reload(server, server.token)

    assert applied.status_code == 200, applied.text
    assert applied.json()["sinks"] == ["oncall"] and "warning" not in applied.json()
    _applied_everywhere(server, mark, executor, workers)
    (after,) = _post(server, "Told", "node-b")
    assert server.wait_for_run_status(after, "succeeded", "failed")["status"] == "succeeded"
    assert [r.json["message"] for r in recorder.requests] == ["told node-b"]

    settings_file.write_text("sinks:\n  oncall: {type: webhook, url: 'https://hooks.example/x?token=abc'}\n")
    refused = _reload(server, server.token)

    assert refused.status_code == 422, refused.text
    assert refused.json()["file"] == str(settings_file) and "sinks.oncall.url" in refused.json()["message"]
    (again,) = _post(server, "Told", "node-c")
    assert server.wait_for_run_status(again, "succeeded", "failed")["status"] == "succeeded"  # the running sink
    assert [r.json["message"] for r in recorder.requests] == ["told node-b", "told node-c"]
