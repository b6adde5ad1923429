"""`training.rollback`, `training.scale_lr`, `training.checkpoint`: tell a running training job what to do.

Each step delivers one command to the job through the control directory shared with it
(docs/training-protocol.md) and waits for the job's own acknowledgement:

1. The job is found from the alert's labels: the first of the configured labels
   (`training_job_labels`) whose value is a valid job name with a registration under the
   control root (`training_control_root`, a setting — never a label). A `job` param may
   name it instead (a template such as ``"{{ labels.pod }}"``); either way the name is one
   path component of letters, digits, '.', '_', '-'.
2. The command is written atomically to ``<root>/<job>/inbox/<id>.json``, with an expiry;
   the id is derived from the run, the step and the alert occurrence, so a step run again
   after a crash sends the same command (and the job applies it at most once).
3. If the job registered a wake-up signal and its process is on this host, owned by the
   owner of its job.json, and started when it registered, that signal (SIGUSR2) is sent.
4. The step waits for ``outbox/<id>.json``, at most `timeout` seconds and never past the
   step's own deadline. Its result holds what the job reports: step before/after,
   checkpoint used, lr before/after, batches skipped. Any status but ``applied`` fails the
   step with the job's reason. Without an acknowledgement by the command's expiry, the
   command is withdrawn from the inbox (so the job can never apply it late) and the step
   fails; should the job have claimed it just before it expired, the step waits a little
   longer for its answer.

The dry-run plan reads job.json: the job found (and by which label), whether it is alive
(last poll, process), and for a rollback the checkpoint it would restore according to the
job's published checkpoint index.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from remediate.actions.base import Action, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError
from remediate.training.protocol import (
    APPLIED,
    CHECKPOINT,
    CHECKPOINT_CHOICES,
    LATEST_GOOD,
    ROLLBACK,
    SCALE_LR,
    Ack,
    Command,
    JobPaths,
    ProtocolError,
    Registration,
    atomic_write_json,
    job_name_problem,
    pid_start_time,
    pid_uid,
    select_checkpoint,
    this_host,
)

RootProvider = Callable[[], Path]
ACK_POLL_S = 0.02
DEADLINE_MARGIN_S = 0.5
"""Seconds kept free before the step's own deadline, to withdraw the command and report."""
DEFAULT_TIMEOUT_S = 60.0
ALIVE_MIN_S = 30.0
"""A job that polled within max(this, 5 heartbeats) counts as alive in a plan."""


def _job_name_check(value: str) -> str | None:
    return job_name_problem(value)


def _non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else "must be a finite number >= 0"


def _factor(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be greater than 0 and at most 1 (remediate only lowers the lr)"


def _timeout(value: float) -> str | None:
    return None if 0 < value <= 3600 else "must be between 0 and 3600 seconds"


COMMON_PARAMS: dict[str, Param] = {
    "job": Param(
        str,
        check=_job_name_check,
        doc="the job's name; default: the first training_job_labels label naming a registered job",
    ),
    "timeout": Param(
        float,
        default=DEFAULT_TIMEOUT_S,
        static=True,
        check=_timeout,
        doc="seconds to wait for the job's acknowledgement (bounded by the step's timeout)",
    ),
    "wake": Param(bool, default=True, static=True, doc="send the job its registered wake-up signal"),
}


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _TrainingAction(Action):
    """Deliver one command to a training job and wait for its acknowledgement."""

    where: ClassVar[Where] = Where.NODE
    idempotent: ClassVar[bool] = True  # the command id is fixed per run step: a re-run cannot apply it twice
    kind: ClassVar[str]
    GRACE_FRACTION: ClassVar[float] = 0.2
    GRACE_MAX_S: ClassVar[float] = 10.0
    """The command expires this part of the wait (at most 10 s) before the step gives up: time for a job
    that took it at the last moment to answer."""

    def __init__(self, root: Path | RootProvider, job_labels: Sequence[str]) -> None:
        self._root = root
        self.job_labels = tuple(job_labels)

    @property
    def root(self) -> Path:
        return Path(self._root() if callable(self._root) else self._root)

    # ------------------------------------------------------------------ what each kind sends

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------------ finding the job

    def find_job(self, params: Mapping[str, Any], ctx: StepContext) -> tuple[JobPaths, Registration, str]:
        """(paths, registration, how it was found); ActionError when no registered job fits."""
        root = self.root
        if params.get("job"):
            return self._registered(root, params["job"], "param job")
        labels: Mapping[str, Any] = ctx.alert.get("labels") or {}
        tried = []
        for label in self.job_labels:
            value = labels.get(label)
            if not value:
                continue
            problem = job_name_problem(value)
            if problem:
                tried.append(f"{label}={str(value)[:80]!r} (not a job name)")
                continue
            paths = JobPaths(root, value)
            if not paths.registration.exists():
                tried.append(f"{label}={value!r} (not registered)")
                continue
            return self._registered(root, value, f"label {label}")
        looked = ", ".join(tried) if tried else "none of them is set"
        raise ActionError(
            f"no registered training job found under {root} from the labels {', '.join(self.job_labels)}: {looked}"
        )

    @staticmethod
    def _registered(root: Path, name: str, how: str) -> tuple[JobPaths, Registration, str]:
        try:
            paths = JobPaths(root, name)
            paths.check_safe()
            registration = paths.read_registration()
        except FileNotFoundError:
            raise ActionError(f"training job {name!r} ({how}) is not registered under {root}") from None
        except ProtocolError as exc:
            raise ActionError(f"training job {name!r} ({how}): {exc}") from None
        if registration.job != name:
            raise ActionError(f"{paths.registration} names job {registration.job!r}, not {name!r}")
        return paths, registration, how

    # ------------------------------------------------------------------ liveness

    @staticmethod
    def liveness(registration: Registration, paths: JobPaths, now: float) -> dict[str, Any]:
        age = None if registration.last_poll_at is None else round(now - registration.last_poll_at, 3)
        window = max(ALIVE_MIN_S, 5 * registration.heartbeat_s)
        same_host = registration.host == this_host()
        process = None
        if same_host:
            process = _same_process(registration, paths)
        reasons = []
        if registration.closed_at is not None:
            reasons.append(f"the job closed its control at {_iso(registration.closed_at)}")
        if age is None:
            reasons.append("the job has not polled yet")
        elif age > window:
            reasons.append(f"last poll {age:.0f} s ago (more than {window:.0f} s)")
        if process is False:
            reasons.append(f"process {registration.pid} is not running on {registration.host}")
        return {
            "alive": not reasons,
            "why_not": "; ".join(reasons) or None,
            "last_step": registration.last_step,
            "last_poll_at": _iso(registration.last_poll_at),
            "last_poll_age_s": age,
            "process_running": process,
        }

    # ------------------------------------------------------------------ plan

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, registration, how = self.find_job(params, ctx)
        now = time.time()
        plan: dict[str, Any] = {
            "job": registration.job,
            "found_by": how,
            "control_dir": str(paths.dir),
            "pid": registration.pid,
            "host": registration.host,
            "rank": registration.rank,
            "world_size": registration.world_size,
            "framework": registration.framework,
            **self.liveness(registration, paths, now),
            "handles": list(registration.kinds),
            "would_send": {"kind": self.kind, "params": self.command_params(params)},
            "lr": list(registration.lr),
            "checkpoints": len(registration.checkpoints),
        }
        if registration.kinds and self.kind not in registration.kinds:
            plan["warning"] = f"the job does not handle {self.kind!r}: it would reject the command"
        plan.update(self.plan_extra(params, registration))
        return plan

    # ------------------------------------------------------------------ execute

    def command_id(self, ctx: StepContext) -> str:
        occurrence = f"{ctx.alert.get('fingerprint', '')}|{ctx.alert.get('startsAt', '')}|{ctx.playbook}"
        digest = hashlib.sha256(f"{occurrence}|{ctx.run_id}|{ctx.step_index}".encode()).hexdigest()[:16]
        return f"r{ctx.run_id}-s{ctx.step_index}-{digest}"

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, registration, how = self.find_job(params, ctx)
        command_id = self.command_id(ctx)
        started = time.monotonic()
        previous = _read_ack(paths, command_id)
        if previous is not None:  # this step ran before (crash, retry): the job already answered
            return self._outcome(previous, paths, registration, how, None, started, replayed=True)
        if registration.closed_at is not None:
            raise ActionError(
                f"training job {registration.job!r} closed its control at {_iso(registration.closed_at)} "
                f"(at step {registration.last_step}): it is not running; nothing was sent"
            )
        budget = min(float(params["timeout"]), ctx.remaining() - DEADLINE_MARGIN_S)
        if budget <= 0:
            raise ActionError("no time left in the step to deliver the command")
        grace = min(self.GRACE_MAX_S, budget * self.GRACE_FRACTION)
        now = time.time()
        command = Command(
            id=command_id,
            kind=self.kind,
            params=self.command_params(params),
            created_at=now,
            expires_at=now + budget - grace,
            issued_by={
                "run_id": ctx.run_id,
                "step": ctx.step_index,
                "playbook": ctx.playbook,
                "alertname": ctx.alert.get("alertname"),
                "host": this_host(),
            },
        )
        try:
            atomic_write_json(paths.command(command_id), command.to_dict(), tmp_dir=paths.tmp)
        except OSError as exc:
            raise ActionError(f"cannot write the command into {paths.inbox}: {exc.strerror or exc}") from exc
        woken = self._wake(registration, paths) if params["wake"] else "not asked"
        hard_deadline = started + budget
        ack = self._wait_for_ack(paths, command_id, min(hard_deadline, started + (command.expires_at - now)))
        withdrawn = False
        if ack is None:
            withdrawn = _withdraw(paths, command_id)
            if not withdrawn:  # the job claimed it before it expired: give it the grace period to answer
                ack = self._wait_for_ack(paths, command_id, hard_deadline)
        if ack is None:
            self._fail_without_ack(paths, registration, command, withdrawn, woken)
        assert ack is not None
        return self._outcome(ack, paths, registration, how, command, started, woken=woken)

    @staticmethod
    def _wait_for_ack(paths: JobPaths, command_id: str, until: float) -> Ack | None:
        ack_path = paths.ack(command_id)
        while True:
            if ack_path.exists():
                ack = _read_ack(paths, command_id)
                if ack is not None:
                    return ack
            if time.monotonic() >= until:
                return None
            time.sleep(min(ACK_POLL_S, max(0.0, until - time.monotonic())))

    def _fail_without_ack(
        self, paths: JobPaths, registration: Registration, command: Command, withdrawn: bool, woken: str
    ) -> None:
        # The job may have written a heartbeat meanwhile: read it again for the message.
        with contextlib.suppress(FileNotFoundError, ProtocolError):
            registration = paths.read_registration()
        live = self.liveness(registration, paths, time.time())
        seen = (
            f"the job last polled {live['last_poll_age_s']:.1f} s ago at step {registration.last_step}"
            if live["last_poll_age_s"] is not None
            else "the job has not polled yet"
        )
        waited = command.expires_at - command.created_at
        if withdrawn:
            raise ActionError(
                f"no acknowledgement from training job {registration.job!r} within {waited:.1f} s ({seen}; "
                f"wake-up: {woken}); command {command.id} expired at {_iso(command.expires_at)} and was withdrawn "
                "from the inbox: it will never be applied"
            )
        raise ActionError(
            f"training job {registration.job!r} took command {command.id} before it expired "
            f"({_iso(command.expires_at)}) but did not acknowledge it in time ({seen}); it may still be applying it"
        )

    def _outcome(
        self,
        ack: Ack,
        paths: JobPaths,
        registration: Registration,
        how: str,
        command: Command | None,
        started: float,
        *,
        replayed: bool = False,
        woken: str = "not needed",
    ) -> dict[str, Any]:
        if ack.status != APPLIED:
            # An interrupted command's ack has no step (the job stopped while applying it): name the job's own.
            at = (
                f"at step {ack.step_before}"
                if ack.step_before is not None
                else f"(step unknown; the job last reported step {registration.last_step})"
            )
            raise ActionError(
                f"training job {registration.job!r} answered {ack.status} to {ack.kind or self.kind} "
                f"command {ack.id} {at}: {ack.detail}"
            )
        result: dict[str, Any] = {
            "job": registration.job,
            "found_by": how,
            "command_id": ack.id,
            "kind": ack.kind,
            "status": ack.status,
            "detail": ack.detail,
            "step_before": ack.step_before,
            "step_after": ack.step_after,
            **ack.result,
            "acknowledged_at": _iso(ack.acked_at),
            "acknowledged_by": ack.job,
        }
        if command is not None:
            result["params"] = command.params
            result["acknowledged_after_s"] = round(time.monotonic() - started, 3)
            result["job_latency_s"] = round(ack.acked_at - command.created_at, 3)
            result["wake_up"] = woken
        if replayed:
            result["replayed"] = "the job had already acknowledged this command (the step ran before)"
        return result

    # ------------------------------------------------------------------ wake-up

    @staticmethod
    def _wake(registration: Registration, paths: JobPaths) -> str:
        """Send the job's registered wake-up signal when it is safe to; say what was done."""
        if registration.wake_signal is None:
            return "the job registered no wake-up signal"
        if registration.host != this_host():
            return f"the job runs on {registration.host}, not here"
        if not _same_process(registration, paths):
            return f"process {registration.pid} is not the registered job (gone, or a reused pid)"
        try:
            os.kill(registration.pid, getattr(signal, registration.wake_signal))
        except OSError as exc:
            return f"{registration.wake_signal} to {registration.pid} failed: {exc.strerror or exc}"
        return f"sent {registration.wake_signal} to {registration.pid}"


def _same_process(registration: Registration, paths: JobPaths) -> bool:
    """Whether the registered pid is still the job: same start time, owned by whoever owns job.json."""
    started = pid_start_time(registration.pid)
    if started is None or registration.pid_start is None or started != registration.pid_start:
        return False
    try:
        owner = os.stat(paths.registration, follow_symlinks=False).st_uid
    except OSError:
        return False
    return pid_uid(registration.pid) == owner


def _read_ack(paths: JobPaths, command_id: str) -> Ack | None:
    try:
        return paths.read_ack(command_id)
    except ProtocolError as exc:
        raise ActionError(f"the job's acknowledgement of {command_id} is not valid: {exc}") from exc


def _withdraw(paths: JobPaths, command_id: str) -> bool:
    """Remove the command from the inbox; False when the job had already claimed it."""
    try:
        os.unlink(paths.command(command_id))
    except FileNotFoundError:
        return False
    return True


class TrainingRollbackAction(_TrainingAction):
    name: ClassVar[str] = "training.rollback"
    kind: ClassVar[str] = ROLLBACK
    description: ClassVar[str] = (
        "Roll a training job back to a checkpoint (latest, or latest good, at least N steps back) and skip batches."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            **COMMON_PARAMS,
            "checkpoint": Param(
                str, default=LATEST_GOOD, choices=CHECKPOINT_CHOICES, doc="latest or latest_good (marked good)"
            ),
            "min_steps_back": Param(int, default=0, check=lambda v: None if v >= 0 else "must be >= 0"),
            "skip_batches": Param(int, default=0, check=lambda v: None if v >= 0 else "must be >= 0"),
        }
    )

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "checkpoint": params["checkpoint"],
            "min_steps_back": params["min_steps_back"],
            "skip_batches": params["skip_batches"],
        }

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        chosen, reason = select_checkpoint(
            registration.checkpoints, registration.last_step, params["checkpoint"], params["min_steps_back"]
        )
        extra: dict[str, Any] = {
            "checkpoint": chosen.to_dict() if chosen else None,
            "checkpoint_reason": reason,
            "would_skip_batches": params["skip_batches"],
        }
        if chosen is None:
            extra["checkpoint_reason"] += (
                f" (as of step {registration.last_step}; the job decides when it applies the command)"
            )
        return extra


class TrainingScaleLrAction(_TrainingAction):
    name: ClassVar[str] = "training.scale_lr"
    kind: ClassVar[str] = SCALE_LR
    description: ClassVar[str] = "Multiply a training job's learning rate (and its scheduler's base lrs) by a factor."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            **COMMON_PARAMS,
            "factor": Param(float, required=True, check=_factor, doc="0 < factor <= 1"),
            "min_lr": Param(float, default=0.0, check=_non_negative, doc="never below this (a lower lr stays)"),
        }
    )

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"factor": params["factor"], "min_lr": params["min_lr"]}

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        factor, floor = params["factor"], params["min_lr"]
        return {"would_set_lr": [max(lr * factor, min(lr, floor)) for lr in registration.lr]}


class TrainingCheckpointAction(_TrainingAction):
    name: ClassVar[str] = "training.checkpoint"
    kind: ClassVar[str] = CHECKPOINT
    description: ClassVar[str] = "Ask a training job to save a checkpoint now."
    schema: ClassVar[ParamSchema] = ParamSchema(dict(COMMON_PARAMS))

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {}


def training_actions(root: Path | RootProvider, job_labels: Sequence[str]) -> list[Action]:
    return [
        TrainingRollbackAction(root, job_labels),
        TrainingScaleLrAction(root, job_labels),
        TrainingCheckpointAction(root, job_labels),
    ]
