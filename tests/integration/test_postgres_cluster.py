"""The tests' own PostgreSQL (tests/support/postgres.py) starts even when its port is taken first: in 4 xdist
workers another test's server may bind the port between asking for it and PostgreSQL binding it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import postgres
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.integration]


def test_a_cluster_whose_port_was_taken_first_starts_on_another(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        real_free_port = postgres._free_port
        ports: Iterator[int] = iter([taken_port])
        monkeypatch.setattr(postgres, "_free_port", lambda: next(ports, None) or real_free_port())

        cluster = PostgresCluster.start()
        try:
            assert cluster.port != taken_port
            with psycopg.connect(cluster.url(driver="postgresql")) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            cluster.stop()


def test_a_cluster_that_cannot_start_for_another_reason_says_why_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "_free_port", lambda: 1)  # a privileged port: not "already in use"
    with pytest.raises(postgres.PostgresUnavailable, match="did not start") as raised:
        PostgresCluster.start()
    assert "Address already in use" not in str(raised.value)
