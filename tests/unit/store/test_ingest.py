"""remediate.store.ingest: the guard locks of an ingest transaction (Dialect.lock_guards) and StoreConflict.

On PostgreSQL, two transactions locking one guard name wait for each other, different names do not,
and a notification touching more than MAX_GUARD_LOCKS names holds every ingest off instead of taking
thousands of advisory locks. SQLite and unknown server databases lock nothing here (SQLite's writers
are serialised anyway). A waiter gives up after the store's busy timeout (lock_timeout): StoreBusy, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.errors import StoreBusy
from remediate.store import Database, Dialect, SqliteDialect
from remediate.store.postgres import MAX_GUARD_LOCKS


class RecordingConnection:
    def __init__(self) -> None:
        self.statements: list[Any] = []

    def execute(self, statement: Any, *args: Any) -> Any:
        self.statements.append(statement)

    def exec_driver_sql(self, statement: str) -> Any:
        self.statements.append(statement)


@pytest.fixture
def two_databases(pg_url: str) -> Iterator[tuple[Database, Database]]:
    """Two replicas' databases (each its own engine and pool) on one PostgreSQL database."""
    first, second = Database.open(pg_url, busy_timeout=0.1), Database.open(pg_url, busy_timeout=0.1)
    yield first, second
    first.close()
    second.close()


def _locks(database: Database, names: list[str]) -> bool:
    """Whether a transaction of `database` gets the guard locks of `names` within its busy timeout."""
    try:
        with database.write() as conn:
            database.dialect.lock_guards(conn, names)
    except StoreBusy:
        return False
    return True


def _advisory_locks_held(conn: sa.Connection) -> list[str]:
    return list(
        conn.execute(
            sa.text("SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY mode")
        ).scalars()
    )


def test_one_guard_name_holds_off_another_transaction_until_commit_and_others_pass(
    two_databases: tuple[Database, Database],
) -> None:
    first, second = two_databases
    with first.write() as conn:
        first.dialect.lock_guards(conn, ["storm\x1fnode-1", "storm\x1fnode-2", "storm\x1fnode-1"])
        # The ingest lock shared, and each distinct guard name once.
        assert _advisory_locks_held(conn) == ["ExclusiveLock", "ExclusiveLock", "ShareLock"]

        assert not _locks(second, ["storm\x1fnode-2"])
        assert not _locks(second, ["storm\x1fnode-9", "storm\x1fnode-1"])
        assert _locks(second, ["storm\x1fnode-3"])
        assert _locks(second, ["other\x1fnode-1"])  # another playbook's cooldown on the same node
    assert _locks(second, ["storm\x1fnode-1", "storm\x1fnode-2"])  # released by the commit


def test_a_rollback_releases_the_guard_locks(two_databases: tuple[Database, Database]) -> None:
    first, second = two_databases
    with pytest.raises(ZeroDivisionError), first.write() as conn:
        first.dialect.lock_guards(conn, ["storm\x1fnode-1"])
        raise ZeroDivisionError

    assert _locks(second, ["storm\x1fnode-1"])


def test_a_notification_over_the_lock_budget_holds_every_ingest_off_with_one_lock(
    two_databases: tuple[Database, Database],
) -> None:
    first, second = two_databases
    many = [f"storm\x1fnode-{i}" for i in range(MAX_GUARD_LOCKS + 1)]
    with first.write() as conn:
        first.dialect.lock_guards(conn, many)
        assert _advisory_locks_held(conn) == ["ExclusiveLock"]

        assert not _locks(second, ["unrelated\x1fnode-x"])
    with first.write() as conn:
        first.dialect.lock_guards(conn, ["storm\x1fnode-1"])
        assert not _locks(second, many)  # and it waits for the ingests holding the lock shared
    assert _locks(second, many)


def test_a_guard_lock_held_past_the_busy_timeout_is_store_busy(pg_url: str) -> None:
    """A replica stuck inside its ingest transaction holds the others off for store_busy_timeout at most."""
    holder, waiter = Database.open(pg_url), Database.open(pg_url, busy_timeout=0.2)
    try:
        with holder.write() as conn:
            holder.dialect.lock_guards(conn, ["storm\x1fnode-1"])
            with pytest.raises(StoreBusy, match=r"0\.2s"), waiter.write() as other:
                waiter.dialect.lock_guards(other, ["storm\x1fnode-1"])
        with waiter.write() as other:
            waiter.dialect.lock_guards(other, ["storm\x1fnode-1"])
    finally:
        holder.close()
        waiter.close()


def test_sqlite_and_an_unknown_server_database_lock_nothing() -> None:
    sqlite_conn, server = RecordingConnection(), RecordingConnection()

    SqliteDialect(sa.make_url("sqlite:///r.db")).lock_guards(sqlite_conn, ["storm\x1fnode-1"])  # type: ignore[arg-type]
    Dialect(sa.make_url("mysql://db/r")).lock_guards(server, ["storm\x1fnode-1"])  # type: ignore[arg-type]

    assert sqlite_conn.statements == server.statements == []
