"""Reading a database file from elsewhere (`db copy`'s source, `replay`'s recording) as data, never as code.

A SQLite file brings its own schema: an `alerts` that is a VIEW (a recursive CTE that never ends), a trigger
or a generated column calling functions, a virtual table. remediate only ever wrote plain tables, so the
tables it reads must be plain tables (sqlite_master type 'table', created by CREATE TABLE), the file is opened
read-only with `trusted_schema=OFF` (SQLite then runs no function or virtual table from the schema), and every
query has a time limit (sqlite3's progress handler; PostgreSQL's statement_timeout), past which it is stopped
with an error that says so. A column remediate wrote as JSON that is not JSON names its row and column.

Called by remediate.store.copy (`_open_source`, `_check_source`) and remediate.rehearsal.replay.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from remediate.errors import DatabaseCopyError

QUERY_TIME_LIMIT_S = 300.0
"""The longest one query on a source database may run (a batch of 1000 rows takes milliseconds)."""
PROGRESS_STEPS = 10_000
"""SQLite virtual-machine steps between two looks at the clock (~a millisecond)."""


class SourceQueryTooLong(DatabaseCopyError):
    """A query on the source database ran past its time limit and was stopped."""


class _Deadline:
    """The time limit of the query running now: reset before each statement, read by SQLite's progress handler."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.started = time.monotonic()

    def start(self, *_args: Any, **_kwargs: Any) -> None:
        self.started = time.monotonic()

    def passed(self) -> int:
        return int(time.monotonic() - self.started > self.limit)  # non-zero: SQLite interrupts the statement


def guarded_sqlite(uri: str, limit: float) -> tuple[Any, Any]:
    """(connect, on_execute): a creator of read-only, untrusting connections to `uri` with the time limit,
    and the listener that starts each statement's clock (an Engine's before_cursor_execute)."""
    deadline = _Deadline(limit)

    def connect() -> sqlite3.Connection:
        # isolation_level=None: the transaction is the BEGIN that dbcopy._snapshot issues, not sqlite3's.
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.set_progress_handler(deadline.passed, PROGRESS_STEPS)
        return conn

    return connect, deadline.start


def check_plain_tables(conn: sa.Connection, names: Iterable[str]) -> None:
    """DatabaseCopyError unless each of `names` present in the source is a plain table (no view, no
    virtual table): the file is then read as the rows remediate wrote, nothing of it runs."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql("SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')")
        kinds = {name: (kind, (sql or "").lstrip()[:12].upper()) for name, kind, sql in rows}
        for name in names:
            kind, created = kinds.get(name, ("table", "CREATE TABLE"))
            if kind != "table" or created != "CREATE TABLE":
                what = "a view" if kind == "view" else "a virtual table"
                raise DatabaseCopyError(
                    f"the source's {name} is {what}, not a table: remediate only writes plain tables, so this "
                    "file is not a remediate database as written (refused, nothing of it was run)"
                )
        return
    views = set(sa.inspect(conn).get_view_names())
    for name in names:
        if name in views:
            raise DatabaseCopyError(f"the source's {name} is a view, not a table: not a remediate database")


def json_column(value: Any, table: str, column: str, row_id: Any) -> Any:
    """A JSON column of the source, decoded; DatabaseCopyError naming the row and column when it is not JSON
    (or not an object, where remediate writes one)."""
    try:
        decoded = json.loads(value)
    except (TypeError, ValueError) as exc:
        raise DatabaseCopyError(
            f"the source's {table} row {row_id}: column {column} is not JSON ({exc}): not as remediate writes it"
        ) from exc
    if not isinstance(decoded, dict):
        raise DatabaseCopyError(
            f"the source's {table} row {row_id}: column {column} is JSON {type(decoded).__name__}, not an object"
        )
    return decoded


@contextmanager
def time_limited(limit: float) -> Iterator[None]:
    """SourceQueryTooLong for a statement SQLite interrupted (the progress handler) or PostgreSQL cancelled
    (statement_timeout); every other error passes through."""
    try:
        yield
    except sa.exc.OperationalError as exc:
        interrupted = getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT
        if interrupted or "statement timeout" in str(exc.orig):
            raise SourceQueryTooLong(
                f"a query on the source database ran past its time limit ({limit:g} s) and was stopped: "
                "a remediate database answers each in milliseconds"
            ) from exc
        raise
