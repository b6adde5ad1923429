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

With ``batching=`` (`remediate.training.batching.Batching`) the callback declares
``reduce_batch_size`` and ``set_dataloader_workers`` and applies them at the next epoch, the
earliest point Lightning allows: it counts accumulation from the epoch's first batch
(``batch_progress.current.ready % accumulate_grad_batches``) and re-creates the train loader
only at an epoch start. The handler changes the `Batching` at once (acknowledged "applies at
the next epoch"); the rest of the epoch runs the old micro-batch and accumulation; at the
next epoch Lightning calls ``train_dataloader()`` again, which must build the loader from
``batching.micro_batch_size`` and ``batching.dataloader_workers``, and ``on_train_epoch_start``
sets ``trainer.accumulate_grad_batches``. The effective batch (micro-batch x accumulation x
ranks) stays exactly the same. Needs ``Trainer(reload_dataloaders_every_n_epochs=1,
accumulate_grad_batches=batching.accumulation_steps)``, automatic optimization, no
``GradientAccumulationScheduler`` and a loader that matches the `Batching` at start; otherwise
both commands are refused, with the reason, at plan time.

Every rank runs the callback; in a DDP job rank 0 reads the inbox and broadcasts
(remediate.training.client). Needs ``lightning`` (or ``pytorch_lightning``) >= 2.0.

`StepMetricsCallback` exports the per-rank step metrics the fail-slow and loss rules read
(`remediate.training.metrics.StepMetrics`) from the same Trainer:

    trainer = Trainer(callbacks=[RemediateCallback("my-job", checkpoint_dir="ckpts"),
                                 StepMetricsCallback(StepMetrics("my-job", port=9400))])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
    from lightning.pytorch.callbacks import GradientAccumulationScheduler
except ImportError:  # pragma: no cover - the standalone package
    from pytorch_lightning import Callback, LightningModule, Trainer  # type: ignore[no-redef]
    from pytorch_lightning.callbacks import GradientAccumulationScheduler  # type: ignore[no-redef]

from remediate.training.batching import Batching
from remediate.training.callbacks import FrameworkCallback
from remediate.training.handlers import drop_gradients
from remediate.training.metrics import StepMetrics

UNSUPPORTED_BATCH_SIZE = (
    "the callback was given no batching= (the micro-batch, accumulation and workers its train_dataloader() reads)"
)
"""Why the callback refuses the batching commands without a `Batching`."""
APPLIES_AT = "the next epoch (Lightning reloads train_dataloader() and the accumulation then)"


class BatchingNotFollowed(RuntimeError):
    """The reloaded train loader does not run the `Batching`'s micro-batch: the effective batch would change."""


def batch_size_refusal(trainer: Trainer, pl_module: LightningModule, batching: Batching) -> str | None:
    """Why this trainer cannot apply reduce_batch_size / set_dataloader_workers at an epoch start (None: it can)."""
    loader = trainer.train_dataloader
    if trainer.reload_dataloaders_every_n_epochs != 1:
        return "the Trainer does not reload train_dataloader() every epoch: set reload_dataloaders_every_n_epochs=1"
    if not pl_module.automatic_optimization:
        return "manual optimization: Lightning does not accumulate gradients for it"
    if any(isinstance(callback, GradientAccumulationScheduler) for callback in trainer.callbacks):
        return "a GradientAccumulationScheduler sets accumulate_grad_batches itself"
    if trainer.accumulate_grad_batches != batching.accumulation_steps:
        return (
            f"the Trainer accumulates {trainer.accumulate_grad_batches} batches, "
            f"batching.accumulation_steps is {batching.accumulation_steps}"
        )
    if getattr(loader, "batch_size", None) != batching.micro_batch_size:
        return (
            f"the train loader's batch_size is {getattr(loader, 'batch_size', None)}, batching.micro_batch_size is "
            f"{batching.micro_batch_size}: train_dataloader() must build it from the Batching"
        )
    if batching.dataloader_workers is not None and getattr(loader, "num_workers", None) != batching.dataloader_workers:
        return (
            f"the train loader has {getattr(loader, 'num_workers', None)} workers, batching.dataloader_workers is "
            f"{batching.dataloader_workers}: train_dataloader() must build it from the Batching"
        )
    return None


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
        refusal = None
        if self.batching is not None:
            self.batching.applies_at = APPLIES_AT
            refusal = batch_size_refusal(trainer, pl_module, self.batching)
        self.start(pl_module, list(trainer.optimizers), schedulers, trainer.global_step, refusal)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # The loader of this epoch was just built by train_dataloader(); the accumulation follows it.
        if self.batching is None or self.control.batching is not self.batching:
            return
        size = getattr(trainer.train_dataloader, "batch_size", None)
        if size != self.batching.micro_batch_size:
            raise BatchingNotFollowed(
                f"train_dataloader() built a loader of batch_size {size} while batching.micro_batch_size is "
                f"{self.batching.micro_batch_size}: build it from the Batching"
            )
        trainer.accumulate_grad_batches = self.batching.accumulation_steps

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = _loss_of(outputs)
        self.step_end(trainer.global_step, loss, lambda: _as_float(loss))

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if self.control.skip_batch(poll=False):  # polled at the end of every batch, skipped or not
            drop_gradients(p for group in optimizer.param_groups for p in group["params"])

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.control.close()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.control.close()


def batch_samples(batch: Any) -> int:
    """The samples in a batch as Lightning hands it over: a tensor's first dimension, that of a sequence's or a
    mapping's first tensor (``(x, y)``, ``{"input_ids": ...}``), else 0 (unknown: no samples counted)."""
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()), None)
    elif isinstance(batch, Sequence) and not isinstance(batch, str | bytes):
        batch = batch[0] if batch else None
    shape = getattr(batch, "shape", None)
    if shape:
        return int(shape[0])
    return len(batch) if isinstance(batch, Sequence) and not isinstance(batch, str | bytes) else 0


class StepMetricsCallback(Callback):
    """`StepMetrics` from a Lightning Trainer: the rank's step time, and on rank 0 the loss and samples.

    ``on_train_batch_start`` starts the step and ``on_before_backward`` records it, so the time is the rank's
    own part of the step (data loading and forward), which is what tells a straggling rank apart in data
    parallel: the gradient all-reduce in backward lasts until the slowest rank arrives, on every rank
    (`remediate.training.metrics`). The loss is read with ``.item()``, which waits for the GPU, so that its
    forward is counted. With gradient accumulation each micro-batch is one observation.

    With ``grad_norm=True`` it also exports the global gradient norm (`training_grad_norm`, the input of
    TrainingGradNormSpike): Lightning computes it only to clip and keeps no copy, so the callback computes it in
    ``on_before_optimizer_step``, where the gradients are whole (accumulated, all-reduced by DDP, unscaled by
    AMP) and not clipped yet: one norm over the gradients on the device, no GPU sync (the tensor is read at
    most once every `grad_norm_sync_every_s`), on rank 0 only. Under FSDP or DeepSpeed a rank holds a shard of
    the gradients: pass the norm their clip_grad_norm_ returns to `metrics.observe_grad_norm` instead.

    metrics: a `StepMetrics`, or the job name to make one with (in prometheus_client's global registry, not
        served: give your own `StepMetrics(..., port=...)` for that; it stays yours to close).
    samples: the samples in a batch (default `batch_samples`: the first dimension of its first tensor).
    grad_norm: export the global gradient norm (default off: one norm kernel per optimizer step on rank 0).
    """

    def __init__(
        self, metrics: StepMetrics | str, *, samples: Callable[[Any], int] = batch_samples, grad_norm: bool = False
    ) -> None:
        super().__init__()
        self.metrics = StepMetrics(metrics) if isinstance(metrics, str) else metrics
        self._samples = samples
        self._batch_samples = 0
        self._grad_norm = grad_norm

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._batch_samples = self._samples(batch)
        self.metrics.start()

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Any) -> None:
        self.metrics.step(loss=_as_float(loss), samples=self._batch_samples)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if not self._grad_norm or not self.metrics.exports_grad_norm:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if grads:  # none: a skipped batch whose gradients were dropped
            self.metrics.observe_grad_norm(total_norm(grads))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._grad_norm:
            self.metrics.flush_grad_norm()


def total_norm(grads: Sequence[Any]) -> Any:
    """The L2 norm of all `grads` together, as the tensor clip_grad_norm_ would return (computed on their device,
    never read here)."""
    import torch

    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if get_total_norm is not None:
        return get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads]))
