"""Fixtures of the HTTP tests: `make_server(...)` builds real apps on tmp_path (see tests/http/support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http.support import Server, build_server

MakeServer = Callable[..., Server]


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[MakeServer]:
    """make_server(playbooks={"a.yaml": text}, **Settings fields) -> Server; all closed afterwards."""
    built: list[Server] = []

    def make(**kwargs: Any) -> Server:
        server = build_server(tmp_path / f"server-{len(built)}", **kwargs)
        built.append(server)
        return server

    yield make
    for server in built:
        server.close()


@pytest.fixture
def server(make_server: MakeServer) -> Server:
    """A server with the log-xid playbook, a write token and a read token."""
    return make_server()
