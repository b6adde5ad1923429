"""PyTorch Lightning: a callback that saves checkpoints remediate can roll back to and applies its commands.

    from remediate.training.lightning import RemediateCallback

    trainer = Trainer(callbacks=[RemediateCallback("my-job", checkpoint_dir="ckpts", every_n_steps=100)])

At the end of every training batch (``on_train_batch_end``, after the optimizer step and
before Lightning steps a per-step scheduler) the callback saves a checkpoint every
``every_n_steps`` optimizer steps (model, optimizers and schedulers, with the batch's loss
for the good mark) and polls the inbox. A rollback restores those states in place; Lightning's
``global_step`` is not rewound (loggers and checkpoint names depend on it growing), so the
step in the acknowledgement is the checkpoint's and the trainer's counter continues. Skipped
batches are dropped in ``on_before_optimizer_step`` by clearing the gradients, so the
optimizer leaves the weights alone; Lightning still counts them as steps.

Every rank runs the callback; in a DDP job rank 0 reads the inbox and broadcasts
(remediate.training.client). Needs ``lightning`` (or ``pytorch_lightning``) >= 2.0.
"""

from __future__ import annotations

import os
import signal
from typing import Any

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError:  # pragma: no cover - the standalone package
    from pytorch_lightning import Callback, LightningModule, Trainer  # type: ignore[no-redef]

from remediate.training.batching import REDUCE_BATCH_SIZE
from remediate.training.checkpoints import DEFAULT_MAX_LOSS_RATIO, CheckpointIndex, TorchCheckpoints
from remediate.training.client import TrainingControl
from remediate.training.handlers import CheckpointStore, drop_gradients

UNSUPPORTED_BATCH_SIZE = (
    "Lightning's Trainer builds its data loader and fixes accumulate_grad_batches once per fit:"
    " the callback cannot change the micro-batch or the accumulation, so the effective batch would not be"
    " what an acknowledgement says"
)
"""Why the callback refuses reduce_batch_size (until it is wired into the trainer): never declared, always rejected."""


def _loss_of(outputs: Any) -> Any:
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return outputs


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach()
    return float(value)


class RemediateCallback(Callback):
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
        super().__init__()
        if checkpoints is None and checkpoint_dir is None:
            raise ValueError("RemediateCallback needs checkpoint_dir= (or your own checkpoints=)")
        self.every_n_steps = every_n_steps
        self._own_checkpoints = checkpoints is None
        self.checkpoints: CheckpointStore = checkpoints or TorchCheckpoints(
            checkpoint_dir,  # type: ignore[arg-type]
            keep=keep,
            good_loss_below=good_loss_below,
            max_loss_ratio=max_loss_ratio,
            writer=False,  # decided in setup(), once the trainer knows the ranks
        )
        self.control = TrainingControl(
            job,
            root=root,
            checkpoints=self.checkpoints,
            framework="lightning",
            wake_signal=wake_signal,
            rewinds_step=False,
            unsupported={REDUCE_BATCH_SIZE: UNSUPPORTED_BATCH_SIZE, **control_options.pop("unsupported", {})},
            **control_options,
        )
        self._last_saved: int | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._own_checkpoints and isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.writer = trainer.is_global_zero
            if trainer.is_global_zero:
                self.checkpoints.directory.mkdir(parents=True, exist_ok=True)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        optimizers = list(trainer.optimizers)
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        if isinstance(self.checkpoints, TorchCheckpoints):
            self.checkpoints.attach(model=pl_module, optimizer=optimizers, scheduler=schedulers)
        if trainer.global_step > 0 and isinstance(self.checkpoints, CheckpointIndex):
            # fit(ckpt_path=...): this run continues the previous one's lineage at that step.
            self.checkpoints.continue_from(trainer.global_step)
        self.control.attach(optimizer=optimizers, scheduler=schedulers)
        self.control.register()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        loss = _loss_of(outputs)
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0 and step != self._last_saved:
            self._last_saved = step
            self.checkpoints.save(step, _as_float(loss))
        self.control.poll(step, loss)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if self.control.skip_batch(poll=False):  # polled at the end of every batch, skipped or not
            drop_gradients(p for group in optimizer.param_groups for p in group["params"])

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.control.close()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.control.close()
