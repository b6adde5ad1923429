"""The database the store runs on, whatever its kind: the engine, write and read transactions, the schema's
version and upgrades, the health checks. What differs between SQLite and a server database is asked of
its `Dialect` (`sqlite.SqliteDialect` for SQLite files), chosen from the URL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import sqlalchemy as sa

from remediate.errors import (
    ConfigError,
    StoreBusy,
    StoreFileReplaced,
    StoreRefused,
    StoreUnavailable,
    StoreUnreachable,
)
from remediate.store import schema as t
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL, Dialect, PoolLimits
from remediate.store.postgres import PostgresDialect
from remediate.store.shown_url import hide_in_text, shown_url
from remediate.store.sqlite import SqliteDialect


def dialect_for(url: sa.URL) -> type[Dialect]:
    """The dialect of a database URL."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return SqliteDialect
    if backend == "postgresql":
        return PostgresDialect
    return Dialect


WRITE_ERROR_KINDS: dict[type[StoreUnavailable], str] = {
    StoreBusy: "busy",
    StoreUnreachable: "unreachable",
    StoreRefused: "refused",
    StoreFileReplaced: "file_replaced",
}
"""The kinds of write a database could not take (`Database.on_write_error`). A StoreConflict is none: another
writer stored the same occurrence first, the store works."""


def write_error_kind(exc: StoreUnavailable) -> str | None:
    """The kind of a write error (WRITE_ERROR_KINDS), None for one that says nothing of the store's health."""
    for cls, kind in WRITE_ERROR_KINDS.items():
        if isinstance(exc, cls):
            return kind
    return None


class Transactions(Protocol):
    """What the concept modules open their transactions on: a Database, or the Store in front of it
    (whose write()/read() are then the one door every transaction of the store passes)."""

    def write(self) -> AbstractContextManager[sa.Connection]: ...

    def read(self) -> AbstractContextManager[sa.Connection]: ...


_SCHEMA_VERSION = sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")
_PROBE_WRITE = sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=t.meta.c.value)


class Database:
    """One database: `write()` and `read()` transactions on its engine, the schema kept current."""

    def __init__(self, engine: sa.Engine, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.engine = engine
        self.on_write_error: Callable[[str], None] | None = None
        """Told the kind (WRITE_ERROR_KINDS) of each write transaction the database could not take: the
        server counts them (remediate_store_write_errors_total), the self-alert RemediateStoreUnavailable reads it."""
        self.dialect = dialect_for(engine.url)(engine.url, busy_timeout)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        pool: PoolLimits = DEFAULT_POOL,
        commit_checkpoints: bool = True,
    ) -> Database:
        """Open (and by default create or upgrade) the database; writers wait `busy_timeout` s for the lock
        (and, on a server database, for one of the `pool`'s connections). `commit_checkpoints=False`: SQLite's
        write-ahead log is checkpointed apart (`checkpoint`, store.checkpoints.WalCheckpointer), not by commits."""
        try:
            dialect = dialect_for(sa.make_url(url))
            engine = dialect.create_engine(url, busy_timeout, pool, commit_checkpoints=commit_checkpoints)
        except (sa.exc.ArgumentError, ImportError, ValueError) as exc:  # ValueError: a port that is not a number
            raise ConfigError(f"cannot use database URL {shown_url(url)!r}: {hide_in_text(str(exc))}") from exc
        database = cls(engine, busy_timeout=busy_timeout)
        try:
            database.dialect.protect_files()
            if upgrade:
                try:
                    database.upgrade()
                except sa.exc.OperationalError as exc:  # one line: `remediate serve` prints it and exits
                    raise ConfigError(
                        f"cannot open database {shown_url(url)!r}: {hide_in_text(_one_line(exc.orig))}"
                    ) from exc
                except (StoreUnreachable, StoreRefused) as exc:
                    raise ConfigError(f"cannot open database: {exc}") from exc
            database.dialect.remember_file()
        except BaseException:
            database.close()  # a refused database leaves no pooled connection behind
            raise
        return database

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE, so concurrent writers queue up on SQLite's lock).

        StoreBusy if no connection and the lock are free within the store's busy timeout, one bound for both
        waits (a request then answers 503 within `store_busy_timeout`), StoreFileReplaced if the file is no
        longer ours, StoreUnreachable if the server is gone, StoreRefused if the database refused it (disk
        full, read-only, I/O error, ...).
        """
        with self._told_write_errors():
            self.dialect.check_file()
            deadline = time.monotonic() + self.dialect.busy_timeout
            with self._store_errors(), self.engine.connect() as conn:
                # One bound for every wait: the database's own lock gets what the wait for a connection left.
                self.dialect.bound_wait(conn, deadline)
                with conn.begin():
                    self.dialect.begin(conn, write=True)
                    yield conn

    @contextmanager
    def _told_write_errors(self) -> Iterator[None]:
        """A write the database could not take is told to on_write_error (by kind), then raised."""
        try:
            yield
        except StoreUnavailable as exc:
            kind = write_error_kind(exc)
            if kind is not None and self.on_write_error is not None:
                self.on_write_error(kind)
            raise

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """One connection to read on; StoreUnreachable while the database server cannot be reached."""
        with self._store_errors(), self.engine.connect() as conn:
            self.dialect.begin(conn, write=False)
            yield conn

    @contextmanager
    def _store_errors(self) -> Iterator[None]:
        """The driver's errors that say the database is unavailable or busy, as the store's (StoreUnavailable)."""
        try:
            yield
        except sa.exc.DBAPIError as exc:
            self._raise_if_unavailable(exc)
            raise
        except sa.exc.TimeoutError as exc:
            raise self._pool_busy() from exc

    def _raise_if_unavailable(self, exc: sa.exc.DBAPIError) -> None:
        # A request then answers 503 and the executor waits, hands its runs back and retries, instead of a
        # traceback: the database is locked, unreachable (the pool has dropped the dead connections, so the
        # first transaction after the outage works) or refused the transaction (disk full, read-only, ...).
        unavailable = self.dialect.unavailable(exc)
        if unavailable is not None:
            raise unavailable from exc

    def _pool_busy(self) -> StoreBusy:
        # Every connection of the bounded pool stayed in use for the busy timeout (a server database).
        return StoreBusy(f"no database connection was free within {self.dialect.busy_timeout:g}s (the pool is full)")

    def check_file(self) -> None:
        """StoreFileReplaced if the database's file is no longer the one this process has open."""
        self.dialect.check_file()

    def checkpoint(self) -> bool:
        """Copy SQLite's write-ahead log into the database file without blocking readers or writers; whether the
        database has such a log (False: a server database, nothing done)."""
        try:
            return self.dialect.checkpoint(self.engine)
        except sa.exc.DBAPIError as exc:
            self._raise_if_unavailable(exc)
            raise

    def probe_write(self) -> None:
        """Do what a webhook needs: the file is ours, it has room for a webhook's write (SQLite: fresh space on
        its filesystem, Dialect.check_room), the write lock is free in time, a write commits."""
        with self._told_write_errors():
            self.check_file()
            self.dialect.check_room()
        with self.write() as conn:
            conn.execute(_PROBE_WRITE)

    def refresh_statistics(self, tables: Sequence[str]) -> None:
        """Up-to-date planner statistics for `tables` (PostgreSQL: ANALYZE; SQLite: nothing to do)."""
        if not self.dialect.keeps_statistics:
            return
        with self.write() as conn:
            self.dialect.refresh_statistics(conn, tables)

    def close(self) -> None:
        self.engine.dispose()

    def upgrade(self) -> int:
        """Create or upgrade the schema to SCHEMA_VERSION; returns the version found before."""
        current = self._current_version()
        if current == t.SCHEMA_VERSION:
            return current  # nothing to write: a locked database does not hold up start-up
        with self.write() as conn:
            self.dialect.lock_schema(conn)  # another replica may be creating or upgrading it right now
            inspector = sa.inspect(conn)
            if not inspector.has_table("meta"):
                t.metadata.create_all(conn)
                conn.execute(sa.insert(t.meta).values(key="schema_version", value=str(t.SCHEMA_VERSION)))
                return 0
            found = int(conn.execute(_SCHEMA_VERSION).scalar_one())
            if found > t.SCHEMA_VERSION:
                raise ConfigError(
                    f"the database has schema version {found}, newer than this remediate ({t.SCHEMA_VERSION}): "
                    "upgrade remediate"
                )
            for version in range(found + 1, t.SCHEMA_VERSION + 1):
                t.MIGRATIONS[version](conn)
            conn.execute(sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION)))
            return found

    def _current_version(self) -> int | None:
        """The schema version, read without the write lock; None if there is no schema yet."""
        try:
            return self.schema_version()
        except (sa.exc.OperationalError, sa.exc.ProgrammingError):  # no meta table (PostgreSQL: ProgrammingError)
            return None
        except sa.exc.NoResultFound:
            return None

    def schema_version(self) -> int:
        with self.read() as conn:
            return int(conn.execute(_SCHEMA_VERSION).scalar_one())


def _one_line(error: BaseException | None) -> str:
    """A driver's message on one line (psycopg's span two: the failure, then a hint)."""
    return " ".join(str(error).split())
