"""Everything SQLite-specific of the store: the engine and its pragmas, `BEGIN IMMEDIATE`, the write lock
file, the database's file modes and identity, and "database is locked" as StoreBusy.

SQLite is used with WAL, a busy timeout and `BEGIN IMMEDIATE` for every write transaction, so several
gunicorn workers serialise their writes instead of failing; reads never block writers. Before
`BEGIN IMMEDIATE`, writers of one database file also queue on a lock file beside it
(`<database>-writelock`, flock): a waiting writer then starts as soon as the previous one commits,
instead of sleeping in SQLite's busy handler (1, 2, 5, 10, ... 100 ms steps).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from remediate.errors import StoreBusy, StoreFileReplaced
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL, Dialect, PoolLimits


def database_path(url: sa.URL) -> str | None:
    """The file of a SQLite database; None for in-memory and URI databases."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        return None
    return database


def lock_path(url: sa.URL) -> str | None:
    """The write lock file of a SQLite database file; None for in-memory and URI databases."""
    database = database_path(url)
    return None if database is None else f"{database}-writelock"


class SqliteDialect(Dialect):
    """A SQLite file (or in-memory database): writers queue on WriteLock, then BEGIN IMMEDIATE."""

    skip_locked_claim = False  # BEGIN IMMEDIATE already makes the claim's transaction the only writer
    # One writer at a time: each ingest stamps its decisions no earlier than the newest one stored.
    decision_time_follows_id = True

    def __init__(self, url: sa.URL, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        super().__init__(url, busy_timeout)
        self.lock = WriteLock(lock_path(url), busy_timeout)
        self.file = database_path(url)
        self._file_id: tuple[int, int] | None = None

    @staticmethod
    def create_engine(url: str, busy_timeout: float, pool: PoolLimits = DEFAULT_POOL) -> sa.Engine:
        # `pool` is for server databases: SQLite's connections are files opened per thread as needed.
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            mode = conn.get_execution_options().get("remediate_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine

    def writer(self, engine: sa.Engine) -> sa.Engine:
        return engine.execution_options(remediate_begin="IMMEDIATE")

    def write_lock(self) -> AbstractContextManager[None]:
        return self.lock.held()

    def busy(self, exc: sa.exc.OperationalError) -> StoreBusy | None:
        if "locked" in str(exc.orig):
            return StoreBusy(f"the database stayed locked for {self.lock.timeout:g}s")
        return None

    def lock_breaker(self, conn: sa.Connection) -> None:
        """Nothing to do: BEGIN IMMEDIATE already makes the breaker's transaction the only writer."""

    def protect_files(self) -> None:
        """Create the SQLite file 0600 and take group/other access from it and its companions.

        SQLite gives the -wal and -shm files the mode of the database file, so creating that one
        0600 covers them; files from before (created 0644 under the usual umask) are tightened here.
        """
        if self.file is None:
            return
        # A read-only file or directory fails here: SQLite says what is wrong when it opens the file.
        with contextlib.suppress(OSError):
            os.close(os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for path in (self.file, f"{self.file}-wal", f"{self.file}-shm", f"{self.file}-writelock"):
            try:
                mode = os.stat(path).st_mode & 0o7777
                if mode & 0o077:
                    os.chmod(path, mode & ~0o077)
            except OSError:
                pass  # absent, or not ours to change

    def remember_file(self) -> None:
        if self.file is not None:
            try:
                stat = os.stat(self.file)
            except OSError:
                return
            self._file_id = (stat.st_dev, stat.st_ino)

    def check_file(self) -> None:
        """StoreFileReplaced if the database path no longer names the file this process has open.

        Deleting (or replacing) the file under a running server leaves every connection writing to
        the unlinked inode: commits succeed and are lost at the next restart. One stat() call.
        """
        if self._file_id is None or self.file is None:
            return
        try:
            stat = os.stat(self.file)
        except FileNotFoundError:
            raise StoreFileReplaced(f"the database file {self.file} was deleted while open") from None
        except OSError:
            return
        if (stat.st_dev, stat.st_ino) != self._file_id:
            raise StoreFileReplaced(f"the database file {self.file} was replaced by another file while open")

    def close(self) -> None:
        self.lock.close()


class WriteLock:
    """Queues the writers of one SQLite file, across threads (a lock) and processes (flock on a lock file).

    SQLite still decides (BEGIN IMMEDIATE and its busy timeout, which also covers writers that are not
    remediate); this only makes our own writers wait in a queue the kernel wakes, not in sleep steps.
    The kernel drops a flock when its process dies, so a crashed worker cannot leave it held. When the
    lock file cannot be opened (a read-only directory), writers fall back to SQLite's busy timeout alone.
    Both waits end after `timeout` seconds with StoreBusy: a request then gets 503, not a hang.
    """

    def __init__(self, path: str | None, timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._pid: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        deadline = time.monotonic() + self.timeout
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise StoreBusy(f"the database write lock stayed taken for {self.timeout:g}s")
        try:
            fd = self._open()
            if fd is None:
                yield
                return
            self._flock(fd, deadline)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _flock(self, fd: int, deadline: float) -> None:
        # flock has no timeout: try without blocking, sleeping 1 ms growing to 20 ms. Our own writers
        # of this process already queue on the thread lock; this wait is for other processes.
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusy(f"the database write lock {self.path} stayed taken for {self.timeout:g}s") from None
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, 0.02)

    def _open(self) -> int | None:
        if self._pid != os.getpid():  # a forked child opens its own: a flock belongs to an open file
            self._pid = os.getpid()
            try:
                self._fd = os.open(self.path or "", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._fd = None
        return self._fd

    def close(self) -> None:
        with self._thread_lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = self._pid = None
