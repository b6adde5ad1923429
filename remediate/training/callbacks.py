"""What the framework callbacks share (`lightning.RemediateCallback`, `hf.RemediateTrainerCallback`):
their checkpoints, their `TrainingControl`, and the steps of a training run they hook. No framework import."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from remediate.training.batching import REDUCE_BATCH_SIZE, SET_DATALOADER_WORKERS, Batching
from remediate.training.checkpoints import DEFAULT_MAX_LOSS_RATIO, CheckpointIndex, TorchCheckpoints
from remediate.training.client import TrainingControl
from remediate.training.handle import CheckpointStore
from remediate.training.legacy import split_options
from remediate.training.options import ControlOptions


class FrameworkCallback:
    """The framework-independent half of a callback; the framework's own hooks call the methods below."""

    framework: ClassVar[str]
    unsupported_batch_size: ClassVar[str]
    """Why the callback refuses reduce_batch_size and set_dataloader_workers until `start` finds the trainer can
    honour them (`batch_size_refusal`): never declared, always rejected."""

    def __init__(
        self,
        job: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        every_n_steps: int | None = 100,
        keep: int | None = 5,
        good_loss_below: float | None = None,
        checkpoints: CheckpointStore | None = None,
        batching: Batching | None = None,
        max_loss_ratio: float | None = DEFAULT_MAX_LOSS_RATIO,
        options: ControlOptions | None = None,
        **deprecated: Any,
    ) -> None:
        """
        job, root: the job name and control root, as for `TrainingControl`.
        checkpoint_dir / keep / good_loss_below / max_loss_ratio: where and how the built-in
            `TorchCheckpoints` keeps checkpoints (saved every `every_n_steps` optimizer steps, default 100;
            None: only on command). A checkpoint is good when its loss is finite, below `good_loss_below`
            (if set) and not above `max_loss_ratio` (default 3) x the median of the recent good ones.
        checkpoints: your own `CheckpointStore` instead (then `checkpoint_dir`, `keep`, `good_loss_below`
            and `max_loss_ratio` are not used).
        batching: the micro-batch, gradient accumulation and loader workers the trainer runs
            (`remediate.training.batching`); declares reduce_batch_size and set_dataloader_workers when
            training starts, if the trainer can apply them (see the framework's module), else they are
            refused with the reason.
        options: the `TrainingControl`'s `ControlOptions` (wake_signal: SIGUSR2 by default; None: no handler,
            never SIGUSR1, which is Lightning's/SLURM's). The callback sets `framework` and `rewinds_step`
            itself and adds its own refusals to `unsupported`.
        The keywords of the previous release (wake_signal=, heartbeat_interval=, handlers=, ...) still work,
        with a DeprecationWarning.
        """
        options, handlers = split_options(type(self).__name__, options, deprecated, stacklevel=2)
        super().__init__()
        if checkpoints is None and checkpoint_dir is None:
            raise ValueError(f"{type(self).__name__} needs checkpoint_dir= (or your own checkpoints=)")
        self.every_n_steps = every_n_steps
        self.batching = batching
        self._own_checkpoints = checkpoints is None
        self.checkpoints: CheckpointStore = checkpoints or TorchCheckpoints(
            checkpoint_dir,  # type: ignore[arg-type]
            keep=keep,
            good_loss_below=good_loss_below,
            max_loss_ratio=max_loss_ratio,
            writer=False,  # decided by `choose_writer`, once the trainer knows the ranks
        )
        # Refused until `start` sees a trainer that can apply them; TrainingControl keeps this very dict.
        self._refused: dict[str, str] = {
            REDUCE_BATCH_SIZE: self.unsupported_batch_size,
            SET_DATALOADER_WORKERS: self.unsupported_batch_size,
            **(options.unsupported or {}),
        }
        self.control = TrainingControl(
            job,
            root=root,
            checkpoints=self.checkpoints,
            options=replace(options, framework=self.framework, rewinds_step=False, unsupported=self._refused),
        )
        for kind, handler in handlers.items():
            self.control.add_handler(kind, handler)
        self._last_saved: int | None = None

    def choose_writer(self, is_rank_zero: bool) -> None:
        """Only rank 0 writes the built-in checkpoints."""
        if self._own_checkpoints and isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.writer = is_rank_zero
            if is_rank_zero:
                self.checkpoints.directory.mkdir(parents=True, exist_ok=True)

    def start(
        self, model: Any, optimizers: Any, schedulers: Any, global_step: int, batch_size_refusal: str | None = None
    ) -> None:
        """Training starts: attach what the trainer built, and register the job.

        batch_size_refusal: why this trainer cannot honour the batching commands (None: it can)."""
        if isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.attach(model=model, optimizer=optimizers, scheduler=schedulers)
        if global_step > 0 and isinstance(self.checkpoints, CheckpointIndex):
            # Resumed from a checkpoint: this run continues the previous one's lineage at that step.
            self.checkpoints.continue_from(global_step)
        self.control.attach(optimizer=optimizers, scheduler=schedulers)
        if self.batching is not None and batch_size_refusal is None:
            self.control.batching = self.batching
            for kind, handler in self.batching.handlers().items():
                self.control.add_handler(kind, handler)  # lifts the refusal set in __init__
        elif self.batching is not None:
            for kind in (REDUCE_BATCH_SIZE, SET_DATALOADER_WORKERS):
                self._refused[kind] = batch_size_refusal
        self.control.register()

    def step_end(self, step: int, loss: Any, checkpoint_loss: Callable[[], float | None]) -> None:
        """An optimizer step ended: save a checkpoint every `every_n_steps` steps, then poll.

        `loss`: this step's loss (a tensor is kept as it is: no GPU sync on a step that needs no number);
        `checkpoint_loss`: the same as a float, called only when a checkpoint is saved."""
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0 and step != self._last_saved:
            self._last_saved = step
            self.checkpoints.save(step, checkpoint_loss())
        self.control.poll(step, loss)
