"""`TrainingControl`: what a training job calls at step boundaries to receive remediate's commands.

    control = TrainingControl("my-job", checkpoints=ckpts, optimizer=opt, scheduler=sched)
    for batch in loader:
        if control.skip_batch():          # a rollback may ask to skip the next K batches (still serves commands)
            continue
        loss = train_step(batch)
        step += 1
        step = control.poll(step, loss)   # cheap; applies a pending command; a rollback changes the step

`poll` costs one ``os.stat`` of the inbox directory when nothing changed (its mtime, size
and inode are compared with the last scan); the inbox is only listed and read when they
differ, shortly after a change (mtime granularity), after a wake-up signal, and once per
heartbeat as a safety net. Commands are applied right there, between steps, in the
thread that trains — never inside a signal handler: the optional wake-up signal (SIGUSR2)
only sets a flag and writes a byte to a pipe that `wait` listens on.

A command is claimed by renaming it out of the inbox, its id is appended to
``applied.log`` (fsynced) before anything is changed, and the acknowledgement is written
to the outbox last: a command is applied at most once, even when the job restarts in
between (it then acknowledges it as failed, "interrupted"). A command whose ``expires_at``
has passed is acknowledged as expired and never applied.

In a job of several ranks (torch.distributed initialized before `register`/the first
`poll`), every rank calls `poll` at the same steps; rank 0 reads the inbox and broadcasts
each command, every rank applies it at the same step, and rank 0 acknowledges with the
outcome of all ranks. No torch import here (`remediate.training.distributed` has it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from remediate.training.batching import Batching
from remediate.training.checkpoints import CheckpointIndex
from remediate.training.commands import check_schema, command_schema, open_schema, problems
from remediate.training.controldirs import age_out, remove_if_idle
from remediate.training.distributed import LocalChannel
from remediate.training.handlers import (
    BUILTIN_HANDLERS,
    CheckpointStore,
    CommandContext,
    CommandRejected,
    Handler,
    HandlerFunction,
    current_lrs,
)
from remediate.training.protocol import (
    APPLIED,
    DEFAULT_CONTROL_ROOT,
    ENV_CONTROL_ROOT,
    ENV_JOB,
    EXPIRED,
    FAILED,
    PROTOCOL_VERSION,
    REJECTED,
    WAKE_SIGNALS,
    Ack,
    CheckpointInfo,
    Command,
    JobPaths,
    ProtocolError,
    Registration,
    atomic_write_json,
    check_command_id,
    check_kind,
    identity_from_env,
    pid_start_time,
    read_json,
    this_host,
)

log = logging.getLogger("remediate.training")

RACY_NS = 50_000_000
"""A directory whose mtime is this close to the scan is listed again at the next poll: a change in the same
clock tick as the scan would leave the mtime as it was (file times advance in coarse ticks)."""
OUTBOX_MAX_AGE_S = 7 * 24 * 3600
"""Acknowledgements older than this are removed when a job registers."""


class JobNameInUse(RuntimeError):
    """Another live process holds this job name on this control root: its commands would go to either job."""


_Claimed = tuple[str, float, "Command | Exception"]
"""A command file the job took from its inbox: (id, when, the command or why it is not one)."""


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
        sync_every: in a multi-rank job, look for commands every this many polls (each look is one
            broadcast of 8 bytes).
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
        self.paths = JobPaths(Path(root or os.environ.get(ENV_CONTROL_ROOT) or DEFAULT_CONTROL_ROOT), name)
        self.job = name
        self.checkpoints: CheckpointStore | None = checkpoints
        self._optimizers = _as_list(optimizer)
        self._schedulers = _as_list(scheduler)
        self.framework = framework
        if wake_signal is not None and signal.Signals(wake_signal).name not in WAKE_SIGNALS:
            raise ValueError(f"wake_signal must be one of {', '.join(WAKE_SIGNALS)} or None")
        self.wake_signal = wake_signal
        self.heartbeat_interval = heartbeat_interval
        if sync_every < 1:
            raise ValueError("sync_every must be at least 1")
        self.sync_every = sync_every
        self.rewinds_step = rewinds_step
        self.on_ack = on_ack
        self._handlers: dict[str, Handler] = dict(BUILTIN_HANDLERS)
        self._unsupported: dict[str, str] = dict(unsupported or {})
        for kind in self._unsupported:
            self._handlers.pop(kind, None)
        self.acks: list[Ack] = []
        """The acknowledgements this job wrote, oldest first (the last 100)."""

        self.rank = 0
        self.world_size = 1
        self._channel: Any = LocalChannel()
        self._registered = False
        self._closed = False
        self._step: int | None = None
        self._loss: Any = None
        self._skip = 0
        self.batches_skipped = 0
        """How many batches `skip_batch` has told the loop to drop so far."""
        self._polls = 0
        self._applied: set[str] = set()
        self._seen: tuple[int, int, int] | None = None
        self._dirty = True
        self._next_heartbeat = 0.0
        self._next_io_warning = 0.0
        self._started_at = time.time()
        self._pod, self._namespace = identity_from_env()  # checked against Prometheus' target labels (expect_pod)
        self._inbox = ""
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._previous_handler: Any = None
        self._signal_installed = False
        self._checkpoint_index: list[CheckpointInfo] = []
        self._lock_fd: int | None = None
        self._rebase: tuple[int, int] | None = None
        """(step, new step) of a rollback applied inside `skip_batch`: the next `poll` continues from there."""
        for kind, handler in (handlers or {}).items():
            self.add_handler(kind, handler)
        self.batching: Batching | None = None
        if batching is not None:
            self.attach(batching=batching)
        if isinstance(checkpoints, CheckpointIndex):
            checkpoints.subscribe(self._on_checkpoints)

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
                if kind in self._unsupported:
                    continue  # the loop this integration runs never reads it: declaring it would be a lie
                self.add_handler(kind, handler)
        if optimizer is not None:
            self._optimizers = _as_list(optimizer)
        if scheduler is not None:
            self._schedulers = _as_list(scheduler)
        if checkpoints is not None:
            self.checkpoints = checkpoints
            if isinstance(checkpoints, CheckpointIndex):
                checkpoints.subscribe(self._on_checkpoints)
            if self._registered:
                self._on_checkpoints(checkpoints.list())

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
        self._unsupported.pop(kind, None)
        if not isinstance(handler, Handler):
            handler = Handler(handler, prepare, None if schema is None else check_schema(schema))
        self._handlers[kind] = handler
        if self._registered and self.rank == 0 and not self._closed:
            self._write_registration()  # remediate validates against the new declaration from now on

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
        return {kind: handler.schema or open_schema() for kind, handler in sorted(self._handlers.items())}

    @property
    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    # ------------------------------------------------------------------ lifecycle

    def register(self) -> TrainingControl:
        """Create the job's directories and job.json, pick up commands a previous run left half done.

        Called by the first `poll` if you do not call it. In a multi-rank job, call it after
        torch.distributed is initialized. Raises `JobNameInUse` when another live process holds the
        name on this control root (a dead one's registration is taken over).
        """
        if self._registered:
            return self
        self._detect_ranks()
        if self.rank == 0:
            self.paths.create()
            self._take_name()
            self._inbox = str(self.paths.inbox)
            self._applied = self._read_applied()
            self._install_signal()
            if self.checkpoints is not None and not self._checkpoint_index:
                with contextlib.suppress(Exception):
                    self._checkpoint_index = list(self.checkpoints.list())
            self._write_registration(fsync=True)
            self._recover_taken()
            self._prune_outbox()
            age_out(self.paths.root, self.job)
        self._registered = True
        self._closed = False
        return self

    def close(self) -> None:
        """Stop: restore the signal disposition and mark job.json closed (nobody should wait for this job);
        remove the control directory when nothing is outstanding (`controldirs.remove_if_idle`)."""
        if not self._registered or self._closed:
            return
        self._closed = True
        self._uninstall_signal()
        if self.rank == 0:
            with contextlib.suppress(OSError):
                self._write_registration(fsync=True, closed=True)
            remove_if_idle(self.paths)  # while it still holds the lock
        self._release_name()

    def _take_name(self) -> None:
        """Hold the job name for this process's life: an flock on job.lock, kept open until `close`.

        The kernel drops the lock when the process dies, so a crashed job's name is free again at once and
        its stale job.json is simply overwritten; there is no window between checking and taking.
        """
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.paths.lock, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise JobNameInUse(self._holder_message("holds the lock on " + str(self.paths.lock))) from None
        try:
            self._refuse_live_unlocked_holder()
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _refuse_live_unlocked_holder(self) -> None:
        """A job.json of a live process on this host that holds no lock (a job on an older library)."""
        try:
            holder = self.paths.read_registration()
        except (FileNotFoundError, ProtocolError):
            return
        if holder.pid == os.getpid() or holder.closed_at is not None or holder.host != this_host():
            return
        start = pid_start_time(holder.pid)
        if start is None or holder.pid_start is None or start != holder.pid_start:
            return  # gone, or the pid now belongs to another process: a stale registration, taken over
        raise JobNameInUse(self._holder_message("is registered and still running", holder))

    def _holder_message(self, how: str, holder: Registration | None = None) -> str:
        if holder is None:
            with contextlib.suppress(FileNotFoundError, ProtocolError):
                holder = self.paths.read_registration()
        who = "another process" if holder is None else f"process {holder.pid} on host {holder.host or '?'}"
        return (
            f"job name {self.job!r} is already taken on control root {self.paths.root}: {who} {how}. "
            "Two live jobs with one name would each get the other's commands: give this job another name "
            "(TrainingControl(job=...) / $REMEDIATE_TRAINING_JOB), or stop the other one first"
        )

    def _release_name(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

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
        if self._rebase is not None:  # a rollback applied while skipping: count on from its step
            before, after = self._rebase
            self._rebase = None
            step = after + (step - before)
        return self._poll(step, loss)

    def _poll(self, step: int, loss: Any = None) -> int:
        if not self._registered:
            self.register()
        elif self._closed:
            return step
        self._step = step
        if loss is not None:
            self._loss = loss
        if self.world_size > 1:
            self._polls += 1
            if self._polls % self.sync_every:
                return step
            pending = self._collect() if self.rank == 0 and self._should_scan(step) else []
            return self._run_commands(step, pending)
        if self.rank != 0:
            return step
        # The common case, kept short: one stat of the inbox, compared with what the last scan saw.
        if time.monotonic() >= self._next_heartbeat:
            self._heartbeat(step)
        elif not self._dirty:
            try:
                info = os.stat(self._inbox)
            except OSError:
                pass  # _collect reports it; training goes on
            else:
                if (info.st_mtime_ns, info.st_size, info.st_ino) == self._seen:
                    return step
        return self._run_commands(step, self._collect())

    def skip_batch(self, *, poll: bool = True) -> bool:
        """True while a rollback's skip count lasts: drop this batch (counted down by each call).

        While it skips, every call also polls (at the last polled step), so commands that arrive
        during a long skip — the lr cut that follows a rollback — are applied and acknowledged at once
        rather than after the skip. A rollback applied here moves the step the next `poll` returns.
        ``poll=False`` is for callers that poll after every batch anyway (the framework callbacks,
        which skip inside the optimizer step, where no state should be loaded).
        """
        if self._skip <= 0:
            return False
        self._skip -= 1
        self.batches_skipped += 1
        if poll and self._registered and not self._closed and self._step is not None:
            before = self._step
            after = self._poll(before)
            if after != before and self.rewinds_step:
                self._rebase = (self._rebase[0] if self._rebase else before, after)
        return True

    @property
    def batches_to_skip(self) -> int:
        return self._skip

    def request_skip(self, batches: int) -> None:
        self._skip += max(0, int(batches))

    def current_loss(self) -> float | None:
        loss = self._loss
        if loss is None:
            return None
        if hasattr(loss, "detach"):
            loss = loss.detach()
        if hasattr(loss, "item"):
            loss = loss.item()
        return float(loss)

    def pending(self) -> bool:
        """Whether the inbox may hold something new (without reading it)."""
        if self.rank != 0 or not self._registered:
            return False
        if self._dirty:
            return True
        try:
            info = os.stat(self._inbox)
        except OSError:
            return True  # let _collect report it
        return (info.st_mtime_ns, info.st_size, info.st_ino) != self._seen

    def wait(self, timeout: float, interval: float = 0.5) -> bool:
        """Block up to `timeout` seconds until the inbox may hold a command; then call `poll`.

        For a job that waits (paused, or stopped on a NaN loss): wakes at once on the wake-up
        signal, otherwise notices a command within `interval`. Single-process jobs / rank 0.
        """
        if not self._registered:
            self.register()
        deadline = time.monotonic() + timeout
        while True:
            if self.pending():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if time.monotonic() >= self._next_heartbeat and self._step is not None:
                self._heartbeat(self._step, rescan=False)  # alive while waiting; the loop above stats the inbox
            pause = min(interval, remaining)
            if self._wake_r is not None:
                ready, _, _ = select.select([self._wake_r], [], [], pause)
                if ready:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
            else:
                time.sleep(pause)

    # ------------------------------------------------------------------ commands

    def _should_scan(self, step: int) -> bool:
        if time.monotonic() >= self._next_heartbeat:
            self._heartbeat(step)
        return self.pending()

    def _run_commands(self, step: int, pending: list[_Claimed]) -> int:
        while True:
            payload = None
            while self.rank == 0:
                try:
                    payload = self._next_payload(pending, step)
                    break
                except OSError as exc:  # every rank must still get the broadcast below
                    self._io_trouble("handling a command", exc)
                    if not pending:
                        break
            payload = self._channel.broadcast(payload)
            if payload is None:
                return step
            command = Command.from_dict(payload["command"])
            ctx = CommandContext(
                command=command,
                params=dict(payload["params"]),
                control=self,
                step=step,
                rank=self.rank,
                world_size=self.world_size,
            )
            outcome = self._apply(ctx)
            outcomes = self._channel.gather(outcome)
            if self.rank == 0:
                try:
                    self._acknowledge_applied(command, float(payload["received_at"]), outcomes)
                except OSError as exc:
                    self._io_trouble(f"acknowledging {command.id}", exc)
            step = ctx.step
            self._step = step

    def _collect(self) -> list[_Claimed]:
        """Claim every command file in the inbox (rename into taken/) and read it; oldest command first.

        A control directory that cannot be read (removed, unmounted) is reported and recreated if possible;
        it never stops training.
        """
        claimed: list[_Claimed] = []
        try:
            self._claim_into(claimed)
        except OSError as exc:
            self._io_trouble("reading the inbox", exc)
        # Oldest first: a rollback and the lr cut issued after it must not swap (the rollback would undo the cut).
        claimed.sort(key=lambda c: (c[2].created_at if isinstance(c[2], Command) else 0.0, c[0]))
        return claimed

    def _io_trouble(self, doing: str, exc: OSError) -> None:
        self._dirty = True  # look again at the next poll
        now = time.monotonic()
        if now >= self._next_io_warning:
            self._next_io_warning = now + 60.0
            log.warning("remediate: %s of %s failed (%s); training goes on", doing, self.paths.dir, exc)
        with contextlib.suppress(OSError):
            self.paths.create()

    def _claim_into(self, claimed: list[_Claimed]) -> None:
        before = os.stat(self._inbox)
        scanned_at = time.time_ns()
        try:
            names = os.listdir(self._inbox)
        except FileNotFoundError:
            names = []
        self._seen = (before.st_mtime_ns, before.st_size, before.st_ino)
        self._dirty = scanned_at - before.st_mtime_ns < RACY_NS
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            command_id = name[: -len(".json")]
            try:
                check_command_id(command_id)
            except ProtocolError:
                log.warning("remediate: ignoring %s in the inbox: not a command file name", name)
                continue
            try:
                os.rename(self.paths.inbox / name, self.paths.taken / name)
            except FileNotFoundError:
                continue  # withdrawn by remediate a moment ago
            claimed.append(self._read_claimed(command_id, time.time()))

    def _read_claimed(self, command_id: str, received: float) -> _Claimed:
        try:
            command = Command.from_dict(read_json(self.paths.taken_command(command_id)))
            if command.id != command_id:
                raise ProtocolError(f"file {command_id}.json holds command id {command.id!r}")
        except (ProtocolError, FileNotFoundError) as exc:
            return command_id, received, exc
        return command_id, received, command

    def _next_payload(self, pending: list[_Claimed], step: int) -> dict[str, Any] | None:
        """The next command to send to every rank, handling the ones that are not applied on the way (rank 0)."""
        while pending:
            command_id, received, command = pending.pop(0)
            taken = self.paths.taken_command(command_id)
            if not isinstance(command, Command):
                self._record_applied(command_id)
                self._ack_simple(command_id, "", REJECTED, f"not a valid command: {command}", received, step)
                continue
            if command_id in self._applied:
                if self.paths.ack(command_id).exists():
                    _unlink(taken)
                else:
                    self._ack_simple(
                        command_id,
                        command.kind,
                        REJECTED,
                        "this command id was taken before; a command is applied at most once",
                        received,
                        step,
                    )
                continue
            self._record_applied(command_id)
            if command.expired(received):
                age = received - command.expires_at
                self._ack_simple(
                    command_id,
                    command.kind,
                    EXPIRED,
                    f"expired {age:.1f} s before the job saw it; not applied",
                    received,
                    step,
                )
                continue
            handler = self._handlers.get(command.kind)
            if handler is None and command.kind in self._unsupported:
                self._ack_simple(
                    command_id,
                    command.kind,
                    REJECTED,
                    f"{command.kind!r} is not supported by this integration ({self.framework}): "
                    f"{self._unsupported[command.kind]}; nothing was changed",
                    received,
                    step,
                )
                continue
            if handler is None:
                self._ack_simple(
                    command_id,
                    command.kind,
                    REJECTED,
                    f"this job has no handler for {command.kind!r} (it handles {', '.join(self.kinds)})",
                    received,
                    step,
                )
                continue
            invalid = problems(handler.schema, command.params) if handler.schema is not None else []
            if invalid:
                self._ack_simple(
                    command_id,
                    command.kind,
                    REJECTED,
                    f"params do not match what this job declares for {command.kind!r}: {'; '.join(invalid)}",
                    received,
                    step,
                )
                continue
            ctx = CommandContext(command, dict(command.params), self, step, self.rank, self.world_size)
            if handler.prepare is not None:
                try:
                    handler.prepare(ctx)
                except CommandRejected as exc:
                    self._ack_simple(command_id, command.kind, REJECTED, str(exc), received, step)
                    continue
                except Exception as exc:
                    log.exception("remediate: preparing %s command %s failed", command.kind, command_id)
                    self._ack_simple(command_id, command.kind, FAILED, _describe(exc), received, step)
                    continue
            return {"command": command.to_dict(), "params": ctx.params, "received_at": received}
        return None

    def _apply(self, ctx: CommandContext) -> dict[str, Any]:
        before = ctx.step
        handler = self._handlers.get(ctx.command.kind)
        try:
            if handler is None:
                raise CommandRejected(f"rank {self.rank} has no handler for {ctx.command.kind!r}")
            returned = handler.apply(ctx)
            if isinstance(returned, dict):  # a handler's own facts go into the acknowledgement
                ctx.result.update(returned)
            status, detail = APPLIED, ctx.detail or f"{ctx.command.kind} applied"
        except CommandRejected as exc:
            status, detail = REJECTED, str(exc)
            ctx.step = before
        except Exception as exc:
            log.exception("remediate: applying %s command %s failed", ctx.command.kind, ctx.command.id)
            status, detail = FAILED, _describe(exc)
        return {
            "rank": self.rank,
            "status": status,
            "detail": detail,
            "step_before": before,
            "step_after": ctx.step,
            "result": ctx.result,
        }

    def _acknowledge_applied(self, command: Command, received: float, outcomes: list[dict[str, Any]]) -> None:
        mine = outcomes[0]
        status, detail = mine["status"], mine["detail"]
        others = [o for o in outcomes[1:] if o["status"] != status or o["step_after"] != mine["step_after"]]
        if others:
            status = FAILED
            detail += "; ranks disagree: " + "; ".join(
                f"rank {o['rank']} {o['status']} (step {o['step_after']}): {o['detail']}" for o in others
            )
        self._write_ack(
            Ack(
                id=command.id,
                kind=command.kind,
                status=status,
                detail=detail,
                received_at=received,
                acked_at=time.time(),
                step_before=mine["step_before"],
                step_after=mine["step_after"],
                result=mine["result"],
                job=self._identity(),
                pid=os.getpid(),
                host=this_host(),
            )
        )

    def _ack_simple(
        self, command_id: str, kind: str, status: str, detail: str, received: float, step: int | None
    ) -> None:
        self._write_ack(
            Ack(
                id=command_id,
                kind=kind,
                status=status,
                detail=detail,
                received_at=received,
                acked_at=time.time(),
                step_before=step,
                step_after=step,
                job=self._identity(),
                pid=os.getpid(),
                host=this_host(),
            )
        )

    def _write_ack(self, ack: Ack) -> None:
        atomic_write_json(self.paths.ack(ack.id), ack.to_dict(), tmp_dir=self.paths.tmp)
        _unlink(self.paths.taken_command(ack.id))
        level = logging.INFO if ack.status == APPLIED else logging.WARNING
        log.log(
            level,
            "remediate: %s command %s %s at step %s: %s",
            ack.kind,
            ack.id,
            ack.status,
            ack.step_before,
            ack.detail,
        )
        self.acks = [*self.acks[-99:], ack]
        if self.on_ack is not None:
            self.on_ack(ack)

    # ------------------------------------------------------------------ at most once

    def _read_applied(self) -> set[str]:
        try:
            text = self.paths.applied.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return set()
        return {line.strip() for line in text.splitlines() if line.strip()}

    def _record_applied(self, command_id: str) -> None:
        """Append the id to applied.log and fsync it, before the command changes anything."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.paths.applied, flags, 0o644)
        try:
            os.write(fd, f"{command_id}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self._applied.add(command_id)

    def _recover_taken(self) -> None:
        """Commands a previous run of this job claimed: finish what can be finished, never apply twice."""
        try:
            names = sorted(os.listdir(self.paths.taken))
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            command_id = name[: -len(".json")]
            try:
                check_command_id(command_id)
            except ProtocolError:
                continue
            taken = self.paths.taken / name
            if command_id not in self._applied:
                # Claimed but never started: back to the inbox, to be judged again (it may have expired).
                with contextlib.suppress(OSError):
                    os.rename(taken, self.paths.inbox / name)
                continue
            if self.paths.ack(command_id).exists():
                _unlink(taken)
                continue
            kind = ""
            with contextlib.suppress(Exception):
                kind = str(read_json(taken).get("kind", ""))
            self._ack_simple(
                command_id,
                kind,
                FAILED,
                "interrupted: the job stopped while applying this command; it is not applied again (at most once)",
                time.time(),
                None,
            )

    def _prune_outbox(self) -> None:
        cutoff = time.time() - OUTBOX_MAX_AGE_S
        with contextlib.suppress(OSError), os.scandir(self.paths.outbox) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)

    # ------------------------------------------------------------------ registration and heartbeat

    def _detect_ranks(self) -> None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from remediate.training.distributed import TorchChannel

            self._channel = TorchChannel()
            self.rank, self.world_size = self._channel.rank, self._channel.world_size
            return
        self.rank = int(os.environ.get("RANK", "0") or 0)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world > 1:
            log.warning(
                "remediate: WORLD_SIZE=%s but torch.distributed is not initialized: only rank 0 applies commands "
                "(register after init_process_group)",
                world,
            )
        self.world_size = 1

    def _identity(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "pid": os.getpid(),
            "host": this_host(),
            "rank": self.rank,
            "world_size": self.world_size,
            "framework": self.framework,
        }

    def _registration(self, *, closed: bool = False) -> Registration:
        lrs: list[float] = []
        with contextlib.suppress(Exception):
            lrs = current_lrs(self._optimizers)
        return Registration(
            job=self.job,
            pid=os.getpid(),
            pid_start=pid_start_time(os.getpid()),
            host=this_host(),
            rank=self.rank,
            world_size=self.world_size,
            framework=self.framework,
            started_at=self._started_at,
            last_step=self._step,
            last_poll_at=time.time() if self._step is not None else None,
            heartbeat_s=self.heartbeat_interval,
            wake_signal=None
            if closed or not self._signal_installed or self.wake_signal is None
            else signal.Signals(self.wake_signal).name,
            kinds=tuple(self.kinds),
            commands=self.commands,
            checkpoints=tuple(self._checkpoint_index),
            lr=tuple(lrs),
            closed_at=time.time() if closed else None,
            pod=self._pod,
            namespace=self._namespace,
            version=PROTOCOL_VERSION,
        )

    def _write_registration(self, *, fsync: bool = False, closed: bool = False) -> None:
        atomic_write_json(
            self.paths.registration, self._registration(closed=closed).to_dict(), tmp_dir=self.paths.tmp, fsync=fsync
        )

    def _heartbeat(self, step: int, *, rescan: bool = True) -> None:
        """Rewrite job.json (last step, poll time, lr) and force the next look at the inbox."""
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval
        self._step = step
        if rescan:
            self._dirty = True  # safety net: list the inbox once per heartbeat whatever its mtime says
        try:
            self._write_registration()
        except OSError as exc:
            log.warning("remediate: cannot update %s: %s", self.paths.registration, exc)

    def _on_checkpoints(self, checkpoints: Iterable[CheckpointInfo]) -> None:
        self._checkpoint_index = list(checkpoints)
        if self._registered and self.rank == 0 and not self._closed:
            try:
                self._write_registration()
            except OSError as exc:
                log.warning("remediate: cannot update %s: %s", self.paths.registration, exc)

    # ------------------------------------------------------------------ wake-up signal

    def _install_signal(self) -> None:
        if self.wake_signal is None or threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(self.wake_signal)
        if current not in (signal.SIG_DFL, None):
            log.warning(
                "remediate: %s already has a handler; not installing the wake-up handler",
                signal.Signals(self.wake_signal).name,
            )
            return
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._previous_handler = signal.signal(self.wake_signal, self._on_signal)
        self._signal_installed = True

    def _uninstall_signal(self) -> None:
        if self._signal_installed and self.wake_signal is not None:
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(self.wake_signal, self._previous_handler or signal.SIG_DFL)
            self._signal_installed = False
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only a flag and a byte: commands are applied by poll(), between steps, in the training thread.
        self._dirty = True
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"\0")


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
