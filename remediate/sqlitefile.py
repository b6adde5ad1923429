"""A SQLite file of remediate's, without SQLAlchemy: the file modes (0600, its -wal/-shm companions tightened),
the room its log needs, and the file's identity (deleted or replaced while open).

Shared by the store's SQLite dialect (remediate.store.sqlite) and the agent's state file
(remediate.agent.state), which opens its file with the sqlite3 module alone: the agent never loads
SQLAlchemy (the idle memory of the agent and the master), and both keep their files the same way.
"""

from __future__ import annotations

import contextlib
import errno
import os

from remediate.errors import StoreFileReplaced, StoreRefused

DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for SQLite's write lock (its busy timeout) where no one is waiting on an answer
(executor, CLI, agent)."""

READY_ROOM_BYTES = 1 << 20
"""Free space a ready SQLite store must have beside its file: room for the log frames of a few dozen webhook
commits (a usual notification's takes tens of KiB), so a ready server can store what AlertManager sends next."""


def protect_files(path: str) -> None:
    """Create the SQLite file `path` 0600 and take group/other access from it and its companions.

    SQLite gives the -wal and -shm files the mode of the database file, so creating that one
    0600 covers them; files from before (created 0644 under the usual umask) are tightened here.
    """
    # A read-only file or directory fails here: SQLite says what is wrong when it opens the file.
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm", f"{path}-room"):
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
