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

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from remediate.training.callbacks import FrameworkCallback
from remediate.training.handlers import drop_gradients

UNSUPPORTED_BATCH_SIZE = (
    "the Trainer builds its train loader once per train() and fixes the batches per epoch and per update step"
    " from it: the callback cannot change the micro-batch inside train(), so the effective batch would not be"
    " what an acknowledgement says (resume with a smaller per_device_train_batch_size instead)"
)
"""Why the callback refuses reduce_batch_size and set_dataloader_workers: never declared, always rejected.

Verified against transformers 5.24 (`Trainer._inner_training_loop` / `_run_epoch`): `get_train_dataloader()`
runs once per train(), accelerate wraps that loader, and `steps_in_epoch` / `num_update_steps_per_epoch`
are computed from it before the first epoch. Only `args.gradient_accumulation_steps` is read again, at
every update step, but the optimizer steps where ``(step + 1) % gradient_accumulation_steps == 0 or
step + 1 == steps_in_epoch``: with a smaller micro-batch the epoch has more batches than the stale
`steps_in_epoch`, so it would step at the wrong boundaries and the effective batch would change. The
workers are refused with it: the loader is accelerate's, built from `dataloader_num_workers` once."""


class RemediateTrainerCallback(FrameworkCallback, TrainerCallback):
    framework = "transformers"
    unsupported_batch_size = UNSUPPORTED_BATCH_SIZE
    _last_loss: float | None = None
    """The loss the Trainer logged last (its checkpoints' good mark: set logging_steps <= every_n_steps)."""

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.choose_writer(state.is_world_process_zero)
        self.start(
            kwargs.get("model"),
            kwargs.get("optimizer"),
            kwargs.get("lr_scheduler"),
            state.global_step,
            UNSUPPORTED_BATCH_SIZE,
        )

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
        self.step_end(state.global_step, self._last_loss, self._last_loss)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.control.close()
