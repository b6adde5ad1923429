"""The executor process's heartbeat, as its master and the HTTP workers see it.

A SIGSTOPped (or hung) executor process stays alive to `waitpid`: its master did not notice, nothing restarted
it, and its runs waited. The executor's heartbeat thread writes the time (CLOCK_MONOTONIC, one clock for every
process of the host) into a small file of the server's private directory every heartbeat interval, whatever the
store does; the master kills and replaces an executor whose beat is older than the lease, and `/readyz` and
`/metrics` show its age. No remediate import: the master loads this and gunicorn only (its idle memory).
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from pathlib import Path

_FORMAT = "d"
_NO_BEAT = 0.0
"""Written by the master when it starts an executor process: no beat from it yet."""


class ExecutorBeat:
    """One 8-byte file holding the time.monotonic() of the executor process's last beat (0: none yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def reset(self) -> None:
        """A fresh executor process is starting: no beat yet (written by the master before it forks).

        Never raises: the master calls it in its loop, and a master that stopped on a missing file would take
        every process of the server with it. A directory gone is made again (0700, the master's own); a file
        that cannot be written reads as "no beat yet", which the master judges by the start grace."""
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self._write(_NO_BEAT)

    def beat(self) -> None:
        """The executor process is alive and its heartbeat thread runs (never raises: a beat is best effort)."""
        with contextlib.suppress(OSError):
            self._write(time.monotonic())

    def last(self) -> float | None:
        """time.monotonic() of the last beat; None before the first one (or with no file)."""
        try:
            with self.path.open("rb") as source:
                raw = source.read(struct.calcsize(_FORMAT))
        except OSError:
            return None
        if len(raw) != struct.calcsize(_FORMAT):
            return None
        (value,) = struct.unpack(_FORMAT, raw)
        return None if value == _NO_BEAT else float(value)

    def age(self) -> float | None:
        """Seconds since the last beat; None before the first one."""
        last = self.last()
        return None if last is None else max(0.0, time.monotonic() - last)

    def _write(self, value: float) -> None:
        # One pwrite of 8 bytes at offset 0: a reader sees the old value or the new one, never half of each.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.pwrite(fd, struct.pack(_FORMAT, value), 0)
        finally:
            os.close(fd)


class SyncBeat(ExecutorBeat):
    """A node cache's last successful read as the executor process marks it for the HTTP workers (/readyz): the
    time.monotonic() of the read and the number of nodes it found, 16 bytes written by one pwrite."""

    _SYNC = "dd"

    def synced(self, nodes: int) -> None:
        """A read completed with `nodes` nodes (never raises, as a beat)."""
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.pwrite(fd, struct.pack(self._SYNC, time.monotonic(), float(nodes)), 0)
            finally:
                os.close(fd)

    def nodes(self) -> int | None:
        """The nodes of the last read; None before the first one."""
        try:
            with self.path.open("rb") as source:
                raw = source.read(struct.calcsize(self._SYNC))
        except OSError:
            return None
        if len(raw) != struct.calcsize(self._SYNC):
            return None
        when, nodes = struct.unpack(self._SYNC, raw)
        return None if when == _NO_BEAT else int(nodes)
