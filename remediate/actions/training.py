"""`training.rollback`, `training.scale_lr`, `training.checkpoint`: tell a running training job what to do.

Each step delivers one command to the job through the control directory shared with it
(docs/training-protocol.md) and waits for the job's own acknowledgement:

1. The job is found from the alert's labels: the first of the configured labels
   (`training_job_labels`) whose value is a valid job name with a registration under the
   control root (`training_control_root`, a setting — never a label). A `job` param may
   name it instead (a template such as ``"{{ labels.pod }}"``); either way the name is one
   path component of letters, digits, '.', '_', '-'.
   Before anything is sent: `expect_pod` / `expect_namespace` (Prometheus' target labels) must
   match what the job registered, and a job whose process is gone (or that closed its control)
   fails the step at once — or, with `wait_for_job`, is waited for until it registers again.
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
   longer for its answer, then fails with OutcomePending (what to look for): the executor's
   reconciliation later reads the late acknowledgement through this action's plan (`outcome`).
   The acknowledgement must come from the pid job.json named when the command was sent.
   When remediate stops (`StepContext.stopping`), the wait ends at once and an unclaimed command
   is withdrawn.

Every file below the root is reached through directory descriptors opened with O_NOFOLLOW
(`protocol.JobDir`): the agent may be root while the job owns its directory.

The dry-run plan reads job.json: the job found (and by which label), whether it is alive
(last poll, process), whether the step can act at all (`can_act`, `why_not`), and for a
rollback the checkpoint it would restore according to the job's published checkpoint index.
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
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.schema import Param, ParamSchema, duration_within
from remediate.durations import parse_duration
from remediate.errors import ActionError, OutcomePending, ParamsError
from remediate.training.protocol import (
    APPLIED,
    CHECKPOINT,
    CHECKPOINT_CHOICES,
    LATEST_GOOD,
    ROLLBACK,
    SCALE_LR,
    Ack,
    Command,
    JobDir,
    JobPaths,
    ProtocolError,
    Registration,
    job_name_problem,
    pid_start_time,
    pid_uid,
    pod_uid_of,
    process_cgroup,
    select_checkpoint,
    this_host,
)

RootProvider = Callable[[], Path]
ACK_POLL_S = 0.02
DEADLINE_MARGIN_S = 0.5
"""Seconds kept free before the step's own deadline, to withdraw the command and report."""
DEFAULT_TIMEOUT_S = 60.0
JOB_POLL_S = 0.1
"""How often a step waiting for a job to come back (wait_for_job) reads its job.json."""
ALIVE_MIN_S = 30.0
"""A job that polled within max(this, 5 heartbeats) counts as alive in a plan."""


class CommandRefused(ParamsError, ActionError):
    """The step's command or params do not fit what the job declares; nothing was sent (a 400-class refusal:
    the agent answers 422 invalid_params)."""


class NoAcknowledgement(ActionError):
    """The job did not acknowledge the command in time; it was withdrawn unapplied."""


class NotApplied(ActionError):
    """The job answered, with a status other than applied (`status`: rejected, expired or failed)."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


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
    "wait_for_job": Param(
        str,
        static=True,
        check=duration_within(0, 3600),
        doc="when the job's process is not running: wait this long (e.g. 2m) for it to register again "
        "before sending (the step's timeout must cover it and the acknowledgement); default: fail at once",
    ),
    "expect_pod": Param(
        str,
        doc='the pod (or host) the job must have registered, e.g. "{{ labels.pod }}" (a label Prometheus\' '
        "target discovery adds, not one the job exports)",
    ),
    "expect_namespace": Param(str, doc='the namespace the job must have registered, e.g. "{{ labels.namespace }}"'),
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
    settings_section: ClassVar[str] = "training"

    def __init__(self, root: Path | RootProvider, job_labels: Sequence[str]) -> None:
        self._root = root
        self.job_labels = tuple(job_labels)

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        return cls(deps.settings.control_root, deps.settings.job_labels)

    @property
    def root(self) -> Path:
        return Path(self._root() if callable(self._root) else self._root)

    # ------------------------------------------------------------------ what each kind sends

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        return {}

    def command_params_for(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        """The command's params as sent to this job (`training.command` types them by the job's schema)."""
        return self.command_params(params)

    def command_kind(self, params: Mapping[str, Any]) -> str:
        """The kind of command the step sends (fixed per action, but `training.command` names it in params)."""
        return self.kind

    def refusal(self, params: Mapping[str, Any], registration: Registration) -> str | None:
        """Why the job would certainly refuse this command (checked before anything is sent), else None."""
        return None

    # ------------------------------------------------------------------ finding the job

    def find_job(self, params: Mapping[str, Any], ctx: StepContext) -> tuple[JobPaths, Registration, str]:
        """(paths, registration, how it was found); ActionError when no registered job fits."""
        root = self.root
        if params.get("job"):
            return self._registered(root, params["job"], "param job")
        labels = ctx.alert.labels
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
        paths = JobPaths(root, name)
        with _open_job_dir(paths, how) as job_dir:
            registration = _read_registration(job_dir, paths, how)
        return paths, registration, how

    # ------------------------------------------------------------------ liveness and identity

    @staticmethod
    def liveness(registration: Registration, owner: int | None, now: float) -> dict[str, Any]:
        """`owner`: the uid owning job.json (read through the job's directory fd), None when unknown."""
        age = None if registration.last_poll_at is None else round(now - registration.last_poll_at, 3)
        window = max(ALIVE_MIN_S, 5 * registration.heartbeat_s)
        same_host = registration.host == this_host()
        process = None
        if same_host:
            process = _same_process(registration, owner)
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
            "process": _process_identity(registration.pid) if process else None,
        }

    @staticmethod
    def not_running(registration: Registration, live: Mapping[str, Any]) -> str | None:
        """Why the job certainly cannot take a command now (closed, or its process is gone), else None.

        A job that merely has not polled for a while may be in a long evaluation: it still gets the
        command (and the wake-up signal).
        """
        if registration.closed_at is not None:
            return (
                f"training job {registration.job!r} closed its control at {_iso(registration.closed_at)} "
                f"(at step {registration.last_step}): it is not running"
            )
        if live["process_running"] is False:
            return f"training job {registration.job!r} is not running: {live['why_not']}"
        return None

    @staticmethod
    def identity_problem(params: Mapping[str, Any], registration: Registration) -> str | None:
        """Why the registered job is not the one the alert's target labels name (expect_pod, expect_namespace)."""
        problems = []
        for param, field, registered in (
            ("expect_pod", "pod", registration.pod or registration.host),
            ("expect_namespace", "namespace", registration.namespace),
        ):
            wanted = params.get(param)
            if wanted is None:
                continue
            if registered is None:
                problems.append(
                    f"{param} is {wanted!r} but the job's registration records no {field} "
                    "(set $POD_NAMESPACE in the job's environment, or a newer remediate.training)"
                )
            elif registered != wanted:
                problems.append(f"{param} is {wanted!r} but the job registered {field} {registered!r}")
        if not problems:
            return None
        return (
            f"training job {registration.job!r} (pid {registration.pid}) is not the job the alert names: "
            + "; ".join(problems)
        )

    # ------------------------------------------------------------------ plan

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, _, how = self.find_job(params, ctx)
        now = time.time()
        with _open_job_dir(paths, how) as job_dir:
            registration = _read_registration(job_dir, paths, how)
            live = self.liveness(registration, job_dir.registration_owner(), now)
            own_ack = _read_ack(job_dir, self.command_id(ctx))
        plan: dict[str, Any] = {
            "job": registration.job,
            "found_by": how,
            "control_dir": str(paths.dir),
            "pid": registration.pid,
            "host": registration.host,
            "pod": registration.pod,
            "namespace": registration.namespace,
            "rank": registration.rank,
            "world_size": registration.world_size,
            "framework": registration.framework,
            **live,
            "handles": list(registration.kinds),
            "would_send": {
                "kind": self.command_kind(params),
                "params": self.command_params_for(params, registration),
            },
            "lr": list(registration.lr),
            "checkpoints": len(registration.checkpoints),
        }
        cannot = []
        refused = self.refusal(params, registration)
        if refused:
            cannot.append(refused)
        elif registration.kinds and self.command_kind(params) not in registration.kinds:
            plan["warning"] = f"the job does not handle {self.command_kind(params)!r}: it would reject the command"
            cannot.append(plan["warning"])
        identity = self.identity_problem(params, registration)
        if identity:
            cannot.append(identity)
        dead = self.not_running(registration, live)
        if dead and params.get("wait_for_job"):
            plan["would_wait_for_job"] = f"{dead}: would wait up to {params['wait_for_job']} for it to register again"
        elif dead:
            cannot.append(f"{dead}: nothing would be sent (wait_for_job is not set)")
        # The general contract of plans (docs/playbooks.md): can_act false = execute would certainly
        # fail without changing anything; why_not says why.
        plan["can_act"] = not cannot
        if cannot:
            plan["why_not"] = "; ".join(cannot)
        if own_ack is not None:
            # This very step's command was answered (a late acknowledgement): the executor's
            # reconciliation reads it from here, through the same runner as the step.
            plan["outcome"] = _ack_summary(own_ack, registration)
        plan.update(self.plan_extra(params, registration))
        return plan

    # ------------------------------------------------------------------ execute

    def command_id(self, ctx: StepContext) -> str:
        occurrence = f"{ctx.alert.fingerprint}|{ctx.alert.starts_at_text}|{ctx.playbook}"
        digest = hashlib.sha256(f"{occurrence}|{ctx.run_id}|{ctx.step_index}".encode()).hexdigest()[:16]
        return f"r{ctx.run_id}-s{ctx.step_index}-{digest}"

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, _, how = self.find_job(params, ctx)
        with _open_job_dir(paths, how) as job_dir:
            return self._execute(params, ctx, paths, job_dir, how)

    def _execute(
        self, params: Mapping[str, Any], ctx: StepContext, paths: JobPaths, job_dir: JobDir, how: str
    ) -> dict[str, Any]:
        registration = _read_registration(job_dir, paths, how)
        command_id = self.command_id(ctx)
        started = time.monotonic()
        previous = _read_ack(job_dir, command_id)
        if previous is not None:  # this step ran before (crash, retry): the job already answered
            return self._outcome(previous, registration, how, None, started, replayed=True)
        self._check_sendable(params, registration)
        fresh = self._running_job(params, ctx, job_dir, registration)
        if fresh is not registration:  # it came back (wait_for_job): it must still be the job the alert names
            registration = fresh
            self._check_sendable(params, registration)
        budget = min(float(params["timeout"]), ctx.remaining() - DEADLINE_MARGIN_S)
        if budget <= 0:
            raise ActionError("no time left in the step to deliver the command")
        grace = min(self.GRACE_MAX_S, budget * self.GRACE_FRACTION)
        now = time.time()
        command = Command(
            id=command_id,
            kind=self.command_kind(params),
            params=self.command_params_for(params, registration),
            created_at=now,
            expires_at=now + budget - grace,
            issued_by={
                "run_id": ctx.run_id,
                "step": ctx.step_index,
                "playbook": ctx.playbook,
                "alertname": ctx.alert.alertname,
                "host": this_host(),
                "pid": registration.pid,
            },
        )
        try:
            job_dir.write_command(command)
        except OSError as exc:
            raise ActionError(f"cannot write the command into {paths.inbox}: {exc.strerror or exc}") from exc
        woken = self._wake(registration, job_dir.registration_owner()) if params["wake"] else "not asked"
        hard_deadline = started + budget
        ack = self._wait_for_ack(job_dir, command_id, min(hard_deadline, started + (command.expires_at - now)), ctx)
        withdrawn = False
        if ack is None:
            withdrawn = job_dir.withdraw(command_id)
            if not withdrawn and not ctx.stopping.is_set():
                # The job claimed it before it expired: give it the grace period to answer.
                ack = self._wait_for_ack(job_dir, command_id, hard_deadline, ctx)
        if ack is None:
            self._fail_without_ack(job_dir, paths, registration, command, withdrawn, woken, ctx)
        assert ack is not None
        return self._outcome(ack, registration, how, command, started, woken=woken)

    def _check_sendable(self, params: Mapping[str, Any], registration: Registration) -> None:
        problem = self.identity_problem(params, registration)
        if problem:
            raise ActionError(f"{problem}; nothing was sent")
        refused = self.refusal(params, registration)
        if refused:  # the step's params do not fit what the job declares: bad input, not a failure of the job
            raise CommandRefused(f"{refused}; nothing was sent")

    def _running_job(
        self, params: Mapping[str, Any], ctx: StepContext, job_dir: JobDir, registration: Registration
    ) -> Registration:
        """The registration of a running job: fail fast when it is not running, or wait `wait_for_job` for it."""
        dead = self.not_running(registration, self.liveness(registration, job_dir.registration_owner(), time.time()))
        if dead is None:
            return registration
        wait = params.get("wait_for_job")
        if not wait:
            raise ActionError(f"{dead}; nothing was sent (set wait_for_job on the step if a restart is expected)")
        until = time.monotonic() + min(parse_duration(wait).total_seconds(), ctx.remaining() - DEADLINE_MARGIN_S)
        while time.monotonic() < until and not ctx.stopping.wait(JOB_POLL_S):
            # A restarted job registers again in the same directory: read job.json afresh.
            with contextlib.suppress(FileNotFoundError, ProtocolError):
                registration = job_dir.read_registration()
                owner = job_dir.registration_owner()
                if self.not_running(registration, self.liveness(registration, owner, time.time())) is None:
                    return registration
        if ctx.stopping.is_set():
            raise ActionError(
                f"{dead}; remediate is stopping: no longer waiting for it (wait_for_job); nothing was sent"
            )
        raise ActionError(f"{dead}; it did not register again within wait_for_job {wait}; nothing was sent")

    @staticmethod
    def _wait_for_ack(job_dir: JobDir, command_id: str, until: float, ctx: StepContext) -> Ack | None:
        """The acknowledgement, or None at `until` or as soon as remediate is stopping."""
        while True:
            ack = _read_ack(job_dir, command_id)
            if ack is not None:
                return ack
            if time.monotonic() >= until or ctx.stopping.is_set():
                return None
            ctx.stopping.wait(min(ACK_POLL_S, max(0.0, until - time.monotonic())))

    def _fail_without_ack(
        self,
        job_dir: JobDir,
        paths: JobPaths,
        registration: Registration,
        command: Command,
        withdrawn: bool,
        woken: str,
        ctx: StepContext,
    ) -> None:
        # The job may have written a heartbeat meanwhile: read it again for the message.
        with contextlib.suppress(FileNotFoundError, ProtocolError):
            registration = job_dir.read_registration()
        live = self.liveness(registration, job_dir.registration_owner(), time.time())
        seen = (
            f"the job last polled {live['last_poll_age_s']:.1f} s ago at step {registration.last_step}"
            if live["last_poll_age_s"] is not None
            else "the job has not polled yet"
        )
        waited = command.expires_at - command.created_at
        stopping = ctx.stopping.is_set()
        if withdrawn and stopping:
            raise ActionError(
                f"remediate is stopping: command {command.id} to training job {registration.job!r} was withdrawn "
                f"from the inbox before the job took it ({seen}): it will never be applied"
            )
        if withdrawn:
            raise NoAcknowledgement(
                f"no acknowledgement from training job {registration.job!r} within {waited:.1f} s ({seen}; "
                f"wake-up: {woken}); command {command.id} expired at {_iso(command.expires_at)} and was withdrawn "
                "from the inbox: it will never be applied"
            )
        follow_up = {
            "job": registration.job,
            "command_id": command.id,
            "control_dir": str(paths.dir),
            "host": this_host(),
            "pid": registration.pid,
            "sent_at": _iso(command.created_at),
            "expires_at": _iso(command.expires_at),
            "gave_up_at": time.time(),
            "taken": job_dir.is_taken(command.id),
        }
        why = "remediate is stopping" if stopping else "it did not acknowledge it in time"
        raise OutcomePending(
            f"training job {registration.job!r} took command {command.id} before it expired "
            f"({_iso(command.expires_at)}) but {why} ({seen}); it may still be applying it: "
            "remediate looks for its late acknowledgement and records it on this step",
            follow_up,
        )

    def _outcome(
        self,
        ack: Ack,
        registration: Registration,
        how: str,
        command: Command | None,
        started: float,
        *,
        replayed: bool = False,
        woken: str = "not needed",
    ) -> dict[str, Any]:
        acked_pid = ack_pid(ack)
        if command is not None and acked_pid is not None and acked_pid != registration.pid:
            # Two processes used one job name: the one that answered is not the one the plan named.
            raise ActionError(
                f"training job {registration.job!r}: command {ack.id} was meant for pid {registration.pid} (the "
                f"registered job) but pid {acked_pid} on {ack.job.get('host') or '?'} acknowledged it "
                f"({ack.status} at step {ack.step_before}: {ack.detail}); two live processes use this job name"
            )
        if ack.status != APPLIED:
            # An interrupted command's ack has no step (the job stopped while applying it): name the job's own.
            at = (
                f"at step {ack.step_before}"
                if ack.step_before is not None
                else f"(step unknown; the job last reported step {registration.last_step})"
            )
            raise NotApplied(
                f"training job {registration.job!r} answered {ack.status} to {ack.kind or 'the'} "
                f"command {ack.id} {at}: {ack.detail}",
                ack.status,
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
            "applied_by_pid": acked_pid,
        }
        if command is not None and registration.host == this_host() and acked_pid == registration.pid:
            # The kernel's account of the process that answered (uid, cgroup, pod UID), not job.json's.
            same = pid_start_time(registration.pid) == registration.pid_start is not None
            result["process"] = _process_identity(registration.pid) if same else None
        if acked_pid is None:
            result["pid_check"] = (
                f"not checked: the acknowledgement names no pid (an older remediate.training); "
                f"the registered pid is {registration.pid}"
            )
        elif replayed and acked_pid != registration.pid:
            result["pid_check"] = f"acknowledged earlier by pid {acked_pid}; pid {registration.pid} is registered now"
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
    def _wake(registration: Registration, owner: int | None) -> str:
        """Send the job's registered wake-up signal when it is safe to; say what was done."""
        if registration.wake_signal is None:
            return "the job registered no wake-up signal"
        if registration.host != this_host():
            return f"the job runs on {registration.host}, not here"
        if not _same_process(registration, owner):
            return f"process {registration.pid} is not the registered job (gone, or a reused pid)"
        try:
            os.kill(registration.pid, getattr(signal, registration.wake_signal))
        except OSError as exc:
            return f"{registration.wake_signal} to {registration.pid} failed: {exc.strerror or exc}"
        return f"sent {registration.wake_signal} to {registration.pid}"


def ack_pid(ack: Ack) -> int | None:
    """The pid that wrote the acknowledgement: its top-level `pid` (newer libraries), else the one in
    `job` (who answered); None from a library that names none."""
    for value in (getattr(ack, "pid", None), ack.job.get("pid")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _ack_summary(ack: Ack, registration: Registration) -> dict[str, Any]:
    """What became of a step's command, for reconciliation: status, times (ISO and epoch), who applied it."""
    return {
        "status": ack.status,
        "command_id": ack.id,
        "kind": ack.kind,
        "detail": ack.detail,
        "step_before": ack.step_before,
        "step_after": ack.step_after,
        **ack.result,
        "claimed_at": _iso(ack.received_at),
        "applied_at": _iso(ack.acked_at),
        "at": ack.acked_at,
        "applied_by_pid": ack_pid(ack),
        "registered_pid": registration.pid,
    }


def _open_job_dir(paths: JobPaths, how: str) -> JobDir:
    try:
        return JobDir(paths)
    except ProtocolError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): {exc}") from None
    except OSError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): cannot open {paths.dir}: {exc.strerror}") from None


def _read_registration(job_dir: JobDir, paths: JobPaths, how: str) -> Registration:
    try:
        registration = job_dir.read_registration()
    except FileNotFoundError:
        raise ActionError(f"training job {paths.job!r} ({how}) is not registered under {paths.root}") from None
    except ProtocolError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): {exc}") from None
    if registration.job != paths.job:
        raise ActionError(f"{paths.registration} names job {registration.job!r}, not {paths.job!r}")
    return registration


def _same_process(registration: Registration, owner: int | None) -> bool:
    """Whether the registered pid is still the job: same start time, owned by whoever owns job.json."""
    started = pid_start_time(registration.pid)
    if started is None or registration.pid_start is None or started != registration.pid_start:
        return False
    return owner is not None and pid_uid(registration.pid) == owner


def _process_identity(pid: int) -> dict[str, Any]:
    """Who the registered process is, as the kernel says (read from /proc here, never from job.json): its uid,
    its cgroup and the pod UID in it. Only meaningful once `_same_process` said the pid is the job."""
    cgroup = process_cgroup(pid)
    return {"pid": pid, "uid": pid_uid(pid), "cgroup": cgroup, "pod_uid": pod_uid_of(cgroup)}


def _read_ack(job_dir: JobDir, command_id: str) -> Ack | None:
    try:
        return job_dir.read_ack(command_id)
    except ProtocolError as exc:
        raise ActionError(f"the job's acknowledgement of {command_id} is not valid: {exc}") from exc


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
            "before_alert_s": Param(
                float,
                default=0.0,
                check=_non_negative,
                doc="only checkpoints saved this many seconds before the alert's startsAt are candidates "
                "(Prometheus sets startsAt when the rule starts firing, after its `for`)",
            ),
        }
    )

    # A checkpoint saved during the spike must never be restored (issue 15, finding 2): the command carries
    # saved_before = the alert's startsAt (minus before_alert_s), which the job applies on top of its good mark.
    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plan = super().plan(_with_saved_before(params, ctx), ctx)
        if plan.get("checkpoint") is None and plan.get("checkpoint_reason"):
            # The plan contract (docs/playbooks.md): no checkpoint fits now, and the candidates are those
            # saved before the alert, so the job would refuse the rollback: the step cannot act.
            why = plan["checkpoint_reason"]
            plan["why_not"] = f"{plan['why_not']}; {why}" if plan.get("can_act") is False else why
            plan["can_act"] = False
        return plan

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return super().execute(_with_saved_before(params, ctx), ctx)

    def command_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        command = {
            "checkpoint": params["checkpoint"],
            "min_steps_back": params["min_steps_back"],
            "skip_batches": params["skip_batches"],
        }
        if params.get("saved_before") is not None:
            command["saved_before"] = params["saved_before"]
        return command

    def plan_extra(self, params: Mapping[str, Any], registration: Registration) -> dict[str, Any]:
        chosen, reason = select_checkpoint(
            registration.checkpoints,
            registration.last_step,
            params["checkpoint"],
            params["min_steps_back"],
            saved_before=params.get("saved_before"),
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


def _with_saved_before(params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    """`params` plus saved_before (epoch seconds) from the alert's startsAt; unchanged without a usable startsAt."""
    started = ctx.alert.starts_at
    if started is None or started <= 0:  # none, unreadable, or Go's zero time: no start known
        return dict(params)
    return {**params, "saved_before": round(started - float(params.get("before_alert_s", 0.0)), 6)}


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
