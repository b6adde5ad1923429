"""Hugging Face Trainer: a `TrainerCallback` that saves checkpoints remediate can roll back to and applies its commands.

    from remediate.training.hf import RemediateTrainerCallback

    trainer = Trainer(..., callbacks=[RemediateTrainerCallback("my-job", checkpoint_dir="ckpts", every_n_steps=100)])

At the end of every optimizer step (``on_step_end``: after the optimizer and scheduler
stepped) the callback saves a checkpoint every ``every_n_steps`` steps (model, optimizer and
scheduler state dicts; the loss is the last one the Trainer logged, so set ``logging_steps``
no larger than ``every_n_steps`` for a meaningful good mark) and polls the inbox. A rollback
restores those states in place; ``state.global_step`` is not rewound (the Trainer's logging,
saving and ``max_steps`` depend on it), so the acknowledgement's step is the checkpoint's
and the Trainer's counter continues. Skipped batches are dropped in ``on_pre_optimizer_step``
by clearing the gradients (the optimizer leaves the weights alone; with gradient accumulation
one skipped "batch" is one optimizer step's worth of micro-batches); the Trainer still
counts them as steps and its scheduler still steps.

Needs ``transformers`` (and ``accelerate``, which its Trainer needs for PyTorch).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from remediate.training.batching import REDUCE_BATCH_SIZE
from remediate.training.checkpoints import DEFAULT_MAX_LOSS_RATIO, CheckpointIndex, TorchCheckpoints
from remediate.training.client import TrainingControl
from remediate.training.handlers import CheckpointStore, drop_gradients

UNSUPPORTED_BATCH_SIZE = (
    "the Trainer builds its data loader and fixes gradient_accumulation_steps once per train():"
    " the callback cannot change the micro-batch or the accumulation, so the effective batch would not be"
    " what an acknowledgement says"
)
"""Why the callback refuses reduce_batch_size (until it is wired into the trainer): never declared, always rejected."""


class RemediateTrainerCallback(TrainerCallback):
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
        wake_signal: int | None = signal.SIGUSR2,
        max_loss_ratio: float | None = DEFAULT_MAX_LOSS_RATIO,
        **control_options: Any,
    ) -> None:
        """
        job, root: the job name and control root, as for `TrainingControl`.
        checkpoint_dir / keep / good_loss_below / max_loss_ratio: where and how the built-in
            `TorchCheckpoints` keeps checkpoints (saved every `every_n_steps` optimizer steps, default 100;
            None: only on command). A checkpoint is good when its loss is finite, below `good_loss_below`
            (if set) and not above `max_loss_ratio` (default 3) x the median of the recent good ones.
        checkpoints: your own `CheckpointStore` instead (then `checkpoint_dir`, `keep`, `good_loss_below`
            and `max_loss_ratio` are not used).
        wake_signal: the wake-up signal (SIGUSR2; None: no handler — SIGUSR1 is Lightning's/SLURM's).
        Other keyword arguments go to `TrainingControl`.
        """
        if checkpoints is None and checkpoint_dir is None:
            raise ValueError("RemediateTrainerCallback needs checkpoint_dir= (or your own checkpoints=)")
        self.every_n_steps = every_n_steps
        self._own_checkpoints = checkpoints is None
        self.checkpoints: CheckpointStore = checkpoints or TorchCheckpoints(
            checkpoint_dir,  # type: ignore[arg-type]
            keep=keep,
            good_loss_below=good_loss_below,
            max_loss_ratio=max_loss_ratio,
            writer=False,  # decided in on_train_begin (state.is_world_process_zero)
        )
        self.control = TrainingControl(
            job,
            root=root,
            checkpoints=self.checkpoints,
            framework="transformers",
            wake_signal=wake_signal,
            rewinds_step=False,
            unsupported={REDUCE_BATCH_SIZE: UNSUPPORTED_BATCH_SIZE, **control_options.pop("unsupported", {})},
            **control_options,
        )
        self._last_loss: float | None = None
        self._last_saved: int | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        model, optimizer, scheduler = kwargs.get("model"), kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        if self._own_checkpoints and isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.writer = state.is_world_process_zero
            if state.is_world_process_zero:
                self.checkpoints.directory.mkdir(parents=True, exist_ok=True)
        if isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.attach(model=model, optimizer=optimizer, scheduler=scheduler)
        if state.global_step > 0 and isinstance(self.checkpoints, CheckpointIndex):
            # resume_from_checkpoint: this run continues the previous one's lineage at that step.
            self.checkpoints.continue_from(state.global_step)
        self.control.attach(optimizer=optimizer, scheduler=scheduler)
        self.control.register()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and isinstance(logs.get("loss"), int | float):
            self._last_loss = float(logs["loss"])

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.control.skip_batch(poll=False):  # polled at the end of every batch, skipped or not
            model = kwargs.get("model")
            if model is not None:
                drop_gradients(model.parameters())

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        step = state.global_step
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0 and step != self._last_saved:
            self._last_saved = step
            self.checkpoints.save(step, self._last_loss)
        self.control.poll(step, self._last_loss)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.control.close()
