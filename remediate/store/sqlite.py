"""Everything SQLite-specific of the store: the engine and its pragmas, `BEGIN IMMEDIATE`, the database's file
modes and identity, and "database is locked" as StoreBusy.

SQLite is used with WAL, a busy timeout and `BEGIN IMMEDIATE` for every write transaction, so several
gunicorn workers (and the executor process) serialise their writes on SQLite's own lock instead of failing;
reads never block writers. A writer that finds the lock taken waits in SQLite's busy handler, at most the
store's busy timeout (StoreBusy then: a request answers 503). The file handling that needs no SQLAlchemy
(the file modes and identity) is remediate.sqlitefile's, shared with the agent's state file.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from remediate.errors import StoreBusy, StoreRefused
from remediate.sqlitefile import FileIdentity, check_room, protect_files
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL, Dialect, PoolLimits

_BUSY_MS = "remediate_busy_timeout_ms"
"""Where a connection's record keeps the busy timeout its connection has now (SqliteDialect.bound_wait)."""
_BUSY_SLACK_MS = 10
"""A connection checked out within this many ms keeps the full busy timeout (no PRAGMA for the usual writer)."""

WAL_SAFETY_NET_PAGES = 10_000
"""Where checkpoints are done apart, a commit still checkpoints once the log holds this many pages (~40 MB):
only if the checkpointer falls behind or is gone."""


REFUSED_CODES = frozenset({
    sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOTADB,
})  # fmt: skip
"""SQLite's primary result codes (the low byte of an extended one) that mean the file, not the statement,
failed: read-only, I/O error, corrupt, disk full, cannot open, WAL lock protocol, not a database."""


def database_path(url: sa.URL) -> str | None:
    """The file of a SQLite database; None for in-memory and URI databases."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        return None
    return database


def as_sqlalchemy_error(statement: str, exc: sqlite3.Error) -> sa.exc.DBAPIError:
    """The exception SQLAlchemy raises for `exc` when it runs a statement itself: its DBAPIError subclass of the
    same name as the driver's class or the nearest base (sqlite3.IntegrityError: sa.exc.IntegrityError), as
    PEP 249 names them. Built with the documented constructor, not SQLAlchemy's internal `DBAPIError.instance`."""
    for base in type(exc).__mro__:
        wrapper = getattr(sa.exc, base.__name__, None)
        if isinstance(wrapper, type) and issubclass(wrapper, sa.exc.DBAPIError):
            return wrapper(statement, None, exc)
    return sa.exc.DBAPIError(statement, None, exc)


class SqliteDialect(Dialect):
    """A SQLite file (or in-memory database): writers queue on SQLite's own lock (BEGIN IMMEDIATE)."""

    # One writer at a time: each ingest stamps its decisions no earlier than the newest one stored.
    decision_time_follows_id = True

    def __init__(self, url: sa.URL, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        super().__init__(url, busy_timeout)
        self.file = database_path(url)
        self._identity = FileIdentity(self.file or "")

    @staticmethod
    def create_engine(
        url: str, busy_timeout: float, pool: PoolLimits = DEFAULT_POOL, *, commit_checkpoints: bool = True
    ) -> sa.Engine:
        """`commit_checkpoints=False`: the write-ahead log is checkpointed apart (store.checkpoints), so a commit
        checkpoints only past WAL_SAFETY_NET_PAGES. SQLite's default (1,000 pages) runs the checkpoint inside
        the commit that crosses it, with the write lock still held: the webhook that pays for it, and every
        writer queued behind it, wait while it copies pages and syncs the file (the 100 alerts/s p99)."""
        # `pool` is for server databases: SQLite's connections are files opened per thread as needed. A thread
        # that finds them all in use waits at most the busy timeout (Database.write bounds both waits by one).
        # An in-memory database has one connection (SQLAlchemy's SingletonThreadPool), so no pool to wait for.
        in_memory = sa.make_url(url).database in (None, "", ":memory:")
        pool_wait = {} if in_memory else {"pool_timeout": busy_timeout}
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout}, **pool_wait)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            _record.info[_BUSY_MS] = int(busy_timeout * 1000)
            if not commit_checkpoints:
                cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_SAFETY_NET_PAGES}")
            cursor.close()

        return engine

    def begin(self, conn: sa.Connection, *, write: bool) -> None:
        """BEGIN IMMEDIATE (a write: it waits for SQLite's lock here, "database is locked" becomes StoreBusy in
        Database.write) or BEGIN DEFERRED (a read: its statements see one snapshot), on the driver's connection.

        Not SQLAlchemy's "begin" event (its recipe for pysqlite): a listener on an engine makes SQLAlchemy
        dispatch its connection events around every statement, which doubled the CPU of a write transaction
        (docs/benchmarks.md, "the first-step p99 and CPU per alert")."""
        # pysqlite begins nothing itself: SQLAlchemy's commit, or the rollback of a connection handed back to
        # the pool, ends the transaction begun here.
        mode = "IMMEDIATE" if write else "DEFERRED"
        try:
            conn.connection.driver_connection.execute(f"BEGIN {mode}")
        except sqlite3.Error as exc:
            raise as_sqlalchemy_error(f"BEGIN {mode}", exc) from exc

    def checkpoint(self, engine: sa.Engine) -> bool:
        # PASSIVE: copies what no reader still needs, does not take the write lock (writers go on).
        with engine.connect() as conn:
            _busy, log_frames, _copied = conn.connection.driver_connection.execute(
                "PRAGMA wal_checkpoint(PASSIVE)"
            ).fetchone()
        return log_frames >= 0  # -1: not in WAL mode (an in-memory database)

    def bound_wait(self, conn: sa.Connection, deadline: float) -> None:
        """SQLite's busy timeout for this transaction: what is left of the writer's deadline after its wait for
        a connection (one bound for both), set only when it differs from the connection's."""
        full = int(self.busy_timeout * 1000)
        left = int((deadline - time.monotonic()) * 1000)
        wanted = full if left >= full - _BUSY_SLACK_MS else max(1, left)
        record = conn.connection
        if record.info.get(_BUSY_MS) != wanted:
            record.driver_connection.execute(f"PRAGMA busy_timeout={wanted}")
            record.info[_BUSY_MS] = wanted

    def busy(self, exc: sa.exc.OperationalError) -> StoreBusy | None:
        if "locked" in str(exc.orig):
            return StoreBusy(f"the database stayed locked for {self.busy_timeout:g}s")
        return None

    def refused(self, exc: sa.exc.DBAPIError) -> StoreRefused | None:
        code = getattr(exc.orig, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in REFUSED_CODES:
            return StoreRefused(self.message(exc, "refused the transaction"))
        return None

    def lock_breaker(self, conn: sa.Connection) -> None:
        """Nothing to do: BEGIN IMMEDIATE already makes the breaker's transaction the only writer."""

    def insert_rows(self, conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert `rows` with one executemany on the driver's cursor, numbered from the table's largest id.

        BEGIN IMMEDIATE makes this transaction the file's only writer, so the next ids are known before
        the insert: SQLite would pick the same ones (the tables have no AUTOINCREMENT: a new rowid is
        max(rowid) + 1). SQLAlchemy's INSERT ... RETURNING runs one statement per row on SQLite; for the
        10,000 rows of a large notification this takes a tenth of the time (bench/big_notification.py).
        """
        if not rows:
            return []
        cursor = conn.connection.driver_connection.cursor()
        name = table.name
        try:
            if len(rows) == 1:  # the usual notification: SQLite says which id it gave
                cursor.execute(_insert_sql(name, tuple(rows[0])), tuple(rows[0].values()))
                return [int(cursor.lastrowid or 0)]
            first = cursor.execute(f'SELECT coalesce(max(id), 0) + 1 FROM "{name}"').fetchone()[0]  # noqa: S608
            numbered = zip(itertools.count(first), rows)
            for columns, group in itertools.groupby(numbered, key=lambda pair: tuple(pair[1])):
                statement = _insert_sql(name, ("id", *columns))
                cursor.executemany(statement, [(number, *row.values()) for number, row in group])
        except sqlite3.Error as exc:
            # The store's callers handle SQLAlchemy's exceptions (a unique violation is a StoreConflict).
            raise as_sqlalchemy_error(f"INSERT INTO {name}", exc) from exc
        finally:
            cursor.close()
        return list(range(first, first + len(rows)))

    def protect_files(self) -> None:
        """Create the SQLite file 0600 and take group/other access from it and its companions."""
        if self.file is not None:
            protect_files(self.file)

    def remember_file(self) -> None:
        if self.file is not None:
            self._identity.remember()

    def check_file(self) -> None:
        """StoreFileReplaced if the database path no longer names the file this process has open."""
        if self.file is not None:
            self._identity.check()

    def check_room(self) -> None:
        """StoreRefused unless the file's filesystem can give a webhook's log frames fresh space (sqlitefile)."""
        if self.file is not None:
            check_room(self.file)


@functools.lru_cache(maxsize=256)
def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    """INSERT of these columns of a table (schema names only, never data): the same few every notification."""
    names = ", ".join(f'"{column}"' for column in columns)
    marks = ", ".join("?" * len(columns))
    return f'INSERT INTO "{table}" ({names}) VALUES ({marks})'  # noqa: S608 - schema names only
