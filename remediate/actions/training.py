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

Finding and judging the job: `training_job`; delivering and waiting: `training_delivery`. Every file
below the root is reached through directory descriptors opened with O_NOFOLLOW (`files.JobDir`):
the agent may be root while the job owns its directory.

The dry-run plan reads job.json: the job found (and by which label), whether it is alive
(last poll, process), whether the step can act at all (`can_act`, `why_not`), and for a
rollback the checkpoint it would restore according to the job's published checkpoint index.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.schema import Param, ParamSchema, duration_within
from remediate.actions.training_delivery import (
    DEADLINE_MARGIN_S,
    ack_summary,
    fail_without_ack,
    outcome,
    read_ack,
    running_job,
    wait_for_ack,
)
from remediate.actions.training_job import (
    find_job,
    identity_problem,
    liveness,
    not_running,
    open_job_dir,
    read_registration,
    wake,
)
from remediate.errors import ActionError, ParamsError
from remediate.training.files import JobDir, JobPaths
from remediate.training.procfs import this_host
from remediate.training.protocol import (
    CHECKPOINT,
    CHECKPOINT_CHOICES,
    LATEST_GOOD,
    ROLLBACK,
    SCALE_LR,
    Command,
    Registration,
    job_name_problem,
    select_checkpoint,
)

RootProvider = Callable[[], Path]
DEFAULT_TIMEOUT_S = 60.0


class CommandRefused(ParamsError, ActionError):
    """The step's command or params do not fit what the job declares; nothing was sent (a 400-class refusal:
    the agent answers 422 invalid_params)."""


def _non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else "must be a finite number >= 0"


def _factor(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be greater than 0 and at most 1 (remediate only lowers the lr)"


def _timeout(value: float) -> str | None:
    return None if 0 < value <= 3600 else "must be between 0 and 3600 seconds"


COMMON_PARAMS: dict[str, Param] = {
    "job": Param(
        str,
        check=job_name_problem,
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


class _TrainingAction(Action):
    """Deliver one command to a training job and wait for its acknowledgement."""

    where: ClassVar[Where] = Where.NODE
    idempotent: ClassVar[bool] = True  # the command id is fixed per run step: a re-run cannot apply it twice
    # A command to a job, not to the node: a rollback must not wait for the cluster API.
    runs_if_owner_unknown: ClassVar[bool] = True
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
        return find_job(self.root, self.job_labels, params.get("job"), ctx.alert.labels)

    # ------------------------------------------------------------------ plan

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, _, how = self.find_job(params, ctx)
        now = time.time()
        with open_job_dir(paths, how) as job_dir:
            registration = read_registration(job_dir, paths, how)
            live = liveness(registration, job_dir.registration_owner(), now)
            own_ack = read_ack(job_dir, self.command_id(ctx))
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
        identity = identity_problem(params, registration)
        if identity:
            cannot.append(identity)
        dead = not_running(registration, live)
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
            plan["outcome"] = ack_summary(own_ack, registration)
        plan.update(self.plan_extra(params, registration))
        return plan

    # ------------------------------------------------------------------ execute

    def command_id(self, ctx: StepContext) -> str:
        occurrence = f"{ctx.alert.fingerprint}|{ctx.alert.starts_at_text}|{ctx.playbook}"
        digest = hashlib.sha256(f"{occurrence}|{ctx.run_id}|{ctx.step_index}".encode()).hexdigest()[:16]
        return f"r{ctx.run_id}-s{ctx.step_index}-{digest}"

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        paths, _, how = self.find_job(params, ctx)
        with open_job_dir(paths, how) as job_dir:
            return self._execute(params, ctx, paths, job_dir, how)

    def _execute(
        self, params: Mapping[str, Any], ctx: StepContext, paths: JobPaths, job_dir: JobDir, how: str
    ) -> dict[str, Any]:
        registration = read_registration(job_dir, paths, how)
        command_id = self.command_id(ctx)
        started = time.monotonic()
        previous = read_ack(job_dir, command_id)
        if previous is not None:  # this step ran before (crash, retry): the job already answered
            return outcome(previous, registration, how, None, started, replayed=True)
        self._check_sendable(params, registration)
        fresh = running_job(params, ctx, job_dir, registration)
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
        woken = wake(registration, job_dir.registration_owner()) if params["wake"] else "not asked"
        hard_deadline = started + budget
        ack = wait_for_ack(job_dir, command_id, min(hard_deadline, started + (command.expires_at - now)), ctx)
        withdrawn = False
        if ack is None:
            withdrawn = job_dir.withdraw(command_id)
            if not withdrawn and not ctx.stopping.is_set():
                # The job claimed it before it expired: give it the grace period to answer.
                ack = wait_for_ack(job_dir, command_id, hard_deadline, ctx)
        if ack is None:
            fail_without_ack(job_dir, paths, registration, command, withdrawn, woken, ctx)
        assert ack is not None
        return outcome(ack, registration, how, command, started, woken=woken)

    def _check_sendable(self, params: Mapping[str, Any], registration: Registration) -> None:
        problem = identity_problem(params, registration)
        if problem:
            raise ActionError(f"{problem}; nothing was sent")
        refused = self.refusal(params, registration)
        if refused:  # the step's params do not fit what the job declares: bad input, not a failure of the job
            raise CommandRefused(f"{refused}; nothing was sent")


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

    # A checkpoint saved during the spike must never be restored (it may hold the spike's weights): the command carries
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
