"""`ControlOptions`: the settings of a `TrainingControl` that most jobs never change, in one typed value.

    control = TrainingControl("llm-7b", checkpoints=ckpts, optimizer=opt)          # the common case
    control = TrainingControl("llm-7b", checkpoints=ckpts, optimizer=opt,
                              options=ControlOptions(wake_signal=None, on_ack=log_ack))

The first five are the job's to tune; `framework`, `rewinds_step` and `unsupported` are set by an
integration that drives the loop for you (the Lightning and Hugging Face callbacks set them).
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from dataclasses import dataclass

from remediate.training.exchange import EXCHANGE_EVERY_S
from remediate.training.protocol import Ack


@dataclass(frozen=True)
class ControlOptions:
    """How a `TrainingControl` talks to remediate, beyond its job name, root and training state."""

    wake_signal: int | None = signal.SIGUSR2
    """The signal that wakes a waiting job (None: no handler). Installed only from the main thread and only if
    nothing handles that signal yet; never SIGUSR1 with Lightning or SLURM, which own it."""
    heartbeat_interval: float = 2.0
    """Seconds between two rewrites of job.json (last step, poll time, lr) while the job polls or waits."""
    sync_every: int = 1
    """In a multi-rank job, polls between two exchanges of the ranks at least (`remediate.training.exchange`)."""
    sync_every_s: float = EXCHANGE_EVERY_S
    """In a multi-rank job, the ranks exchange (one non-blocking 16-byte broadcast) about once per this many
    seconds of steps, at most 32 polls apart; a command is applied at the poll after the exchange that found it.
    0: at every poll."""
    on_ack: Callable[[Ack], None] | None = None
    """Called with every acknowledgement this job writes (e.g. to log it)."""
    framework: str = "pytorch"
    """What job.json and every acknowledgement name as the job's framework."""
    rewinds_step: bool = True
    """Whether the caller moves its step counter back after a rollback (a plain loop does; the framework
    callbacks restore the state but leave the trainer's counter)."""
    unsupported: dict[str, str] | None = None
    """Command kind -> why this integration cannot apply it: such a kind is never declared, even by an attached
    `Batching`, and a command of that kind is rejected with the reason. A handler you add yourself for that kind
    lifts it (you wired it). The control keeps this very dict: an integration may refuse more later."""

    def __post_init__(self) -> None:
        if self.sync_every < 1:
            raise ValueError("sync_every must be at least 1")
        if not (math.isfinite(self.sync_every_s) and self.sync_every_s >= 0):
            raise ValueError("sync_every_s must be a finite number of seconds >= 0")
