"""Control directories that nobody will use again are removed, by the jobs themselves (docs/training-protocol.md).

- `remove_if_idle`: a job that closes removes its own directory when nothing is outstanding — no
  command in ``inbox/`` or ``taken/``, and no acknowledgement younger than `ACK_KEEP_S` that remediate's
  late-outcome reconciliation may still come to read.
- `age_out`: every registering job removes other jobs' directories closed for more than `ACK_KEEP_S`
  or silent for more than `DEAD_AFTER_S` — only while it holds their ``job.lock`` (no live process
  does: a running job, even a hung one, always holds its own) and only where its user may.

Everything is reached through directory descriptors opened without following symlinks: a job cannot
make another one remove anything outside the control root. remediate's agent never removes anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

from remediate.training.files import DIR_FLAGS, LOCK_FILE, REGISTRATION_FILE, JobPaths, read_json
from remediate.training.protocol import ProtocolError, Registration, job_name_problem

ACK_KEEP_S = 24 * 3600
"""How long remediate may still look for an acknowledgement (its late-outcome reconciliation)."""
DEAD_AFTER_S = 7 * 24 * 3600
"""A registration silent this long, whose job.lock no process holds, is aged out."""


def remove_if_idle(paths: JobPaths, *, now: float | None = None) -> bool:
    """Remove a closing job's own directory (the caller holds its lock) if nothing is outstanding."""
    cutoff = (time.time() if now is None else now) - ACK_KEEP_S
    try:
        if any(not n.startswith(".") for n in os.listdir(paths.inbox) + os.listdir(paths.taken)):
            return False
        with os.scandir(paths.outbox) as entries:
            if any(e.stat(follow_symlinks=False).st_mtime >= cutoff for e in entries):
                return False
    except OSError:
        return False
    _remove(paths.root, paths.job)
    return True


def age_out(root: Path, own: str, *, now: float | None = None) -> list[str]:
    """Remove the directories under `root` (but `own`'s) nobody will use again; returns their names."""
    now = time.time() if now is None else now
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    removed = []
    for name in names:
        if name == own or job_name_problem(name) is not None:
            continue
        with contextlib.suppress(OSError, ProtocolError):
            if _age_out_one(root, name, now):
                removed.append(name)
    return removed


def _age_out_one(root: Path, name: str, now: float) -> bool:
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dir_fd = os.open(name, DIR_FLAGS, dir_fd=root_fd)  # a symlink is refused here
        try:
            registration = Registration.from_dict(read_json(Path(REGISTRATION_FILE), dir_fd=dir_fd))
            if not _stale(registration, now):
                return False
            # No lock file: an older library's job; left alone.
            lock_fd = os.open(LOCK_FILE, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the job runs
                _remove_at(root_fd, dir_fd, name)
                return True
            finally:
                os.close(lock_fd)
        finally:
            os.close(dir_fd)
    finally:
        os.close(root_fd)


def _stale(registration: Registration, now: float) -> bool:
    if registration.closed_at is not None:
        return now - registration.closed_at > ACK_KEEP_S
    return now - (registration.last_poll_at or registration.started_at) > DEAD_AFTER_S


def _remove(root: Path, name: str) -> None:
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dir_fd = os.open(name, DIR_FLAGS, dir_fd=root_fd)
        try:
            _remove_at(root_fd, dir_fd, name)
        finally:
            os.close(dir_fd)
    finally:
        os.close(root_fd)


def _remove_at(root_fd: int, dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(REGISTRATION_FILE, dir_fd=dir_fd)  # first: from now on remediate finds no job by this name
    shutil.rmtree(name, dir_fd=root_fd, ignore_errors=True)  # fd-based: never follows a symlink
