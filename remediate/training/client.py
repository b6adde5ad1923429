"""`TrainingControl`: what a training job calls at step boundaries to receive remediate's commands.

    control = TrainingControl("my-job", checkpoints=ckpts, optimizer=opt, scheduler=sched)
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
and applying one), `outbox`, `wakeup`, `skipping` (the batches a rollback drops).

In a job of several ranks (torch.distributed initialized before `register`/the first
`poll`), every rank calls `poll` at the same steps; rank 0 reads the inbox and broadcasts
each command, every rank applies it at the same step, and rank 0 acknowledges with the
outcome of all ranks. No torch import here (`remediate.training.distributed` has it).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediate.training.batching import Batching
from remediate.training.checkpoints import CheckpointIndex, as_list
from remediate.training.commands import check_schema, command_schema
from remediate.training.dispatch import Commands
from remediate.training.distributed import LocalChannel, TorchChannel, detect_channel
from remediate.training.exchange import EXCHANGE_EVERY_S, RankExchange
from remediate.training.files import JobPaths
from remediate.training.handlers import CheckpointStore, Handler, HandlerFunction
from remediate.training.inbox import Inbox
from remediate.training.jobfile import JobFile, JobNameInUse
from remediate.training.outbox import Outbox
from remediate.training.protocol import DEFAULT_CONTROL_ROOT, ENV_CONTROL_ROOT, ENV_JOB, Ack, check_kind
from remediate.training.skipping import Skips, loss_value
from remediate.training.wakeup import WakeUp

__all__ = ["JobNameInUse", "TrainingControl"]


class TrainingControl:
    """One job's side of the training command protocol (docs/training-protocol.md)."""

    def __init__(
        self,
        job: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        checkpoints: CheckpointStore | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
        framework: str = "pytorch",
        wake_signal: int | None = signal.SIGUSR2,
        heartbeat_interval: float = 2.0,
        sync_every: int = 1,
        sync_every_s: float = EXCHANGE_EVERY_S,
        rewinds_step: bool = True,
        handlers: dict[str, HandlerFunction | Handler] | None = None,
        on_ack: Callable[[Ack], None] | None = None,
        batching: Batching | None = None,
        unsupported: dict[str, str] | None = None,
    ) -> None:
        """
        job: the name remediate finds the job by (an alert label's value, e.g. the pod name); default
            ``$REMEDIATE_TRAINING_JOB``. Letters, digits, '.', '_', '-'.
        root: the control root shared with remediate; default ``$REMEDIATE_TRAINING_CONTROL_ROOT``,
            else /run/remediate/training.
        checkpoints: a `TorchCheckpoints`, `CallableCheckpoints` or your own `CheckpointStore`
            (needed by rollback and checkpoint commands).
        optimizer, scheduler: one or a list each (scale_lr changes them; frameworks attach them later).
        wake_signal: the signal that wakes a waiting job (SIGUSR2; None: no handler). Installed only
            from the main thread and only if nothing handles that signal yet.
        sync_every, sync_every_s: in a multi-rank job, the ranks exchange (one non-blocking 16-byte broadcast) at
            least `sync_every` polls apart and about one per `sync_every_s` seconds of steps, at most 32 polls
            apart (`exchange`); a command is applied at the poll after the exchange that found it. 0 s: every poll.
        rewinds_step: whether the caller moves its step counter back after a rollback (a plain loop
            does; the Lightning/Hugging Face callbacks restore the state but leave the trainer's counter).
        handlers: extra command kinds -> handler (a function of a CommandContext, or a `Handler`);
            `handler` (a decorator) also declares the params schema.
        on_ack: called with every acknowledgement this job writes (e.g. to log it).
        batching: the micro-batch size, accumulation and loader workers the loop reads; declares the
            reduce_batch_size (and set_dataloader_workers) commands (`remediate.training.batching`).
        unsupported: command kind -> why this integration cannot apply it (the framework callbacks set it):
            such a kind is never declared, even by an attached `Batching`, and a command of that kind is
            rejected with the reason. A handler you add yourself for that kind lifts it (you wired it).
        """
        name = job or os.environ.get(ENV_JOB)
        if not name:
            raise ValueError(f"TrainingControl needs a job name (argument job= or ${ENV_JOB})")
        if sync_every < 1:
            raise ValueError("sync_every must be at least 1")
        self.paths = JobPaths(Path(root or os.environ.get(ENV_CONTROL_ROOT) or DEFAULT_CONTROL_ROOT), name)
        self.job = name
        self.checkpoints: CheckpointStore | None = None
        self._optimizers = as_list(optimizer)
        self._schedulers = as_list(scheduler)
        self.framework = framework
        self.heartbeat_interval = heartbeat_interval
        self.rewinds_step = rewinds_step
        self.rank, self.world_size = 0, 1
        self.last_step: int | None = None
        self.batching: Batching | None = None
        self.inbox = Inbox(self.paths)
        self._wake = WakeUp(wake_signal, self.inbox.mark_dirty)
        self.job_file = JobFile(self, self._wake)
        self.outbox = Outbox(self.paths, self.job_file.identity, on_ack)
        self.acks: list[Ack] = self.outbox.acks
        """The acknowledgements this job wrote, oldest first (the last 100)."""
        self._commands = Commands(framework, unsupported, self.inbox, self.outbox)
        self._channel: LocalChannel | TorchChannel = LocalChannel()
        self._registered = self._closed = False
        self._loss: Any = None
        self._exchange = RankExchange(self._commands, sync_every, sync_every_s)
        self._skips = Skips()
        for kind, handler in (handlers or {}).items():
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
                checkpoints.subscribe(self.job_file.on_checkpoints)
            if self._registered:
                self.job_file.on_checkpoints(checkpoints.list())

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
        self.job_file.rewrite()  # remediate validates against the new declaration from now on

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
            self.job_file.open()
            self.inbox.read_applied()
            self.inbox.recover_taken(self.outbox)
            self.outbox.prune()
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
            self._exchange.release(self.inbox)
            self.job_file.close()

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
        if self.job_file.heartbeat_due():
            self.inbox.mark_dirty()  # safety net: list the inbox once per heartbeat whatever its mtime says
            self.job_file.heartbeat()
        # The common case, kept short: one stat of the inbox, compared with what the last scan saw.
        if not self.inbox.changed():
            return step
        self.last_step = self._commands.run(self, self._channel, step, self.inbox.collect())
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
        return self.rank == 0 and self._registered and self.inbox.changed()

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
            if self.job_file.heartbeat_due() and self.last_step is not None:
                self.job_file.heartbeat()  # alive while waiting; the loop above stats the inbox
            self._wake.sleep(min(interval, remaining))
        return True
