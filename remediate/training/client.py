"""`TrainingControl`: what a training job calls at step boundaries to receive remediate's commands.

    control = TrainingControl("my-job", checkpoints=ckpts, optimizer=opt, scheduler=sched)
    # the rarely changed rest: TrainingControl(..., options=ControlOptions(wake_signal=None, on_ack=log))
    for batch in loader:
        if control.skip_batch():          # a rollback may ask to skip the next K batches (still serves commands)
            continue
        loss = train_step(batch)
        step += 1
        step = control.poll(step, loss)   # cheap; applies a pending command; a rollback changes the step

`poll` costs one ``os.stat`` of the inbox when nothing changed (`inbox`); a command is applied right there,
between steps, in the thread that trains — never inside a signal handler (`wakeup`) — at most once
(`inbox`: applied.log), and acknowledged last (`outbox`). The job's parts, one module each: `jobfile`
(job.json, the name lock, the heartbeat), `inbox`, `dispatch` (which commands the job handles, judging
and applying one), `outbox`, `wakeup`, `skipping` (the batches a rollback drops). They know this class
only through the Protocols of `handle`, so none of them imports it; `legacy` keeps the previous release's
keywords and attributes working (warned).

In a job of several ranks (torch.distributed initialized before `register`/the first
`poll`), every rank calls `poll` at the same steps; rank 0 reads the inbox and broadcasts
each command, every rank applies it at the same step, and rank 0 acknowledges with the
outcome of all ranks. No torch import here (`remediate.training.distributed` has it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediate.training.batching import Batching
from remediate.training.checkpoints import CheckpointIndex, as_list
from remediate.training.commands import check_schema, command_schema
from remediate.training.dispatch import Commands
from remediate.training.distributed import LocalChannel, TorchChannel, detect_channel
from remediate.training.exchange import RankExchange
from remediate.training.files import JobPaths
from remediate.training.handle import CheckpointStore
from remediate.training.handlers import Handler, HandlerFunction
from remediate.training.inbox import Inbox
from remediate.training.jobfile import JobFile, JobNameInUse
from remediate.training.legacy import LegacyAttributes, split_options
from remediate.training.options import ControlOptions
from remediate.training.outbox import Outbox
from remediate.training.protocol import DEFAULT_CONTROL_ROOT, ENV_CONTROL_ROOT, ENV_JOB, Ack, check_kind
from remediate.training.skipping import Skips, loss_value
from remediate.training.wakeup import WakeUp

__all__ = ["JobNameInUse", "TrainingControl"]


class TrainingControl(LegacyAttributes):
    """One job's side of the training command protocol (docs/training-protocol.md)."""

    def __init__(
        self,
        job: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        checkpoints: CheckpointStore | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
        batching: Batching | None = None,
        options: ControlOptions | None = None,
        **deprecated: Any,
    ) -> None:
        """
        job: the name remediate finds the job by (an alert label's value, e.g. the pod name); default
            ``$REMEDIATE_TRAINING_JOB``. Letters, digits, '.', '_', '-'.
        root: the control root shared with remediate; default ``$REMEDIATE_TRAINING_CONTROL_ROOT``,
            else /run/remediate/training.
        checkpoints: a `TorchCheckpoints`, `CallableCheckpoints` or your own `CheckpointStore`
            (needed by rollback and checkpoint commands).
        optimizer, scheduler: one or a list each (scale_lr changes them; frameworks attach them later).
        batching: the micro-batch size, accumulation and loader workers the loop reads; declares the
            reduce_batch_size (and set_dataloader_workers) commands (`remediate.training.batching`).
        options: the rarely changed rest (`ControlOptions`: wake-up signal, heartbeat, multi-rank exchange,
            on_ack, and what a framework integration sets). The job's own commands: `add_handler` or the
            `handler` decorator.
        The keywords of the previous release (wake_signal=, heartbeat_interval=, handlers=, ...) still work,
        with a DeprecationWarning (`remediate.training.legacy`).
        """
        options, handlers = split_options("TrainingControl", options, deprecated, stacklevel=2)
        name = job or os.environ.get(ENV_JOB)
        if not name:
            raise ValueError(f"TrainingControl needs a job name (argument job= or ${ENV_JOB})")
        self.options = options
        self.paths = JobPaths(Path(root or os.environ.get(ENV_CONTROL_ROOT) or DEFAULT_CONTROL_ROOT), name)
        self.job = name
        self.checkpoints: CheckpointStore | None = None
        self._optimizers = as_list(optimizer)
        self._schedulers = as_list(scheduler)
        self.framework = options.framework
        self.heartbeat_interval = options.heartbeat_interval
        self.rewinds_step = options.rewinds_step
        self.rank, self.world_size = 0, 1
        self.last_step: int | None = None
        self.batching: Batching | None = None
        self._inbox = Inbox(self.paths)
        self._wake = WakeUp(options.wake_signal, self._inbox.mark_dirty)
        self._job_file = JobFile(self, self._wake)
        self._outbox = Outbox(self.paths, self._job_file.identity, options.on_ack)
        self.acks: list[Ack] = self._outbox.acks
        """The acknowledgements this job wrote, oldest first (the last 100)."""
        self._commands = Commands(options.framework, options.unsupported, self._inbox, self._outbox)
        self._channel: LocalChannel | TorchChannel = LocalChannel()
        self._registered = self._closed = False
        self._loss: Any = None
        self._exchange = RankExchange(
            self._commands, self._inbox, self._job_file, options.sync_every, options.sync_every_s
        )
        self._skips = Skips()
        for kind, handler in handlers.items():
            self.add_handler(kind, handler)
        self.attach(batching=batching, checkpoints=checkpoints)

    # ------------------------------------------------------------------ configuration

    @property
    def optimizers(self) -> list[Any]:
        return list(self._optimizers)

    @property
    def schedulers(self) -> list[Any]:
        return list(self._schedulers)

    def attach(
        self,
        *,
        optimizer: Any = None,
        scheduler: Any = None,
        checkpoints: CheckpointStore | None = None,
        batching: Batching | None = None,
    ) -> None:
        """Set (replace) the optimizers, schedulers, checkpoint store or batching (e.g. once a framework made them)."""
        if batching is not None:
            self.batching = batching
            for kind, handler in batching.handlers().items():
                if kind not in self._commands.unsupported:  # a loop that never reads it: declaring it would be a lie
                    self.add_handler(kind, handler)
        if optimizer is not None:
            self._optimizers = as_list(optimizer)
        if scheduler is not None:
            self._schedulers = as_list(scheduler)
        if checkpoints is not None:
            self.checkpoints = checkpoints
            if isinstance(checkpoints, CheckpointIndex):
                checkpoints.subscribe(self._job_file.on_checkpoints)
            if self._registered:
                self._job_file.on_checkpoints(checkpoints.list())

    def add_handler(
        self,
        kind: str,
        handler: HandlerFunction | Handler,
        *,
        prepare: HandlerFunction | None = None,
        schema: dict[str, Any] | None = None,
    ) -> None:
        """Handle commands of `kind` with `handler(ctx)` (replacing a built-in one of the same kind).

        Register the same handlers on every rank. `prepare(ctx)` runs on rank 0 only, before the
        command is sent to every rank. `schema` (`commands.command_schema`) is declared in job.json;
        without one the command takes any params.
        """
        check_kind(kind)
        if not isinstance(handler, Handler):
            handler = Handler(handler, prepare, None if schema is None else check_schema(schema))
        self._commands.add(kind, handler)
        self._job_file.rewrite()  # remediate validates against the new declaration from now on

    def handler(
        self,
        kind: str,
        params: dict[str, dict[str, Any]] | None = None,
        *,
        required: tuple[str, ...] | list[str] = (),
        one_of: list[list[str]] | None = None,
        prepare: HandlerFunction | None = None,
        description: str | None = None,
    ) -> Callable[[HandlerFunction], HandlerFunction]:
        """Decorator: handle (and declare in job.json) the job's own command `kind`.

            @control.handler("set_dropout", params={"p": {"type": "number", "minimum": 0, "maximum": 0.9}},
                             required=["p"])
            def set_dropout(ctx):
                model.dropout.p = ctx.params["p"]
                return {"dropout": ctx.params["p"]}       # merged into the acknowledgement's result

        `params`: name -> {type: integer|number|string|boolean, minimum, maximum, enum}; remediate
        refuses other params (and a missing `required` one) before it sends anything. None: any params.
        """
        schema = command_schema(params, required=required, one_of=one_of, description=description)

        def register(function: HandlerFunction) -> HandlerFunction:
            self.add_handler(kind, Handler(function, prepare, schema))
            return function

        return register

    @property
    def commands(self) -> dict[str, dict[str, Any]]:
        """Every command this job handles -> its declared params schema (what job.json lists)."""
        return self._commands.declared

    @property
    def refused(self) -> dict[str, str]:
        """Command kinds this integration cannot apply -> why (published in job.json for remediate's refusal)."""
        return {kind: why for kind, why in sorted(self._commands.unsupported.items()) if kind not in self.commands}

    @property
    def kinds(self) -> list[str]:
        return sorted(self._commands.handlers)

    # ------------------------------------------------------------------ lifecycle

    def register(self) -> TrainingControl:
        """Create the job's directories and job.json, pick up commands a previous run left half done.

        Called by the first `poll` if you do not call it. In a multi-rank job, call it after
        torch.distributed is initialized. Raises `JobNameInUse` when another live process holds the
        name on this control root (a dead one's registration is taken over).
        """
        if self._registered:
            return self
        self._channel, self.rank, self.world_size = detect_channel()
        if self.rank == 0:
            self._job_file.open()
            self._inbox.read_applied()
            self._inbox.recover_taken(self._outbox)
            self._outbox.prune()
        self._registered = True
        self._closed = False
        return self

    def close(self) -> None:
        """Stop: restore the signal disposition and mark job.json closed (nobody should wait for this job);
        remove the control directory when nothing is outstanding (`controldirs.remove_if_idle`)."""
        if not self._registered or self._closed:
            return
        self._closed = True
        self._wake.uninstall()
        self._channel.settle()
        if self.rank == 0:
            self._exchange.release()
            self._job_file.close()

    def __enter__(self) -> TrainingControl:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the training loop's calls

    def poll(self, step: int, loss: Any = None) -> int:
        """Apply pending commands between steps; return the step to continue from (changed by a rollback).

        `loss` (a float or a 0-dim tensor; never converted unless a checkpoint needs it) is the
        latest training loss, used to mark checkpoints made on command as good or not.
        """
        return self._poll(self._skips.continued(step), loss)

    def _poll(self, step: int, loss: Any = None) -> int:
        if not self._registered:
            self.register()
        elif self._closed:
            return step
        self.last_step = step
        if loss is not None:
            self._loss = loss
        if self.world_size > 1:
            return self._exchange.poll(self, self._channel, step)
        if self.rank != 0:
            return step
        if self._job_file.heartbeat_due():
            self._inbox.mark_dirty()  # safety net: list the inbox once per heartbeat whatever its mtime says
            self._job_file.heartbeat()
        # The common case, kept short: one stat of the inbox, compared with what the last scan saw.
        if not self._inbox.changed():
            return step
        self.last_step = self._commands.run(self, self._channel, step, self._inbox.collect())
        return self.last_step

    def skip_batch(self, *, poll: bool = True) -> bool:
        """True while a rollback's skip count lasts: drop this batch (counted down by each call).

        While it skips, every call also polls (at the last polled step), so commands that arrive
        during a long skip — the lr cut that follows a rollback — are applied and acknowledged at once
        rather than after the skip. A rollback applied here moves the step the next `poll` returns.
        ``poll=False`` is for callers that poll after every batch anyway (the framework callbacks,
        which skip inside the optimizer step, where no state should be loaded).
        """
        if not self._skips.take():
            return False
        if poll and self._registered and not self._closed and self.last_step is not None:
            before = self.last_step
            after = self._poll(before)
            if after != before and self.rewinds_step:
                self._skips.moved(before, after)
        return True

    @property
    def batches_skipped(self) -> int:
        """How many batches `skip_batch` has told the loop to drop so far."""
        return self._skips.skipped

    @property
    def batches_to_skip(self) -> int:
        return self._skips.left

    def request_skip(self, batches: int) -> None:
        self._skips.request(batches)

    def current_loss(self) -> float | None:
        return loss_value(self._loss)

    def pending(self) -> bool:
        """Whether the inbox may hold something new (without reading it)."""
        return self.rank == 0 and self._registered and self._inbox.changed()

    def wait(self, timeout: float, interval: float = 0.5) -> bool:
        """Block up to `timeout` seconds until the inbox may hold a command; then call `poll`.

        For a job that waits (paused, or stopped on a NaN loss): wakes at once on the wake-up
        signal, otherwise notices a command within `interval`. Single-process jobs / rank 0.
        """
        if not self._registered:
            self.register()
        deadline = time.monotonic() + timeout
        while not self.pending():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._job_file.heartbeat_due() and self.last_step is not None:
                self._job_file.heartbeat()  # alive while waiting; the loop above stats the inbox
            self._wake.sleep(min(interval, remaining))
        return True
