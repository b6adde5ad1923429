"""A SQLite file of remediate's, without SQLAlchemy: the write lock file writers queue on, the file modes
(0600, its -wal/-shm/-writelock companions tightened) and the file's identity (deleted or replaced while open).

Shared by the store's SQLite dialect (remediate.store.sqlite) and the agent's state file
(remediate.agent_state), which opens its file with the sqlite3 module alone: the agent never loads
SQLAlchemy (issue 14's idle memory), and both keep their files the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from remediate.errors import StoreBusy, StoreFileReplaced

DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for the write lock where no one is waiting on an answer (executor, CLI, agent)."""


def protect_files(path: str) -> None:
    """Create the SQLite file `path` 0600 and take group/other access from it and its companions.

    SQLite gives the -wal and -shm files the mode of the database file, so creating that one
    0600 covers them; files from before (created 0644 under the usual umask) are tightened here.
    """
    # A read-only file or directory fails here: SQLite says what is wrong when it opens the file.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-writelock"):
        try:
            mode = os.stat(name).st_mode & 0o7777
            if mode & 0o077:
                os.chmod(name, mode & ~0o077)
        except OSError:
            pass  # absent, or not ours to change


class FileIdentity:
    """The (device, inode) of a database file, remembered once open; `check()` notices it deleted or replaced.

    Deleting (or replacing) the file under a running process leaves every connection writing to
    the unlinked inode: commits succeed and are lost at the next restart. One stat() call.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._id: tuple[int, int] | None = None

    def remember(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return
        self._id = (stat.st_dev, stat.st_ino)

    def check(self) -> None:
        """StoreFileReplaced if the path no longer names the file remembered."""
        if self._id is None:
            return
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            raise StoreFileReplaced(f"the database file {self.path} was deleted while open") from None
        except OSError:
            return
        if (stat.st_dev, stat.st_ino) != self._id:
            raise StoreFileReplaced(f"the database file {self.path} was replaced by another file while open")


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
