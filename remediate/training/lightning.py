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

from typing import Any

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError:  # pragma: no cover - the standalone package
    from pytorch_lightning import Callback, LightningModule, Trainer  # type: ignore[no-redef]

from remediate.training.callbacks import FrameworkCallback
from remediate.training.handlers import drop_gradients

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


class RemediateCallback(FrameworkCallback, Callback):
    framework = "lightning"
    unsupported_batch_size = UNSUPPORTED_BATCH_SIZE

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.choose_writer(trainer.is_global_zero)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        self.start(pl_module, list(trainer.optimizers), schedulers, trainer.global_step)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = _loss_of(outputs)
        self.step_end(trainer.global_step, loss, _as_float(loss))

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if self.control.skip_batch(poll=False):  # polled at the end of every batch, skipped or not
            drop_gradients(p for group in optimizer.param_groups for p in group["params"])

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.control.close()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.control.close()
