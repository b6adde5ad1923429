"""SQLite's write-ahead log checkpointed by a thread of its own, not by the commit that happens to fill it.

In WAL mode SQLite copies the log back into the database file (a checkpoint) when a commit leaves it over
1,000 pages, inside that commit, while SQLite's write lock is still held: the webhook whose commit it was,
and every writer queued behind it, wait while pages are copied and the file synced. At 100 one-alert
notifications per second that is about one request in a hundred: the p99 of receipt → first step.
`remediate serve` therefore opens its databases with `commit_checkpoints=False` and runs one `WalCheckpointer`
in its executor process: a PASSIVE checkpoint every `every` seconds, which blocks neither readers nor writers.
A commit still checkpoints past sqlite.WAL_SAFETY_NET_PAGES, should this thread fall behind or be gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("remediate.store.checkpoints")

CHECKPOINT_EVERY = 0.5
"""Seconds between two checkpoints: at 100 alerts/s the log holds a few hundred pages by then."""


class Periodic:
    """A store's job in a daemon thread of the executor process (`_loop`, until `stopping` is set)."""

    thread_name = "remediate-periodic"
    stopping: threading.Event
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        raise NotImplementedError


@dataclass
class WalCheckpointer(Periodic):
    """Calls `checkpoint` (Database.checkpoint) every `every` seconds in a daemon thread until stopped; a database
    without a write-ahead log (PostgreSQL) ends the thread at its first answer."""

    thread_name = "remediate-wal-checkpoint"
    checkpoint: Callable[[], bool]
    every: float = CHECKPOINT_EVERY
    stopping: threading.Event = field(default_factory=threading.Event)
    checkpoints: int = 0
    """Checkpoints done so far (for tests and the curious)."""
    _failing: bool = field(default=False, init=False, repr=False)

    def _loop(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                has_log = self.checkpoint()
            except Exception:  # the next one tries again; a commit checkpoints past the safety net meanwhile
                if not self._failing:
                    log.exception("WAL checkpoint failed; trying again every %gs", self.every)
                self._failing = True
                continue
            if not has_log:
                return
            if self._failing:
                log.info("WAL checkpoints work again")
            self._failing = False
            self.checkpoints += 1
