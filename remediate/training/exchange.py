"""A multi-rank job's polls: when the ranks exchange, and what rank 0 announces there (`TrainingControl.poll`).

At an exchange rank 0 claims what is in the inbox and starts a non-blocking announcement (`TorchChannel.announce`)
of how many commands it holds and how many polls until the next exchange; every rank reads it at the next poll,
when it has long arrived, and applies what was announced there, all at that same poll. No rank waits for
another unless a command was announced. Rank 0 spaces the exchanges out by the step time it measures, so that
jobs with short steps pay the exchange's thread hand-off to gloo once every few polls.
"""

from __future__ import annotations

import math
import time

from remediate.training.dispatch import Commands
from remediate.training.distributed import LocalChannel, TorchChannel
from remediate.training.handle import JobHandle
from remediate.training.inbox import Claimed, Inbox
from remediate.training.jobfile import JobFile

EXCHANGE_EVERY_S = 0.1
"""By default a multi-rank job's ranks exchange about this often when steps are shorter (rank 0 spaces the
exchanges out by the step time; with longer steps, at every poll). Each costs every rank a thread hand-off to gloo
and back."""
MAX_EXCHANGE_GAP = 32
"""Polls between two exchanges at most."""


class RankExchange:
    """The poll counts of the exchanges (the same on every rank) and the commands rank 0 announced.

    It is given the job's parts it drives (`commands`; on rank 0 `inbox` and `job_file`), not the client."""

    def __init__(
        self,
        commands: Commands,
        inbox: Inbox,
        job_file: JobFile,
        sync_every: int = 1,
        sync_every_s: float = EXCHANGE_EVERY_S,
    ) -> None:
        if not (math.isfinite(sync_every_s) and sync_every_s >= 0):
            raise ValueError("sync_every_s must be a finite number of seconds >= 0")
        self.commands = commands
        self.inbox = inbox
        self.job_file = job_file
        self.sync_every = sync_every
        self.sync_every_s = sync_every_s
        self.polls = 0
        self.next_exchange = 1
        """The poll count of the next exchange."""
        self.read_at = 0
        """The poll count at which every rank reads the last exchange's announcement (the poll after it)."""
        self.held: list[Claimed] = []
        """Commands rank 0 claimed and announced, applied by every rank at the next poll."""
        self._last_exchange: tuple[float, int] | None = None

    def poll(self, control: JobHandle, channel: LocalChannel | TorchChannel, step: int) -> int:
        """One poll on this rank: read the last announcement when due (and apply what it announced), exchange when
        due; the step to continue from."""
        assert isinstance(channel, TorchChannel)  # several ranks
        self.polls += 1
        if self.polls == self.read_at:
            commands, gap = channel.announced() or (0, 1)
            self.next_exchange = self.polls - 1 + max(1, gap)  # the same on every rank: rank 0 chose it
            if commands:
                held, self.held = self.held, []
                step = control.last_step = self.commands.run(control, channel, step, held)
        if self.polls != self.next_exchange:
            return step
        gap = 0
        if control.rank == 0:
            if self.job_file.heartbeat_due():
                self.inbox.mark_dirty()
                self.job_file.heartbeat()
            if self.inbox.changed():
                self.held.extend(self.inbox.collect())  # claimed now, applied by every rank at the next poll
            gap = self._next_gap()
        channel.announce(len(self.held), gap)
        self.read_at = self.polls + 1
        return step

    def release(self) -> None:
        """The job stops: commands claimed but never applied go back to the inbox, where remediate withdraws them
        at their expiry ("never applied") or a new run of the job takes them."""
        self.inbox.release(self.held)
        self.held = []

    def _next_gap(self) -> int:
        """Polls from this exchange to the next, chosen by rank 0: about `sync_every_s` at the step time it
        measured since the last one, at least `sync_every`, at most `MAX_EXCHANGE_GAP` (the most polls a step that
        slows down suddenly can delay a command by)."""
        now = time.monotonic()
        gap = 1
        if self._last_exchange is not None:
            at, polls = self._last_exchange
            per_poll = (now - at) / max(1, self.polls - polls)
            gap = math.ceil(self.sync_every_s / per_poll) if per_poll > 0 else MAX_EXCHANGE_GAP
        self._last_exchange = (now, self.polls)
        return max(self.sync_every, min(MAX_EXCHANGE_GAP, gap))
