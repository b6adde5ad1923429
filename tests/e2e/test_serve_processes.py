"""The processes of the real ``remediate serve`` (issue 14: the server idles in <= 200 MB).

After its start-up checks the CLI process execs a fresh interpreter that is only gunicorn's master (the same
pid: whoever started the server still holds its master), so the master holds neither the store nor Flask nor
the actions, and each process it forks loads only what it uses. What a process loaded is read from its
memory map: SQLAlchemy's compiled modules, sqlite3's and orjson's are there in every worker and the executor
process, never in the master.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.support.processes import child_pids
from tests.support.realsystems import wait_until
from tests.support.server import RemediateServer, notification, write_playbook

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


def test_the_master_is_a_fresh_interpreter_without_the_store_and_its_children_work(tmp_path: Path) -> None:
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=1).start()
    try:
        # The pid the test started is the master, now running the entry `_become_master` exec'd.
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert b"-c" in command and any(b"master_main" in part for part in command), command
        assert _store_extensions(server.pid) == set()
        wait_until(lambda: len(child_pids(server.pid)) == 2, 10, message="the worker and the executor process")
        for child in child_pids(server.pid):  # the list is read: each child loaded the store itself
            assert {"/sqlalchemy/", "/_sqlite3."} <= {
                part for part in STORE_EXTENSIONS for path in _store_extensions(child) if part in path
            }

        # The children serve: an alert posted to a worker runs in the executor process.
        answer = server.post_webhook(notification("Logged", {"node": "node-a"}))
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(status="succeeded")["playbook"] == "logged"
        assert _store_extensions(server.pid) == set()  # still: the master never handles a request

        server._proc.send_signal(signal.SIGTERM)  # graceful stop, as before the exec
        assert server._proc.wait(timeout=20) == 0
    finally:
        server.stop()


def test_the_master_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    """`python -c` would put the working directory first on sys.path; the exec'd master runs with -P."""
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", tmp_path / "playbooks", workers=1, executor_threads=0)
    planted = server.workdir / "remediate"  # the server's working directory: a package named like ours
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("raise SystemExit('imported remediate from the working directory')\n")
    console_script = Path(sys.executable).parent / "remediate"  # as installed: no working directory on sys.path
    server.command = lambda threads: [str(console_script), *RemediateServer.command(server, threads)[3:]]  # type: ignore[method-assign]
    server.start()
    try:
        command = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert b"-P" in command, command
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
