"""The processes of the real ``remediate serve`` (gunicorn as designed, picked by PSS).

The process started is the master for the server's life: after its start-up checks it imports the app
(Flask, the store, the engine, the actions) and forks its HTTP workers and the executor process, which share
those pages with it (a memory cgroup charges a shared page once). What a process loaded is read from its
memory map: SQLAlchemy's compiled modules and sqlite3's are in the master before any child is forked.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
import requests

from tests.support.processes import child_pids
from tests.support.realsystems import wait_until
from tests.support.server import WAIT, RemediateServer, notification, write_playbook

pytestmark = [pytest.mark.integration]

PLAYBOOK = """\
name: logged
match: {alertname: [Logged]}
steps:
  - action: log
    with: {message: "seen {{ labels.alertname }}"}
"""

# Extension modules only a process that imported the store (SQLAlchemy, sqlite3) or the engine (orjson) maps.
STORE_EXTENSIONS = ("/sqlalchemy/", "/_sqlite3.", "/orjson/")


def _mapped_files(pid: int) -> set[str]:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6}


def _store_extensions(pid: int) -> set[str]:
    return {path for path in _mapped_files(pid) if any(part in path for part in STORE_EXTENSIONS)}


def test_the_process_started_imports_the_app_and_forks_children_that_serve(tmp_path: Path) -> None:
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=1).start()
    try:
        # The pid the test started is the master itself (nothing re-executed behind it): `ps` shows it by its
        # role (before, it showed the command it was started as).
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
        assert command == b"remediate: master", command
        # It imported the store before forking: each child shares those pages with it.
        assert {"/sqlalchemy/", "/_sqlite3.", "/orjson/"} <= {
            part for part in STORE_EXTENSIONS for path in _store_extensions(server.pid) if part in path
        }
        wait_until(lambda: len(child_pids(server.pid)) == 2, 10, message="the worker and the executor process")
        # Its start-up checks opened the store and closed it: no database file is open in the master, so no
        # connection crosses a fork (each child opens its own).
        open_files = {os.readlink(fd) for fd in Path(f"/proc/{server.pid}/fd").iterdir() if fd.is_symlink()}
        assert not {path for path in open_files if path.startswith(str(server.db_path))}, open_files

        # The children serve: an alert posted to a worker runs in the executor process.
        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(status="succeeded")["playbook"] == "logged"

        server._proc.send_signal(signal.SIGTERM)  # graceful stop
        assert server._proc.wait(timeout=20) == 0
    finally:
        server.stop()


def test_the_master_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    """A package in the server's working directory named like ours is never what the server imports."""
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=0)
    planted = server.workdir / "remediate"  # the server's working directory: a package named like ours
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("raise SystemExit('imported remediate from the working directory')\n")
    server.start()  # the installed console script, as a user runs it: no working directory on sys.path
    try:
        assert server.post_webhook(notification("Logged", {"node": "node-a"})).status_code == 200
    finally:
        server.stop()
    assert "imported remediate from the working directory" not in server.log_path.read_text()


def test_the_executor_process_checkpoints_the_log_for_every_process(tmp_path: Path) -> None:
    """A webhook's commit does not checkpoint SQLite's log; the executor process does, within a second."""
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=1).start()
    try:
        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 200, answer.text
        run_id = server.wait_for_run(status="succeeded")["run_id"]

        def checkpointed_runs() -> list[tuple[int, str]]:
            # The database file alone, without its log: what has been checkpointed into it. A few dozen pages
            # are far under SQLite's own autocheckpoint (1,000), so only the checkpointer puts them there.
            copy = tmp_path / "file-alone.db"
            shutil.copyfile(server.db_path, copy)
            with contextlib.closing(sqlite3.connect(copy)) as conn:
                return conn.execute("SELECT id, status FROM runs").fetchall()

        wait_until(lambda: checkpointed_runs() == [(run_id, "succeeded")], 5, message="the run in the file itself")
    finally:
        server.stop()


# --------------------------------------------------------------------------- executor supervision


def _executor_pids(server: RemediateServer) -> list[int]:
    """The executor processes the master started, in order, from its log."""
    found = re.findall(r"Started the executor process \(pid: (\d+)", server.log_path.read_text())
    return [int(pid) for pid in found]


def test_a_sigstopped_executor_process_is_killed_and_replaced_and_runs_go_on(tmp_path: Path) -> None:
    """Finding 8: a SIGSTOPped executor stayed alive to waitpid; /readyz said 200 and nothing restarted it. Its
    heartbeat's age is in /readyz and /metrics, and the master replaces it once that is older than the lease."""
    lease = 5.0  # heartbeats every 1.25 s: a loaded host never makes a live executor look silent
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(
        tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=1, env={"REMEDIATE_LEASE": "5"}
    ).start()
    stopped = 0
    try:
        ready = wait_until(
            lambda: (
                (body := requests.get(f"{server.url}/readyz", timeout=5).json())["executor"]["heartbeat_age_s"]
                is not None
                and body
            ),
            WAIT,
            message="the executor's first beat",
        )
        assert ready["executor"]["lease_s"] == lease
        assert 0 <= ready["executor"]["heartbeat_age_s"] <= lease
        assert 0 <= server.metric("remediate_executor_heartbeat_age_seconds") <= lease
        [stopped] = _executor_pids(server)

        os.kill(stopped, signal.SIGSTOP)
        wait_until(lambda: len(_executor_pids(server)) == 2, WAIT, message="a new executor process")
        log = server.log_tail(200)
        assert f"The executor process (pid: {stopped}) has not beaten for" in log
        assert f"The executor process (pid: {stopped}) was killed by SIGKILL; starting another" in log
        with pytest.raises(ProcessLookupError):
            os.kill(stopped, 0)

        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(status="succeeded")["playbook"] == "logged"
        assert server.starts == 1
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        server.stop()


def test_a_sigkilled_executor_process_is_logged_as_killed_and_replaced(tmp_path: Path) -> None:
    """Finding 9: gunicorn's waitpid(-1) reaped the executor first, and a SIGKILL was logged "exited" (status 0)."""
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=1).start()
    try:
        # The master logs the executor's start once it forked it, which a loaded host may do after /healthz answers.
        [killed] = wait_until(lambda: _executor_pids(server), WAIT, message="the executor process started")
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: len(_executor_pids(server)) == 2, WAIT, message="a new executor process")
        assert f"The executor process (pid: {killed}) was killed by SIGKILL; starting another" in server.log_tail(200)
        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(status="succeeded")["playbook"] == "logged"
    finally:
        server.stop()
