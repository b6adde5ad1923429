"""Dialect.insert_rows: the ingest's inserts answer what SQLAlchemy would, and a locked file is StoreBusy.

Each runs on both real databases: SQLite numbers the rows on the driver's cursor, PostgreSQL goes through
SQLAlchemy.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.errors import StoreBusy
from remediate.runs import RunStatus
from remediate.store import Store
from remediate.store import schema as t
from tests.support.stores import EVERY_DATABASE


def _notification(received_at: float = 1.0, **extra: Any) -> dict[str, Any]:
    row = {"received_at": received_at, "receiver": "r", "status": "firing", "group_key": "{}", "alert_count": 1}
    return {**row, "raw": "{}", **extra}


def _alert(notification_id: int, fingerprint: str, status: str = "firing") -> dict[str, Any]:
    return {
        "notification_id": notification_id,
        "fingerprint": fingerprint,
        "alertname": "A",
        "status": status,
        "starts_at": "2026-01-01T00:00:00Z",
        "ends_at": None,
        "labels": "{}",
        "annotations": "{}",
        "generator_url": "",
    }


@EVERY_DATABASE
def test_insert_rows_returns_the_ids_the_database_gave_in_row_order(store: Store) -> None:
    with store.write() as conn:
        (notification,) = store.database.dialect.insert_rows(conn, t.notifications, [_notification()])
        rows = [_alert(notification, f"f{i}") for i in range(5)]
        rows[2]["ends_at"] = "2026-01-01T00:01:00Z"
        ids = store.database.dialect.insert_rows(conn, t.alerts, rows)
        # A row with other columns (the server default of a column left out) in the same call.
        more = store.database.dialect.insert_rows(conn, t.alerts, [_alert(notification, "g0")])

    assert len(set(ids)) == 5 and ids == sorted(ids) and more[0] > ids[-1]
    with store.read() as conn:
        stored = dict(conn.execute(sa.select(t.alerts.c.id, t.alerts.c.fingerprint)).all())
    assert [stored[i] for i in ids] == [f"f{i}" for i in range(5)]
    assert stored[more[0]] == "g0"


@EVERY_DATABASE
def test_insert_rows_numbers_after_rows_written_the_usual_way(store: Store) -> None:
    with store.write() as conn:
        first = conn.execute(sa.insert(t.notifications).values(_notification()).returning(t.notifications.c.id))
        written = first.scalar_one()
        (mine,) = store.database.dialect.insert_rows(conn, t.notifications, [_notification(2.0)])
        after = conn.execute(sa.insert(t.notifications).values(_notification(3.0)).returning(t.notifications.c.id))
        later = after.scalar_one()

    assert written < mine < later


@EVERY_DATABASE
def test_a_unique_violation_in_insert_rows_is_sqlalchemys_integrity_error(store: Store) -> None:
    with store.write() as conn:
        (notification,) = store.database.dialect.insert_rows(conn, t.notifications, [_notification()])
        (alert,) = store.database.dialect.insert_rows(conn, t.alerts, [_alert(notification, "f")])
    run = {
        "dedupe_key": "same", "playbook": "p", "alertname": "A", "target": "n", "guard_key": "n",
        "phase": "firing", "mode": "enforce", "status": RunStatus.QUEUED, "alert_id": alert,
        "created_at": 1.0, "updated_at": 1.0,
    }  # fmt: skip

    with pytest.raises(sa.exc.IntegrityError), store.write() as conn:
        store.database.dialect.insert_rows(conn, t.runs, [run, dict(run)])

    with store.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one() == 0


def test_a_database_locked_by_another_program_is_store_busy_at_begin(store: Store, tmp_path: Any) -> None:
    """Another program holding SQLite's lock past the busy timeout: StoreBusy (the dialect begins on the driver)."""
    busy = Store.open(str(store.database.engine.url), busy_timeout=0.2)
    holder = sqlite3.connect(store.database.engine.url.database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    released = threading.Timer(5.0, holder.rollback)
    released.start()
    started = time.monotonic()
    try:
        with pytest.raises(StoreBusy), busy.write() as conn:
            conn.execute(sa.select(t.meta.c.value)).all()
    finally:
        released.cancel()
        holder.rollback()
        holder.close()
        busy.close()
    assert time.monotonic() - started < 4.0
