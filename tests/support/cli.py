"""Fixtures of the CLI tests: a clean environment, a CliRunner on `remediate.cli.main`, real stores
and a real HTTP server in a thread for the --server mode."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from werkzeug.serving import WSGIRequestHandler
from werkzeug.serving import make_server as make_http_server

from remediate.cli import main
from tests.support.http import Server


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No REMEDIATE_* from the caller's shell, and a working directory with no playbooks/ or remediate.db.

    Not autouse (it would change every test's environment): a CLI test module names it in its pytestmark.
    """
    for name in list(os.environ):
        if name.startswith("REMEDIATE_") or name == "PROMETHEUS_MULTIPROC_DIR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("USER", "tester")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def assert_one_line_error(result: Result, *words: str, progress: str | None = None, code: int = 2) -> None:
    """Exit `code` (2; 3 not found, 4 refused), nothing on stdout, and on stderr the error as one line naming
    `words`: never a traceback. `progress`: the pattern of the lines a command may print before it (db copy: the
    tables done so far)."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    *before, message = result.stderr.strip().split("\n")
    assert all(progress and re.fullmatch(progress, line) for line in before), result.stderr
    assert "Traceback" not in message and message.startswith("Error: "), message
    for word in words:
        assert word in message, message


def sqlite_dump(path: Path) -> list[str]:
    """Every row of every table of a SQLite file, as SQL: equal dumps mean nothing was written."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return list(conn.iterdump())


def run_cli(*args: Any, **kwargs: Any) -> Result:
    """run_cli("history", "--json", input=..., env=...) -> click Result (stdout and stderr kept apart)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kwargs)


class _QuietHandler(WSGIRequestHandler):
    def log(self, type: str, message: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Server], str]]:
    """serve(server) -> base URL of that app, served over real HTTP by werkzeug in a thread."""
    running: list[tuple[Any, threading.Thread]] = []

    def start(server: Server) -> str:
        http = make_http_server("127.0.0.1", 0, server.app, threaded=True, request_handler=_QuietHandler)
        thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        running.append((http, thread))
        return f"http://127.0.0.1:{http.server_port}"

    yield start
    for http, thread in running:
        http.shutdown()
        http.server_close()
        thread.join(timeout=5)
