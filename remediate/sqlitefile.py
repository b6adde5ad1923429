"""A SQLite file of remediate's, without SQLAlchemy: the write lock file writers queue on, the file modes
(0600, its -wal/-shm/-writelock companions tightened) and the file's identity (deleted or replaced while open).

Shared by the store's SQLite dialect (remediate.store.sqlite) and the agent's state file
(remediate.agent_state), which opens its file with the sqlite3 module alone: the agent never loads
SQLAlchemy (issue 14's idle memory), and both keep their files the same way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from remediate.errors import StoreBusy, StoreFileReplaced, StoreRefused

DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for the write lock where no one is waiting on an answer (executor, CLI, agent)."""

BACKGROUND_YIELD_MAX_S = 0.05
"""The longest a background writer lets waiting writers go first before it queues with them (so a steady
stream of webhooks slows the executor's claims, never stops them)."""

_POLL_MAX_S = 0.005
"""The longest sleep between two tries of a waiting writer: flock has no time-out, so waiters poll."""

READY_ROOM_BYTES = 1 << 20
"""Free space a ready SQLite store must have beside its file: room for the log frames of a few dozen webhook
commits (a usual notification's takes tens of KiB), so a ready server can store what AlertManager sends next."""

_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)  # Linux: locks of an open file, independent of flock


def protect_files(path: str) -> None:
    """Create the SQLite file `path` 0600 and take group/other access from it and its companions.

    SQLite gives the -wal and -shm files the mode of the database file, so creating that one
    0600 covers them; files from before (created 0644 under the usual umask) are tightened here.
    """
    # A read-only file or directory fails here: SQLite says what is wrong when it opens the file.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-writelock", f"{path}-room"):
        try:
            mode = os.stat(name).st_mode & 0o7777
            if mode & 0o077:
                os.chmod(name, mode & ~0o077)
        except OSError:
            pass  # absent, or not ours to change


def check_room(path: str, nbytes: int = READY_ROOM_BYTES) -> None:
    """StoreRefused unless the filesystem of the database `path` can give `nbytes` of fresh space now.

    A write probe of one row proves nothing here: it rewrites a page the write-ahead log already holds (the
    checkpointer rewinds the log), while a webhook's commit appends frames past its end. So the space is
    taken for real (posix_fallocate of a companion file, `<database>-room`, then truncated to nothing): what
    the filesystem grants this process, reserved blocks and quotas included. Where that file cannot be
    written (a read-only directory), the free space statvfs counts for unprivileged users decides.
    """
    room = f"{path}-room"
    try:
        fd = os.open(room, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        fd = None
    if fd is not None:
        try:
            os.posix_fallocate(fd, 0, nbytes)
            os.ftruncate(fd, 0)
            return
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreRefused(
                    f"the filesystem of {path} cannot give {nbytes} bytes for the database's log: its disk is full"
                ) from None
            # EOPNOTSUPP and the like: statvfs decides
        finally:
            os.close(fd)
    try:
        stat = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return  # nothing known: the write probe decides
    if stat.f_bavail * stat.f_frsize < nbytes:
        raise StoreRefused(f"the filesystem of {path} has less than {nbytes} bytes free: its disk is full")


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
    remediate); this only makes our own writers wait here, trying every few ms, not in SQLite's sleep steps
    (1, 2, 5, ... 100 ms). The kernel drops a flock when its process dies, so a crashed worker cannot leave
    it held. When the lock file cannot be opened (a read-only directory), writers fall back to SQLite's busy
    timeout alone. Every wait shares one deadline, `timeout` seconds after the writer came (`held` yields it,
    and the store bounds SQLite's busy timeout by what is left of it): StoreBusy then, so a request gets 503, not
    a hang, and not after the lock file's wait plus a whole busy timeout more.

    A waiting writer says so with a shared lock on the lock file's first byte (an open-file-description
    record lock: independent of the flock, dropped by the kernel with its file) for as long as it waits. A
    `background` writer (the executor, draining a backlog in one write transaction after another) first
    waits, at most `yield_max` seconds, until no one does: a webhook that arrives during a drain is then
    stored after the executor's current transaction, not after whichever of its next ones the polling
    webhook happens to miss the gap before.
    """

    def __init__(
        self, path: str | None, timeout: float = DEFAULT_BUSY_TIMEOUT, *, yield_max: float = BACKGROUND_YIELD_MAX_S
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.yield_max = yield_max
        """The longest a background writer lets waiting writers go first."""
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._pid: int | None = None

    @contextmanager
    def held(self, *, background: bool = False) -> Iterator[float]:
        """Hold the write lock; yields the deadline (time.monotonic()) by which the writer's waits must end."""
        deadline = time.monotonic() + self.timeout
        if self.path is None:
            yield deadline
            return
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise StoreBusy(f"the database write lock stayed taken for {self.timeout:g}s")
        try:
            fd = self._open()
            if fd is None:
                yield deadline
                return
            if background:
                give_up = time.monotonic() + self.yield_max
                while _writers_waiting(fd) and time.monotonic() < give_up:
                    time.sleep(0.0005)
            self._flock(fd, deadline, announce=not background)
            try:
                yield deadline
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _flock(self, fd: int, deadline: float, *, announce: bool) -> None:
        # Our own writers of this process already queue on the thread lock; this wait is for other processes.
        pause = 0.0005
        waiting = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise StoreBusy(
                            f"the database write lock {self.path} stayed taken for {self.timeout:g}s"
                        ) from None
                    if announce and not waiting:
                        waiting = _record_lock(fd, fcntl.F_RDLCK)
                    time.sleep(min(pause, remaining))
                    pause = min(pause * 2, _POLL_MAX_S)
        finally:
            if waiting:
                _record_lock(fd, fcntl.F_UNLCK)

    def writers_waiting(self) -> bool:
        """Whether a writer of another process (or another open file of the lock) waits for it now."""
        with self._thread_lock:
            fd = self._open()
        return fd is not None and _writers_waiting(fd)

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


def _record_lock(fd: int, kind: int) -> bool:
    """Set (F_RDLCK, F_WRLCK) or drop (F_UNLCK) an open-file-description lock on the first byte of `fd`
    without waiting; False when another open file holds a conflicting one, or where the system has none."""
    if _OFD_SETLK is None:
        return False
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0: required for OFD locks)
    record = struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 1, 0)
    try:
        fcntl.fcntl(fd, _OFD_SETLK, record)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _writers_waiting(fd: int) -> bool:
    """Whether another open file holds the shared lock a waiting writer sets (see WriteLock)."""
    if _OFD_SETLK is None or _record_lock(fd, fcntl.F_WRLCK):
        _record_lock(fd, fcntl.F_UNLCK)
        return False
    return True
