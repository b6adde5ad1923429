"""`remediate replay` and `remediate db copy` of a SQLite file from elsewhere: the file is data, never code.

Each file is a real remediate database (Store.open made its schema) changed with Python's own sqlite3, then
given to the real CLI as a process (a query that never ends would hang an in-process test). Each answer is
one line naming what is wrong and exit 2, within the test's timeout."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from remediate.store import Store
from remediate.store import copy as dbcopy
from remediate.store.source_guard import SourceQueryTooLong, time_limited
from tests.support.processes import run_remediate
from tests.support.waiting import scaled

RECURSIVE_ALERTS = """CREATE VIEW alerts
(id, notification_id, fingerprint, alertname, status, starts_at, ends_at, labels, annotations, generator_url) AS
WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
SELECT x, 1, 'f', 'X', 'firing', '2026-01-01T00:00:00Z', NULL, '{}', '{}', '' FROM r"""

SLOW_COUNT = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 3000000000) SELECT count(*) FROM r"
)
"""Minutes of counting: what the time limit must stop (bounded, so that a broken limit fails, never hangs)."""


def remediate_file(path: Path, change: Callable[[sqlite3.Connection], None]) -> str:
    """A remediate database at `path` holding one notification of a minute ago, then `change`d; its URL."""
    Store.open(f"sqlite:///{path}").close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "INSERT INTO notifications (id, received_at, receiver, status, group_key, alert_count, raw) "
            "VALUES (1, ?, 'remediate', 'firing', '{}:{}', 1, '{}')",
            (time.time() - 60,),
        )
        change(conn)
        conn.commit()
    return f"sqlite:///{path}"


def alert_with_labels(labels: str) -> Callable[[sqlite3.Connection], None]:
    def change(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO alerts (id, notification_id, fingerprint, alertname, status, starts_at, ends_at, labels, "
            "annotations, generator_url) "
            "VALUES (7, 1, 'f1', 'GpuXidError', 'firing', '2026-01-01T00:00:00Z', NULL, ?, '{}', '')",
            (labels,),
        )

    return change


def alerts_as(create: str) -> Callable[[sqlite3.Connection], None]:
    def change(conn: sqlite3.Connection) -> None:
        conn.execute("DROP TABLE alerts")
        conn.execute(create)

    return change


def replay_of(url: str, tmp_path: Path) -> list[str]:
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    return ["replay", "--playbooks", str(tmp_path / "playbooks"), "--database-url", url]


def copy_of(url: str, tmp_path: Path) -> list[str]:
    return ["db", "copy", "--from", url, "--to", f"sqlite:///{tmp_path / 'target.db'}"]


COMMANDS = {"replay": replay_of, "db copy": copy_of}


def assert_refused(result: object, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    last = result.stderr.strip().splitlines()[-1]  # type: ignore[attr-defined]
    assert "Traceback" not in result.stderr and last.startswith("Error: "), result.stderr  # type: ignore[attr-defined]
    for word in words:
        assert word in last, last


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("labels", "says"), [("not json{", "is not JSON"), ('["a list"]', "JSON list, not an object")])
def test_labels_that_are_not_a_json_object_name_their_row_and_column(
    tmp_path: Path, command: str, labels: str, says: str
) -> None:
    url = remediate_file(tmp_path / "source.db", alert_with_labels(labels))

    result = run_remediate(*COMMANDS[command](url, tmp_path), timeout=60)

    assert_refused(result, "alerts row 7", "column labels", says)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("create", "says"),
    [
        (RECURSIVE_ALERTS, "the source's alerts is a view, not a table"),
        ("CREATE VIRTUAL TABLE alerts USING fts5(labels)", "the source's alerts is a virtual table"),
    ],
)
def test_an_alerts_view_or_virtual_table_is_refused_before_it_runs(
    tmp_path: Path, command: str, create: str, says: str
) -> None:
    """An `alerts` VIEW with a recursive CTE ran forever: now refused at once, the view never queried."""
    url = remediate_file(tmp_path / "source.db", alerts_as(create))

    result = run_remediate(*COMMANDS[command](url, tmp_path), timeout=60)

    assert_refused(result, says)
    assert not (tmp_path / "target.db").exists()


def test_the_source_is_read_only_untrusting_and_each_query_has_a_time_limit(tmp_path: Path) -> None:
    url = remediate_file(tmp_path / "source.db", lambda conn: None)
    engine = dbcopy._open_source(url, time_limit=0.2)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA trusted_schema").scalar_one() == 0
            with pytest.raises(sa.exc.OperationalError, match="readonly"):
                conn.exec_driver_sql("DELETE FROM notifications")
        started = time.monotonic()
        with (
            pytest.raises(SourceQueryTooLong, match=r"time limit \(0.2 s\)"),
            time_limited(0.2),
            engine.connect() as conn,
        ):
            conn.exec_driver_sql(SLOW_COUNT)
        assert time.monotonic() - started < scaled(30)  # stopped by the limit, long before the count ends
        with engine.connect() as conn:  # the next query has its own clock
            assert conn.exec_driver_sql("SELECT count(*) FROM notifications").scalar_one() == 1
    finally:
        engine.dispose()


def test_a_postgresql_source_has_the_time_limit_and_its_views_are_refused(pg_store_url: str, tmp_path: Path) -> None:
    engine = dbcopy._open_source(pg_store_url, time_limit=0.2)
    try:
        with pytest.raises(SourceQueryTooLong, match="time limit"), time_limited(0.2), engine.connect() as conn:
            conn.exec_driver_sql("SELECT pg_sleep(30)")
    finally:
        engine.dispose()
    admin = sa.create_engine(pg_store_url, poolclass=sa.pool.NullPool)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql("DROP TABLE alerts CASCADE")
            conn.exec_driver_sql(RECURSIVE_ALERTS)
    finally:
        admin.dispose()

    for command in COMMANDS.values():
        result = run_remediate(*command(pg_store_url, tmp_path), timeout=60)
        assert_refused(result, "the source's alerts is a view, not a table")
