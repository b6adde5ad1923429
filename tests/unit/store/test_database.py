"""remediate.store.database: the schema of a fresh database, reopening, refusing a newer one, bad URLs."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from remediate.errors import ConfigError, StoreBusy
from remediate.judging.engine import Engine
from remediate.store import PoolLimits, Store
from remediate.store import schema as t
from tests.conftest import alert_payload, ingest_alerts
from tests.support.postgres import PostgresCluster
from tests.support.stores import EVERY_DATABASE, table_counts
from tests.unit.store.support import T0


@EVERY_DATABASE
def test_a_fresh_database_gets_the_current_schema_version(store: Store, db_url: str) -> None:
    assert store.database.schema_version() == t.SCHEMA_VERSION
    with store.read() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    assert tables >= {"meta", "notifications", "alerts", "runs", "steps", "attempts", "decisions"}
    assert table_counts(store, ("notifications", "alerts", "decisions", "runs", "steps", "attempts")) == dict.fromkeys(
        ("notifications", "alerts", "decisions", "runs", "steps", "attempts"), 0
    )


@EVERY_DATABASE
def test_opening_an_existing_database_keeps_its_data(store: Store, db_url: str, engine: Engine) -> None:
    ingest_alerts(engine, alert_payload("GpuXidError"), at=T0)
    before = table_counts(store)

    again = Store.open(db_url)
    try:
        assert again.database.upgrade() == t.SCHEMA_VERSION  # the version it found: nothing to create
        assert table_counts(again) == before
        assert again.database.schema_version() == t.SCHEMA_VERSION
    finally:
        again.close()


@EVERY_DATABASE
def test_a_database_with_a_newer_schema_is_refused(store: Store, db_url: str) -> None:
    with store.write() as conn:
        conn.execute(sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION + 1)))

    with pytest.raises(ConfigError, match=rf"schema version {t.SCHEMA_VERSION + 1}, newer than this remediate"):
        Store.open(db_url)


def test_a_database_url_that_cannot_work_is_a_config_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="cannot use database URL"):
        Store.open("nosuchdialect://x")
    with pytest.raises(ConfigError, match="cannot open database"):
        Store.open(f"sqlite:///{tmp_path}/missing-dir/r.db")


# PostgreSQL only: SQLite has no connection pool to bound (a connection is a file opened per thread).
def test_the_pool_bounds_a_processs_connections_and_a_full_pool_is_store_busy(pg_url: str) -> None:
    store = Store.open(pg_url, busy_timeout=0.3, pool=PoolLimits(size=2, max_overflow=1))
    database = sa.make_url(pg_url).database
    held: list[Any] = []
    try:
        with contextlib.ExitStack() as stack:
            for _ in range(3):  # pool_size + max_overflow checkouts at once
                conn = stack.enter_context(store.read())
                conn.execute(sa.text("SELECT 1"))
                held.append(conn)
            started = time.monotonic()
            full = pytest.raises(StoreBusy, match=r"no database connection was free within 0.3s \(the pool is full\)")
            with full, store.read():
                pass  # pragma: no cover - the fourth checkout never gets a connection
            assert 0.25 <= time.monotonic() - started < 3
            assert _connections_to(pg_url, database) == 3  # never more than the bound, counted by the server
        with store.read() as conn:  # given back: the next checkout gets one at once
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert store.database.engine.pool.size() == 2  # type: ignore[attr-defined]  # QueuePool
    finally:
        store.close()


def _connections_to(url: str, database: str | None) -> int:
    """Sessions on `database`, as pg_stat_activity counts them (from a connection to another database)."""
    with psycopg.connect(
        sa.make_url(url).set(database="postgres").render_as_string(False).replace("+psycopg", "")
    ) as c:
        row = c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()
    assert row is not None
    return int(row[0])


def test_the_harness_reuses_an_emptied_store_database_and_drops_one_whose_schema_a_test_changed(
    postgres: PostgresCluster,
) -> None:
    """tests/support/postgres.py: a PostgreSQL test's database is recycled only when it is like new."""
    url = postgres.store_database()
    store = Store.open(url)
    store.pause.set(True, by="alice", reason="", now=T0)
    store.close()
    postgres.recycle(url)

    again = postgres.store_database()
    assert again == url  # emptied and handed out again
    store = Store.open(again)
    assert not store.pause.state().paused
    assert store.database.schema_version() == t.SCHEMA_VERSION
    with store.write() as conn:
        conn.exec_driver_sql("CREATE INDEX ix_test_only ON runs (error)")
    store.close()
    postgres.recycle(again)

    fresh = postgres.store_database()
    assert fresh != url  # dropped: the next test gets a fresh copy
    postgres.recycle(fresh)
