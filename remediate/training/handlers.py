"""What a job does with each kind of command: the built-in handlers (rollback, scale_lr, checkpoint, skip_batches,
restart).

A handler gets a `CommandContext` and changes the training state in place: it may set
``ctx.step`` (a rollback does), fills ``ctx.result`` with JSON-able facts for the
acknowledgement and ``ctx.detail`` with one human sentence. It raises `CommandRejected`
when the command cannot be applied as asked (nothing was changed), anything else when it
failed. An optional ``prepare`` runs first, on rank 0 only, before the command is sent to
every rank: it turns the request into something every rank applies identically (the
rollback picks its checkpoint there).

No torch here: optimizers and schedulers are used through their attributes
(``param_groups``, ``base_lrs``), checkpoints through the `CheckpointStore` protocol, the job's
control through `ControlHandle` (`remediate.training.handle`): the handlers never import the client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from remediate.training.commands import command_schema
from remediate.training.handle import CheckpointStore, ControlHandle
from remediate.training.protocol import (
    CHECKPOINT_CHOICES,
    LATEST_GOOD,
    RESTART_EXIT_CODE,
    Command,
    finite_or_text,
    select_checkpoint,
)


class CommandRejected(Exception):
    """The command cannot be applied as asked; nothing was changed (acknowledged as ``rejected``)."""


@dataclass
class CommandContext:
    """One command being applied on one rank."""

    command: Command
    params: dict[str, Any]
    """The command's params; ``prepare`` may add to them (rank 0), ``apply`` sees the result on every rank."""
    control: ControlHandle
    """The job's `TrainingControl`, as far as a handler should touch it (`handle.ControlHandle`)."""
    step: int
    """The step the command is applied at. A handler that moves training elsewhere sets it."""
    rank: int = 0
    world_size: int = 1
    result: dict[str, Any] = field(default_factory=dict)
    detail: str = ""


HandlerFunction = Callable[[CommandContext], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Handler:
    apply: HandlerFunction
    """Applies the command on every rank; may return a dict, merged into the acknowledgement's result."""
    prepare: HandlerFunction | None = None
    schema: dict[str, Any] | None = None
    """The params schema declared in job.json (`remediate.training.commands`); None: any params."""


# ------------------------------------------------------------------------------------------ params
# A built-in handler's params fit its declared schema (BUILTIN_HANDLERS): Dispatch.refusal rejects a
# command whose params do not, before any handler sees them.


def _store(ctx: CommandContext) -> CheckpointStore:
    store = ctx.control.checkpoints
    if store is None:
        raise CommandRejected("no checkpoints attached to this job (TrainingControl(checkpoints=...))")
    return store


def current_lrs(optimizers: list[Any]) -> list[float]:
    return [float(group["lr"]) for optimizer in optimizers for group in optimizer.param_groups]


def describe_lrs(values: Sequence[float]) -> str:
    unique = sorted(set(values))
    if not unique:
        return "?"
    return f"{unique[0]:.3g}" if len(unique) == 1 else ", ".join(f"{v:.3g}" for v in values)


def drop_gradients(parameters: Any) -> None:
    """Clear gradients so that the next optimizer step leaves these parameters alone (how callbacks skip a batch)."""
    for parameter in parameters:
        parameter.grad = None


# ------------------------------------------------------------------------------------------ rollback


def prepare_rollback(ctx: CommandContext) -> None:
    """Pick the checkpoint (rank 0), so that every rank restores the same step."""
    which = ctx.params.get("checkpoint", LATEST_GOOD)
    min_back = ctx.params.get("min_steps_back", 0)
    saved_before = ctx.params.get("saved_before")
    store = _store(ctx)
    if "checkpoint_step" in ctx.params:
        step = ctx.params["checkpoint_step"]
        info = store.get(step)
        if info is None:
            raise CommandRejected(f"cannot roll back: no checkpoint at step {step}")
        if saved_before is not None and info.saved_at >= saved_before:
            raise CommandRejected(
                f"cannot roll back: the checkpoint at step {step} was saved at or after saved_before "
                f"({info.saved_at:.3f} >= {saved_before:.3f}), during the spike"
            )
        ctx.params["selection"] = f"the checkpoint at step {step}, as asked"
        return
    info, reason = select_checkpoint(store.list(), ctx.step, which, min_back, saved_before=saved_before)
    if info is None:
        raise CommandRejected(f"cannot roll back: {reason}")
    ctx.params["checkpoint_step"] = info.step
    ctx.params["selection"] = reason


def apply_rollback(ctx: CommandContext) -> None:
    """Restore the chosen checkpoint, move to its step, drop newer checkpoints, and skip the next batches."""
    if "checkpoint_step" not in ctx.params:  # a rank that did not prepare: only possible without a broadcast
        prepare_rollback(ctx)
    store = _store(ctx)
    skip = ctx.params.get("skip_batches", 0)
    step = ctx.params["checkpoint_step"]
    info = store.get(step)
    if info is None:
        raise CommandRejected(f"cannot roll back: rank {ctx.rank} has no checkpoint at step {step}")
    lrs_before = current_lrs(ctx.control.optimizers)
    store.load(info)
    discarded = store.discard_after(info.step)
    before = ctx.step
    ctx.step = info.step
    ctx.control.request_skip(skip)
    lrs = current_lrs(ctx.control.optimizers)
    ctx.result.update(
        checkpoint=info.to_dict(),
        selection=ctx.params.get("selection", ""),
        batches_skipped=skip,
        lr_before=[finite_or_text(v) for v in lrs_before],
        lr_after_load=[finite_or_text(v) for v in lrs],
        discarded_checkpoints=[c.step for c in discarded],
        step_counter_rewound=ctx.control.rewinds_step,
    )
    loss = "unknown loss" if info.loss is None else f"loss {info.loss:.4g}"
    skipping = f", skipping the next {skip} batches" if skip else ""
    if ctx.control.rewinds_step:
        ctx.detail = f"rolled back from step {before} to {info.step} ({loss}){skipping}"
    else:
        ctx.detail = (
            f"restored model, optimizer and scheduler from the checkpoint of step {info.step} ({loss}) at step {before}"
            f"{skipping}; the trainer's step counter continues"
        )
    if lrs:
        ctx.detail += f"; lr {describe_lrs(lrs)} from the checkpoint"


# ------------------------------------------------------------------------------------------ scale_lr


def apply_scale_lr(ctx: CommandContext) -> None:
    """Multiply every param group's lr by ``factor``, never below ``min_lr`` (a lower lr stays as it is).

    The schedulers' base lrs are scaled the same way, or their next step would compute the old lr again.
    """
    factor, floor = float(ctx.params["factor"]), float(ctx.params.get("min_lr", 0.0))
    optimizers = ctx.control.optimizers
    if not optimizers:
        raise CommandRejected("no optimizer attached to this job (TrainingControl(optimizer=...))")

    def scale(value: float) -> float:
        return max(value * factor, min(value, floor))

    before, after, floored = [], [], 0
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            old = float(group["lr"])
            new = scale(old)
            if new != old * factor:
                floored += 1
            _set_lr(group, "lr", new)
            for key in ("initial_lr", "max_lr", "min_lr"):  # LRScheduler's initial_lr; OneCycleLR's max/min
                if key in group and isinstance(group[key], int | float):
                    group[key] = scale(float(group[key]))
            before.append(old)
            after.append(new)
    schedulers = 0
    for scheduler in ctx.control.schedulers:
        schedulers += _scale_scheduler(scheduler, scale)
    ctx.result.update(
        lr_before=[finite_or_text(v) for v in before],
        lr_after=[finite_or_text(v) for v in after],
        factor=factor,
        min_lr=floor,
        groups_at_floor=floored,
        schedulers_updated=schedulers,
    )
    ctx.detail = f"lr {describe_lrs(before)} -> {describe_lrs(after)} (factor {factor:g}, floor {floor:g})"
    if floored:
        ctx.detail += f"; {floored} param group(s) held at the floor"


def _set_lr(group: dict[str, Any], key: str, value: float) -> None:
    current = group[key]
    if hasattr(current, "fill_"):  # an optimizer with a tensor lr
        current.fill_(value)
    else:
        group[key] = value


TORCH_CHECKED = (2, 13)
"""The torch minor release whose private LRScheduler attributes `_scale_scheduler` was checked against: `_last_lr`
(what the public `get_last_lr()` returns until the next `step()`; no setter exists) and SequentialLR's and
ChainedScheduler's `_schedulers` (the schedulers they wrap, whose `base_lrs` a later closed-form step reads; no
public accessor). torch is the job's own (the user pins its CPU or CUDA build), so pyproject's extras keep a floor
only; the suite's torch (scripts/test's TORCH_VERSION) is this minor, and tests/unit/training/test_checkpoints.py
fails when it is another and checks both effects through torch's public reads: read the new minor's
torch/optim/lr_scheduler.py first. Missing attributes are skipped, never an error (the group lrs still change)."""


def _scale_scheduler(scheduler: Any, scale: Callable[[float], float]) -> int:
    """Scale base_lrs (and CyclicLR's max_lrs) of a scheduler and of the schedulers it wraps; count the changed."""
    changed = 0
    if not hasattr(scheduler, "base_lrs") and hasattr(scheduler, "scheduler"):
        scheduler = scheduler.scheduler  # accelerate's AcceleratedScheduler
    for attr in ("base_lrs", "max_lrs"):
        values = getattr(scheduler, attr, None)
        if isinstance(values, list) and all(isinstance(v, int | float) for v in values):
            setattr(scheduler, attr, [scale(float(v)) for v in values])
            changed = 1
    for inner in getattr(scheduler, "_schedulers", None) or []:  # SequentialLR, ChainedScheduler
        changed += _scale_scheduler(inner, scale)
    # After the wrapped ones: a SequentialLR or ChainedScheduler has no base_lrs of its own, but its
    # get_last_lr() is what a trainer logs.
    optimizer = getattr(scheduler, "optimizer", None)
    if changed and optimizer is not None and isinstance(getattr(scheduler, "_last_lr", None), list):
        scheduler._last_lr = [float(group["lr"]) for group in optimizer.param_groups]
    return changed


# ------------------------------------------------------------------------------------------ checkpoint


def apply_checkpoint(ctx: CommandContext) -> None:
    """Save a checkpoint now, at the current step, with the last loss the job reported."""
    info = _store(ctx).save(ctx.step, ctx.control.current_loss())
    ctx.result.update(checkpoint=info.to_dict())
    ctx.detail = f"saved a checkpoint at {info.describe()}"


# ------------------------------------------------------------------------------------------ restart


class RestartRequested(SystemExit):
    """Raised by `poll` on every rank after a ``restart`` command was applied and acknowledged.

    A SystemExit with `RESTART_EXIT_CODE`: uncaught, the process exits with it and the launcher
    (``torchrun --max-restarts``, an elastic agent, a JobSet/PyTorchJob restart policy) starts the job
    again, which resumes from the checkpoint the command saved (``ckpts.resume()``).
    """

    def __init__(self, checkpoint_step: int) -> None:
        super().__init__(RESTART_EXIT_CODE)
        self.checkpoint_step = checkpoint_step


def apply_restart(ctx: CommandContext) -> None:
    """Save a checkpoint now and ask the loop to exit (every rank, once rank 0 acknowledged: `Commands.run`)."""
    info = _store(ctx).save(ctx.step, ctx.control.current_loss())
    ctx.result.update(checkpoint=info.to_dict(), exit_code=RESTART_EXIT_CODE)
    ctx.detail = (
        f"saved a checkpoint at {info.describe()}; exiting with status {RESTART_EXIT_CODE} so that the launcher "
        "restarts the job from it"
    )


# ------------------------------------------------------------------------------------------ skip_batches


def apply_skip_batches(ctx: CommandContext) -> None:
    """Drop the next N batches (the loop's `control.skip_batch()` counts them down), nothing else."""
    batches = ctx.params["batches"]
    ctx.control.request_skip(batches)
    ctx.result.update(batches_skipped=batches, batches_to_skip=ctx.control.batches_to_skip)
    ctx.detail = f"skipping the next {batches} batches ({ctx.control.batches_to_skip} to skip in all)"


_COUNT = {"type": "integer", "minimum": 0}
BUILTIN_HANDLERS: dict[str, Handler] = {
    "rollback": Handler(
        apply_rollback,
        prepare_rollback,
        command_schema(
            {
                "checkpoint": {"type": "string", "enum": list(CHECKPOINT_CHOICES)},
                "min_steps_back": _COUNT,
                "skip_batches": _COUNT,
                "saved_before": {"type": "number", "minimum": 0},
                "checkpoint_step": _COUNT,
            }
        ),
    ),
    "scale_lr": Handler(
        apply_scale_lr,
        schema=command_schema(
            {
                "factor": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                "min_lr": {"type": "number", "minimum": 0},
            },
            required=["factor"],
        ),
    ),
    "checkpoint": Handler(apply_checkpoint, schema=command_schema({})),
    "restart": Handler(
        apply_restart,
        schema=command_schema({}, description="checkpoint, then every rank exits with status 75 to be restarted"),
    ),
    "skip_batches": Handler(
        apply_skip_batches,
        schema=command_schema(
            {"batches": {"type": "integer", "minimum": 1, "description": "how many batches to drop"}},
            required=["batches"],
        ),
    ),
}
