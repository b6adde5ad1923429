"""What differs between the databases the store runs on: one `Dialect` object per open database.

`database.Database` asks its dialect how to begin a write transaction, how long its writers wait for the lock,
whether the claim may skip locked rows, how the breaker's writers are serialised and which error means
"busy". This base class is the behaviour for a server database (any URL but SQLite's); `sqlite.py`
overrides it for SQLite files, `postgres.py` for PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from remediate.errors import StoreBusy, StoreRefused, StoreUnavailable, StoreUnreachable
from remediate.sqlitefile import DEFAULT_BUSY_TIMEOUT
from remediate.store.shown_url import hide_in_text, shown_url


@dataclass(frozen=True)
class PoolLimits:
    """How many connections one process keeps to a server database (settings `database_pool_size`,
    `database_max_overflow`): `size` stay open, `max_overflow` more are opened under load and closed
    again. A checkout that finds all of them taken waits the busy timeout, then StoreBusy (503)."""

    size: int = 5
    max_overflow: int = 5

    @property
    def most(self) -> int:
        return self.size + self.max_overflow


DEFAULT_POOL = PoolLimits()

_INSERT_RETURNING_IDS: dict[str, sa.Insert] = {}
"""INSERT ... RETURNING id per table, built once: building a Core statement costs more than running it."""


class Dialect:
    """A server database: row locks and its own isolation do the queueing; no file of ours to watch."""

    decision_time_follows_id = False
    """Whether `decisions.created_at` never decreases with the id (`store.decision_time`), so that a time
    filter of the history is an id range. Not here: concurrent transactions take ids from a sequence
    and commit in any order, so a later id can carry an earlier time."""

    def __init__(self, url: sa.URL, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.url = url
        self.busy_timeout = busy_timeout

    @staticmethod
    def create_engine(
        url: str, busy_timeout: float, pool: PoolLimits = DEFAULT_POOL, *, commit_checkpoints: bool = True
    ) -> sa.Engine:
        """The engine of `url`. `commit_checkpoints`: SQLite's (see SqliteDialect); a server database has none."""
        return sa.create_engine(url, pool_pre_ping=True, pool_size=pool.size, max_overflow=pool.max_overflow,
                                pool_timeout=busy_timeout)  # fmt: skip

    def begin(self, conn: sa.Connection, *, write: bool) -> None:
        """Begin the transaction of a write (in SQLAlchemy's `conn.begin()`) or a read (SQLite: BEGIN
        IMMEDIATE or DEFERRED); a server database begins on its first statement."""

    def checkpoint(self, engine: sa.Engine) -> bool:
        """Copy what SQLite's write-ahead log holds into the database file, without blocking anyone; whether
        there was such a log (a server database has none: nothing to do)."""
        return False

    def bound_wait(self, conn: sa.Connection, deadline: float) -> None:
        """Before BEGIN on `conn`: let the database's own wait for its lock end by `deadline` (SQLite)."""

    def busy(self, exc: sa.exc.OperationalError) -> StoreBusy | None:
        """The StoreBusy an error of a write transaction stands for, if it means the database stayed locked."""
        return None

    def unreachable(self, exc: sa.exc.DBAPIError) -> StoreUnreachable | None:
        """The StoreUnreachable an error stands for, if it means the server is gone (not a bad statement).

        SQLAlchemy marks the pooled connections invalid when it recognises a disconnect: the pool's
        pre-ping then replaces them, so the next transaction after the server is back just works."""
        if exc.connection_invalidated:
            return StoreUnreachable(self.message(exc, "cannot be reached"))
        return None

    def refused(self, exc: sa.exc.DBAPIError) -> StoreRefused | None:
        """The StoreRefused an error stands for, if the database refused the transaction for a reason that may
        pass (disk full, read-only, I/O error, ...), not for the statement itself; none known here."""
        return None

    def unavailable(self, exc: sa.exc.DBAPIError) -> StoreUnavailable | None:
        """Whatever StoreUnavailable an error of a transaction stands for (busy, unreachable, refused), or None:
        a request then answers 503 and the executor hands its runs back, instead of a traceback."""
        if isinstance(exc, sa.exc.OperationalError):
            busy = self.busy(exc)
            if busy is not None:
                return busy
        return self.unreachable(exc) or self.refused(exc)

    def message(self, exc: sa.exc.DBAPIError, what: str) -> str:
        """One line: the database (its password hidden), `what` happened, and the driver's reason."""
        reason = hide_in_text(" ".join(str(exc.orig).split())) or type(exc.orig).__name__
        return f"the database {shown_url(self.url)} {what}: {reason}"

    def lock_breaker(self, conn: sa.Connection) -> None:
        """Serialise the circuit breaker's writers inside their transaction."""
        # READ COMMITTED would let two claims see the same count.
        conn.exec_driver_sql("LOCK TABLE breaker_claims IN SHARE ROW EXCLUSIVE MODE")

    def lock_guards(self, conn: sa.Connection, names: Iterable[str]) -> None:
        """Serialise, across processes, the ingest transactions that judge the same guard keys.

        Called first in an ingest transaction with the (playbook, guard key) names it will judge. None
        here: a database we know nothing of keeps exactly-once by the unique dedupe key alone (the
        engine judges again on StoreConflict); cooldown and attempt caps are exact only where a
        dialect locks (PostgreSQL) or writers are serialised anyway (SQLite).
        """

    def insert_rows(self, conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert `rows` into `table` inside the caller's write transaction; their new ids, in order.

        Here: one INSERT ... RETURNING, batched by SQLAlchemy ("insertmanyvalues"), ids sorted back into
        the rows' order. SQLite overrides it with a plain executemany.
        """
        if not rows:
            return []
        statement = _INSERT_RETURNING_IDS.get(table.name)
        if statement is None:
            statement = _INSERT_RETURNING_IDS[table.name] = sa.insert(table).returning(
                table.c.id, sort_by_parameter_order=True
            )
        return [row[0] for row in conn.execute(statement, list(rows))]

    keeps_statistics = False
    """Whether the planner needs `refresh_statistics` before a long job (SQLite's plans do not)."""

    def refresh_statistics(self, conn: sa.Connection, tables: Sequence[str]) -> None:
        """Bring the planner's statistics of `tables` up to date before a long job plans its queries."""

    def lock_schema(self, conn: sa.Connection) -> None:
        """Serialise schema creation and upgrades across processes, inside their transaction."""

    def protect_files(self) -> None:
        """Keep the database's files from other users; nothing to do without files."""

    def remember_file(self) -> None:
        """Note which file is open, for `check_file`."""

    def check_file(self) -> None:
        """StoreFileReplaced if the database's file is no longer the one open; no file here."""

    def check_room(self) -> None:
        """StoreRefused if the database has no room for a webhook's write; a server's disk is its own."""
