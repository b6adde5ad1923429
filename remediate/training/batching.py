"""`Batching`: the micro-batch size, gradient accumulation and loader workers a job lets remediate change.

    batching = Batching(micro_batch_size=32, accumulation_steps=1, dataloader_workers=8)
    control = TrainingControl("llm-7b", optimizer=opt, batching=batching)
    loader = DataLoader(dataset, batch_sampler=batching.batch_sampler(RandomSampler(dataset)),
                        num_workers=batching.dataloader_workers)
    batching.attach_loader(loader)

Attaching a `Batching` declares two commands in job.json (docs/training-protocol.md):

- ``reduce_batch_size`` (``factor`` in (0, 1) or ``to: N``): a smaller micro-batch, and the
  gradient accumulation multiplied so that the effective batch (micro-batch x accumulation x
  ranks) stays exactly what it was. The new micro-batch is the largest divisor of the old
  micro-batch x accumulation that is at most the one asked for, never below
  ``min_micro_batch_size``. The loop reads `micro_batch_size` (the `batch_sampler` does) and
  `accumulation_steps` at its next optimizer step.
- ``set_dataloader_workers`` (``workers: N``, at most ``max_dataloader_workers``, or ``factor`` in
  (0, 1): that part of the current workers, rounded down): sets
  ``num_workers`` of the attached loaders; a DataLoader starts that many workers with its next
  iterator (the next epoch), unless the loop restarts it at once (`generation` moved).

Handlers run in the training thread inside `poll`, between optimizer steps: never inside an
accumulation cycle. No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from remediate.training.commands import command_schema
from remediate.training.handlers import CommandContext, CommandRejected, Handler

REDUCE_BATCH_SIZE = "reduce_batch_size"
SET_DATALOADER_WORKERS = "set_dataloader_workers"


def _fraction(description: str) -> dict[str, Any]:
    """The schema of a `factor` param: a number strictly between 0 and 1 (it only ever shrinks something)."""
    return {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "exclusiveMinimum": True,
        "exclusiveMaximum": True,
        "description": description,
    }


@dataclass
class Batching:
    """What the job's loop reads at every optimizer step; the two commands change it in place."""

    micro_batch_size: int
    accumulation_steps: int = 1
    dataloader_workers: int | None = None
    """None: the job does not let remediate change its loader workers (the command is not declared)."""
    min_micro_batch_size: int = 1
    max_dataloader_workers: int | None = None
    """Default: the CPUs of this machine."""
    on_change: Callable[[Batching, str], None] | None = None
    """Called (in the training thread) with the command's name after each change."""
    applies_at: str = "the loop's next optimizer step"
    """When the loop reads a change (acknowledgements say it): a framework callback sets its own."""
    accepts: Callable[[int, int], str | None] | None = None
    """A framework's last word on a new (micro-batch, accumulation): why it cannot run it (None: it can)."""
    generation: int = 0
    """Moves on every change: a loop that rebuilds its loader compares it with the one it built for."""
    loaders: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.micro_batch_size < 1 or self.accumulation_steps < 1 or self.min_micro_batch_size < 1:
            raise ValueError("micro_batch_size, accumulation_steps and min_micro_batch_size must be at least 1")
        if self.max_dataloader_workers is None:
            self.max_dataloader_workers = os.cpu_count() or 1

    @property
    def samples_per_step(self) -> int:
        """Samples one rank feeds into one optimizer step: micro-batch x accumulation."""
        return self.micro_batch_size * self.accumulation_steps

    def attach_loader(self, loader: Any) -> None:
        """A DataLoader whose `num_workers` set_dataloader_workers changes (its next iterator uses it)."""
        self.loaders.append(loader)

    def batch_sampler(self, sampler: Iterable[int], *, drop_last: bool = False) -> DynamicBatchSampler:
        return DynamicBatchSampler(sampler, self, drop_last=drop_last)

    def handlers(self) -> dict[str, Handler]:
        """The commands this object serves, with their declared schemas (for `TrainingControl`)."""
        found = {
            REDUCE_BATCH_SIZE: Handler(
                self._reduce_batch_size,
                schema=command_schema(
                    {
                        "factor": _fraction("multiply the micro-batch by this"),
                        "to": {
                            "type": "integer",
                            "minimum": self.min_micro_batch_size,
                            "description": "the micro-batch size wanted",
                        },
                    },
                    one_of=[["factor"], ["to"]],
                    description="a smaller micro-batch; gradient accumulation keeps the effective batch",
                ),
            )
        }
        if self.dataloader_workers is not None:
            found[SET_DATALOADER_WORKERS] = Handler(
                self._set_workers,
                schema=command_schema(
                    {
                        "workers": {"type": "integer", "minimum": 0, "maximum": self.max_dataloader_workers},
                        "factor": _fraction("multiply the current workers by this (rounded down)"),
                    },
                    one_of=[["workers"], ["factor"]],
                    description="the data loader's worker processes, from its next iterator on",
                ),
            )
        return found

    # ------------------------------------------------------------------ handlers

    def _reduce_batch_size(self, ctx: CommandContext) -> dict[str, Any]:
        micro, accumulation = self.micro_batch_size, self.accumulation_steps
        wanted = int(ctx.params["to"]) if "to" in ctx.params else int(micro * float(ctx.params["factor"]))
        if wanted >= micro:
            raise CommandRejected(f"micro-batch {micro} is already at most {wanted}: nothing to reduce")
        if wanted < self.min_micro_batch_size:
            raise CommandRejected(
                f"micro-batch {micro} reduced as asked would be {wanted}, below min_micro_batch_size "
                f"{self.min_micro_batch_size}"
            )
        per_step = micro * accumulation
        fitting = [d for d in range(min(wanted, per_step), self.min_micro_batch_size - 1, -1) if per_step % d == 0]
        if not fitting:
            raise CommandRejected(
                f"no micro-batch between {self.min_micro_batch_size} (min_micro_batch_size) and {wanted} divides "
                f"{per_step} (micro-batch {micro} x accumulation {accumulation}): the effective batch would change"
            )
        new = fitting[0]
        refusal = self.accepts(new, per_step // new) if self.accepts is not None else None
        if refusal:
            raise CommandRejected(f"micro-batch {new} x accumulation {per_step // new}: {refusal}")
        self.micro_batch_size, self.accumulation_steps = new, per_step // new
        self._changed(REDUCE_BATCH_SIZE)
        world = ctx.world_size
        ctx.detail = (
            f"micro-batch {micro} -> {new}, gradient accumulation {accumulation} -> {self.accumulation_steps}; "
            f"effective batch stays {per_step * world}"
            + (f" ({wanted} asked: the largest divisor of {per_step} not above it)" if new != wanted else "")
            + f"; applies at {self.applies_at}"
        )
        return {
            "requested_micro_batch_size": wanted,
            "micro_batch_size_before": micro,
            "micro_batch_size_after": new,
            "accumulation_steps_before": accumulation,
            "accumulation_steps_after": self.accumulation_steps,
            "effective_batch_size_before": per_step * world,
            "effective_batch_size_after": self.samples_per_step * world,
            "applies_at": self.applies_at,
        }

    def _set_workers(self, ctx: CommandContext) -> dict[str, Any]:
        before = self.dataloader_workers or 0
        if "workers" in ctx.params:
            workers = int(ctx.params["workers"])
        else:
            workers = int(before * float(ctx.params["factor"]))
            if workers == before:
                raise CommandRejected(f"{before} workers x {ctx.params['factor']} is still {before}: nothing to reduce")
        self.dataloader_workers = workers
        for loader in self.loaders:
            set_loader_workers(loader, workers)
        self._changed(SET_DATALOADER_WORKERS)
        ctx.detail = (
            f"data loader workers {before} -> {workers} ({len(self.loaders)} loader(s) updated; "
            f"they start that many with their next iterator); applies at {self.applies_at}"
        )
        return {
            "workers_before": before,
            "workers_after": workers,
            "loaders_updated": len(self.loaders),
            "applies_at": self.applies_at,
        }

    def _changed(self, command: str) -> None:
        self.generation += 1
        if self.on_change is not None:
            self.on_change(self, command)


def set_loader_workers(loader: Any, workers: int) -> None:
    """`workers` worker processes for a torch DataLoader from its next iterator on (it reads num_workers there).

    A DataLoader built with no workers keeps prefetch_factor None, and its next iterator with workers fails
    on it: such a loader gets torch's default (2), as it would have had if built with workers."""
    loader.num_workers = workers
    if workers > 0 and getattr(loader, "prefetch_factor", 2) is None:
        loader.prefetch_factor = 2


@dataclass(eq=False)
class DynamicBatchSampler:
    """A batch sampler whose batch size is the `Batching`'s current micro-batch (read at every batch).

    Give it to ``DataLoader(batch_sampler=...)``: after reduce_batch_size the loader yields the new
    size without being rebuilt (batches already prefetched by workers keep the old size).
    """

    sampler: Iterable[int]
    batching: Batching
    _: KW_ONLY
    drop_last: bool = False

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) >= self.batching.micro_batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        total = len(self.sampler)  # type: ignore[arg-type]
        size = self.batching.micro_batch_size
        return total // size if self.drop_last else -(-total // size)
