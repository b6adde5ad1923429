"""Hugging Face Trainer: a `TrainerCallback` that saves checkpoints remediate can roll back to and applies its commands.

    from remediate.training.hf import RemediateTrainerCallback

    trainer = Trainer(..., callbacks=[RemediateTrainerCallback("my-job", checkpoint_dir="ckpts", every_n_steps=100)])

At the end of every optimizer step (``on_step_end``: after the optimizer and scheduler
stepped) the callback saves a checkpoint every ``every_n_steps`` steps (model, optimizer and
scheduler state dicts) and polls the inbox. A checkpoint's loss is its own step's: the mean of the
losses the model's forward returned for that step's micro-batches (a forward hook on the model),
raw. Not the loss the Trainer logs: that one is of an earlier step when the checkpoint is saved
(``on_step_end`` runs before the step is logged), and with ``logging_nan_inf_filter=True``, the
default, a NaN or Inf loss is replaced there by the average of the finite ones (0 right after a
log), which would mark a checkpoint of NaN weights good. A step whose forward returned no loss (a
``compute_loss`` of your own outside the model) saves a checkpoint of unknown loss, never good. A rollback
restores those states in place; ``state.global_step`` is not rewound (the Trainer's logging,
saving and ``max_steps`` depend on it), so the acknowledgement's step is the checkpoint's
and the Trainer's counter continues. Skipped batches are dropped in ``on_pre_optimizer_step``
by clearing the gradients (the optimizer leaves the weights alone; with gradient accumulation
one skipped "batch" is one optimizer step's worth of micro-batches); the Trainer still
counts them as steps and its scheduler still steps.

With ``batching=`` (`remediate.training.batching.Batching`) the callback declares
``reduce_batch_size`` and ``set_dataloader_workers`` and applies them at the next epoch, in one
process and under DDP: rank 0 reads the command and every rank applies it at the same optimizer
step (`remediate.training.distributed`); ``on_epoch_begin`` then runs on every rank before the
Trainer iterates its loader again and sets the batch size of every batch sampler under the loader
(with several ranks accelerate's `BatchSamplerShard` keeps its own copy), ``args.gradient_accumulation_steps``
(read at every update step) and ``num_workers`` of the torch DataLoader inside accelerate's wrapper.
The Trainer keeps the epoch's micro-batch count it took at train() start and also steps the optimizer
there, so a new accumulation must divide it (else the command is rejected); the effective batch stays
exactly the same. `batch_size_refusal` lists what else must hold (docs/training-protocol.md).

`GradNormLogCallback` exports the gradient norm the Trainer logs (`training_grad_norm`, the input of
TrainingGradNormSpike) through a `remediate.training.metrics.StepMetrics`:

    trainer = Trainer(..., args=TrainingArguments(..., logging_steps=10),
                      callbacks=[RemediateTrainerCallback(...), GradNormLogCallback(StepMetrics("my-job", port=9400))])

Needs ``transformers`` (and ``accelerate``, which its Trainer needs for PyTorch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from remediate.training.batching import Batching, set_loader_workers
from remediate.training.callbacks import FrameworkCallback
from remediate.training.handlers import drop_gradients
from remediate.training.metrics import StepMetrics
from remediate.training.skipping import loss_value

log = logging.getLogger("remediate.training")

UNSUPPORTED_BATCH_SIZE = (
    "the callback was given no batching= (the per_device_train_batch_size, gradient_accumulation_steps and"
    " dataloader_num_workers the Trainer runs)"
)
"""Why the callback refuses the batching commands without a `Batching`."""
APPLIES_AT = "the next epoch (the Trainer's on_epoch_begin, before it iterates its loader again)"


def _batch_samplers(loader: Any) -> list[Any]:
    """The batch samplers under the Trainer's loader, outermost first: the torch BatchSampler, and with several
    ranks accelerate's BatchSamplerShard around it (which copies batch_size at construction and yields only
    batches of that size)."""
    found: list[Any] = []
    sampler = getattr(loader, "batch_sampler", None)
    while sampler is not None and all(sampler is not seen for seen in found):
        found.append(sampler)
        sampler = getattr(sampler, "batch_sampler", None)
    return found


def _torch_loader(loader: Any) -> Any:
    """The torch DataLoader that starts the workers: accelerate's DataLoaderShard wraps one (`base_dataloader`)
    and only forwards reads, so num_workers set on the wrapper would never reach it."""
    return getattr(loader, "base_dataloader", loader)


def batch_size_refusal(args: TrainingArguments, loader: Any, batching: Batching, world_size: int) -> str | None:
    """Why this Trainer cannot apply reduce_batch_size / set_dataloader_workers at an epoch start (None: it can)."""
    samplers = _batch_samplers(loader)
    sampler = samplers[-1] if samplers else None
    if not isinstance(getattr(sampler, "batch_size", None), int) or not hasattr(sampler, "sampler"):
        return "the Trainer's train loader has no batch sampler whose batch_size can change"
    if any(getattr(outer, "split_batches", False) for outer in samplers):
        return "accelerate splits each batch across the ranks (split_batches): the micro-batch is not per rank"
    if (args.per_device_train_batch_size, sampler.batch_size) != (batching.micro_batch_size,) * 2:
        return (
            f"per_device_train_batch_size is {args.per_device_train_batch_size}, batching.micro_batch_size is "
            f"{batching.micro_batch_size}"
        )
    if args.gradient_accumulation_steps != batching.accumulation_steps:
        return (
            f"gradient_accumulation_steps is {args.gradient_accumulation_steps}, batching.accumulation_steps is "
            f"{batching.accumulation_steps}"
        )
    rows, per_update = len(sampler.sampler), batching.samples_per_step * world_size
    if rows % per_update:
        return (
            f"{rows} rows per epoch are not a multiple of the effective batch {per_update}: the Trainer would "
            "cut the epoch's last update step at the boundary it counted at train() start"
        )
    if batching.dataloader_workers is not None and args.dataloader_num_workers != batching.dataloader_workers:
        return (
            f"dataloader_num_workers is {args.dataloader_num_workers}, batching.dataloader_workers is "
            f"{batching.dataloader_workers}"
        )
    if batching.dataloader_workers is not None and args.dataloader_persistent_workers:
        return "dataloader_persistent_workers: the loader keeps its first workers for the whole train()"
    return None


class RemediateTrainerCallback(FrameworkCallback, TrainerCallback):
    """``RemediateTrainerCallback(job, *, root, checkpoint_dir, every_n_steps=100, keep=5, good_loss_below,
    checkpoints, batching, max_loss_ratio=3, options=ControlOptions())``: every parameter is
    `FrameworkCallback`'s (documented there). For ``batching=`` give the ``Batching`` the Trainer runs:
    ``micro_batch_size`` = ``per_device_train_batch_size`` (per rank), ``accumulation_steps`` =
    ``gradient_accumulation_steps``, ``dataloader_workers`` = ``dataloader_num_workers`` (None: the workers
    command is not declared); every rank gives the same. Otherwise both commands are refused with the reason."""

    framework = "transformers"
    unsupported_batch_size = UNSUPPORTED_BATCH_SIZE
    _step_losses: list[Any]
    """The losses the model's forward returned since the last optimizer step (detached tensors, no GPU sync)."""
    _loss_hook: Any = None
    _warned_no_loss = False

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.choose_writer(state.is_world_process_zero)
        self._step_losses = []
        model = kwargs.get("model")
        if model is not None and self._loss_hook is None:
            self._loss_hook = model.register_forward_hook(self._record_loss)
        refusal = None
        if self.batching is not None:
            loader = kwargs.get("train_dataloader")
            # The Trainer counts the epoch's micro-batches once (steps_in_epoch) and steps the optimizer at
            # every multiple of the accumulation and at that count: a new accumulation must divide it.
            batches = len(loader) if loader is not None else 0
            self.batching.applies_at = APPLIES_AT
            self.batching.accepts = lambda micro, accumulation: (
                None
                if batches % accumulation == 0
                else f"the Trainer steps at micro-batch {batches} of each epoch (counted at train() start), "
                f"not a multiple of {accumulation}"
            )
            refusal = batch_size_refusal(args, loader, self.batching, args.world_size)
        self.start(
            kwargs.get("model"),
            kwargs.get("optimizer"),
            kwargs.get("lr_scheduler"),
            state.global_step,
            refusal,
        )

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # Before the Trainer iterates its loader for this epoch, on every rank (the command reached all of them
        # at the same optimizer step): the batch samplers read batch_size at every batch (the shard must agree
        # with the sampler it wraps, or it yields no full batch and pads one rank's epoch from its start: that
        # rank then waits alone in DDP's all-reduce), the torch loader num_workers at iter(), the epoch loop
        # gradient_accumulation_steps per update step.
        if self.batching is None or self.control.batching is not self.batching:
            return
        loader = kwargs.get("train_dataloader")
        for sampler in _batch_samplers(loader):
            sampler.batch_size = self.batching.micro_batch_size
        args.gradient_accumulation_steps = self.batching.accumulation_steps
        if self.batching.dataloader_workers is not None:
            set_loader_workers(_torch_loader(loader), self.batching.dataloader_workers)

    def _record_loss(self, module: Any, args: Any, output: Any) -> None:
        """Forward hook: keep the loss of a training forward (not an evaluation's), as the model returned it."""
        if not module.training:
            return
        loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
        if loss is not None and hasattr(loss, "detach") and loss.numel() == 1:
            self._step_losses.append(loss.detach())

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.control.skip_batch(poll=False):  # polled at the end of every batch, skipped or not
            model = kwargs.get("model")
            if model is not None:
                drop_gradients(model.parameters())

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        losses, self._step_losses = self._step_losses, []
        loss = None
        if losses:  # the step's micro-batches; a tensor op, read (a GPU sync) only when a checkpoint needs it
            loss = losses[0] if len(losses) == 1 else torch.stack([v.float() for v in losses]).mean()
        self.step_end(state.global_step, loss, lambda: self._checkpoint_loss(state.global_step, loss))

    def _checkpoint_loss(self, step: int, loss: Any) -> float | None:
        if loss is None and not self._warned_no_loss:
            self._warned_no_loss = True
            log.warning(
                "remediate: the model's forward returned no loss at step %d (a compute_loss of your own?): its "
                "checkpoints have no known loss and are never marked good; return the loss from the model's forward "
                "(ModelOutput.loss) or pass checkpoints= a store you record yourself",
                step,
            )
        return loss_value(loss)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._loss_hook is not None:
            self._loss_hook.remove()
            self._loss_hook = None
        self.control.close()


class GradNormLogCallback(TrainerCallback):
    """The gradient norm the Trainer logs, into `metrics` (`StepMetrics.observe_grad_norm`).

    The Trainer computes the norm before clipping at every optimizer step (its clip_grad_norm_, or one with an
    infinite max_norm when ``max_grad_norm`` is 0) but hands it to no callback: it reads it (``.item()``) only
    when it logs, every ``logging_steps`` (default 500), as ``logs["grad_norm"]``. This callback takes that
    float in ``on_log``: no computation and no GPU sync of its own, one norm per logging step (the steps between
    two logs are not seen, so set ``logging_steps`` to a few steps: the rule wants a norm per scrape)."""

    def __init__(self, metrics: StepMetrics) -> None:
        super().__init__()
        self.metrics = metrics

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        norm = (logs or {}).get("grad_norm")
        if norm is not None:
            self.metrics.observe_grad_norm(norm)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.metrics.flush_grad_norm()
