"""remediate.store.dialect / database.dialect_for: what differs between databases goes through one object.

The tests on the `store` fixture check SQLite's side of the difference (BEGIN IMMEDIATE);
PostgreSQL's side runs in test_contract, test_queue and test_breaker on a real server.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.errors import StoreBusy, StoreRefused, StoreUnreachable
from remediate.store import Dialect, PostgresDialect, SqliteDialect, Store, dialect_for
from remediate.store.retention import PRUNED_TABLES
from tests.support.retention import fill


class RecordingConnection:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def exec_driver_sql(self, statement: str) -> Any:
        self.statements.append(statement)


def _operational_error(message: str) -> sa.exc.OperationalError:
    return sa.exc.OperationalError("BEGIN IMMEDIATE", {}, sqlite3.OperationalError(message))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///remediate.db", SqliteDialect),
        ("sqlite+pysqlite:///:memory:", SqliteDialect),
        ("postgresql://remediate@db/remediate", PostgresDialect),
        ("postgresql+psycopg://remediate@db/remediate", PostgresDialect),
        ("mysql+pymysql://remediate@db/remediate", Dialect),
    ],
)
def test_the_dialect_comes_from_the_url(url: str, expected: type[Dialect]) -> None:
    assert dialect_for(sa.make_url(url)) is expected


def test_only_sqlites_locked_error_is_store_busy() -> None:
    dialect = SqliteDialect(sa.make_url("sqlite:///r.db"), busy_timeout=2.5)

    busy = dialect.busy(_operational_error("database is locked"))

    assert isinstance(busy, StoreBusy) and "2.5s" in str(busy)
    assert dialect.busy(_operational_error("disk I/O error")) is None
    assert Dialect(sa.make_url("postgresql://db/r")).busy(_operational_error("database is locked")) is None


def test_a_server_database_locks_the_breaker_table_and_sqlite_needs_nothing() -> None:
    server, sqlite_conn = RecordingConnection(), RecordingConnection()

    Dialect(sa.make_url("postgresql://db/r")).lock_breaker(server)  # type: ignore[arg-type]
    SqliteDialect(sa.make_url("sqlite:///r.db")).lock_breaker(sqlite_conn)  # type: ignore[arg-type]

    assert server.statements == ["LOCK TABLE breaker_claims IN SHARE ROW EXCLUSIVE MODE"]
    assert sqlite_conn.statements == []


def test_sqlite_writes_begin_immediate(store: Store) -> None:
    begun: list[str] = []
    # The dialect begins on the driver's connection (not through SQLAlchemy's execute): SQLite's own
    # trace of every statement a connection runs sees it.
    store.database.engine.dispose()
    sa.event.listen(store.database.engine, "connect", lambda dbapi, _record: dbapi.set_trace_callback(begun.append))

    with store.write():
        pass
    with store.read() as conn:
        conn.execute(sa.text("SELECT 1"))

    assert "BEGIN IMMEDIATE" in begun
    assert "BEGIN DEFERRED" in begun


def test_the_store_engine_has_no_connection_event_listener(store: Store) -> None:
    """SQLAlchemy dispatches its connection events around every statement of an engine with one listener of
    them (its "begin" recipe for pysqlite was one): that doubled a write transaction's CPU, so the dialect
    begins on the driver's connection instead (docs/benchmarks.md)."""
    assert not store.database.engine._has_events


def test_a_prune_on_postgresql_plans_its_queries_on_fresh_statistics(pg_url: str) -> None:
    """A burst of inserts that autovacuum has not analysed yet made PostgreSQL plan the prune's correlated
    checks as nested loops over 'empty' tables (minutes for 3,000 runs): each prune analyses first."""
    store = Store.open(pg_url)
    try:
        fill(store, 30, time.time() - 200 * 86400)
        store.retention.prune(90 * 86400, now=time.time(), dry_run=True)
        with store.read() as conn:
            analysed = set(
                conn.execute(sa.text("SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL"))
                .scalars()
                .all()
            )
    finally:
        store.close()
    assert set(PRUNED_TABLES) <= analysed


# --------------------------------------------------------------------------- what the database refuses


def _sqlite_error(code: int, message: str) -> sa.exc.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return sa.exc.OperationalError("COMMIT", {}, error)


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"SQLSTATE {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        (sqlite3.SQLITE_FULL, True),
        (sqlite3.SQLITE_READONLY, True),
        (sqlite3.SQLITE_IOERR_WRITE, True),  # an extended code: its low byte is IOERR
        (sqlite3.SQLITE_CORRUPT, True),
        (sqlite3.SQLITE_CANTOPEN, True),
        (sqlite3.SQLITE_CONSTRAINT, False),  # the statement's own fault: a bug or a conflict, not the store's
        (sqlite3.SQLITE_ERROR, False),
    ],
)
def test_sqlite_errors_of_the_file_are_store_refused(code: int, refused: bool) -> None:
    dialect = SqliteDialect(sa.make_url("sqlite:///r.db"))
    found = dialect.unavailable(_sqlite_error(code, "database or disk is full"))
    assert isinstance(found, StoreRefused) is refused
    if refused:
        assert "refused the transaction: database or disk is full" in str(found)


@pytest.mark.parametrize(
    ("sqlstate", "kind"),
    [
        ("53100", StoreRefused),  # disk full
        ("53200", StoreRefused),  # out of memory
        ("58030", StoreRefused),  # I/O error
        ("40001", StoreRefused),  # serialization failure
        ("40P01", StoreRefused),  # deadlock detected
        ("25006", StoreRefused),  # read-only transaction (a standby after a fail-over)
        ("57P01", StoreUnreachable),  # admin shutdown
        ("08006", StoreUnreachable),  # connection failure
        ("55P03", StoreBusy),  # lock_timeout
        ("23505", type(None)),  # unique violation: the ingest's StoreConflict decides, not this
        ("42P01", type(None)),  # undefined table: a bug
    ],
)
def test_postgresql_errors_map_to_what_the_executor_and_requests_do_with_them(sqlstate: str, kind: type) -> None:
    dialect = PostgresDialect(sa.make_url("postgresql+psycopg://u:secret@db/remediate"))
    found = dialect.unavailable(sa.exc.OperationalError("COMMIT", {}, _PgError(sqlstate)))
    assert type(found) is kind
    assert "secret" not in str(found)
