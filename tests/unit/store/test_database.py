"""remediate.store.database: the schema of a fresh database, reopening, refusing a newer one, bad URLs."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from remediate import schema as t
from remediate.engine import Engine
from remediate.errors import ConfigError
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0, Ingest, MakeAlert


@EVERY_DATABASE
def test_a_fresh_database_gets_the_current_schema_version(store: Store, db_url: str) -> None:
    assert store.schema_version() == t.SCHEMA_VERSION
    with store.read() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    assert tables >= {"meta", "notifications", "alerts", "runs", "steps", "attempts", "decisions"}
    assert store.counts() == {"notifications": 0, "alerts": 0, "decisions": 0, "runs": 0, "steps": 0}


@EVERY_DATABASE
def test_opening_an_existing_database_keeps_its_data(
    store: Store, db_url: str, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    ingest(engine, make_alert("GpuXidError"), at=T0)
    before = store.counts()

    again = Store.open(db_url)
    try:
        assert again.upgrade() == t.SCHEMA_VERSION  # the version it found: nothing to create
        assert again.counts() == before
        assert again.schema_version() == t.SCHEMA_VERSION
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


@EVERY_DATABASE
def test_ping_reaches_the_database(store: Store) -> None:
    store.ping()
