"""Delivering one command to a training job and waiting for its answer: steps 3 and 4 of every training
action (`remediate.actions.training`), the wait for a job to come back (wait_for_job) and the step's result.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from remediate.actions.base import StepContext
from remediate.actions.training_job import iso, liveness, not_running, process_identity
from remediate.config.durations import parse_duration
from remediate.errors import ActionError, OutcomePending
from remediate.training.files import JobDir, JobPaths
from remediate.training.procfs import pid_start_time, this_host
from remediate.training.protocol import APPLIED, Ack, Command, ProtocolError, Registration

ACK_POLL_S = 0.02
DEADLINE_MARGIN_S = 0.5
"""Seconds kept free before the step's own deadline, to withdraw the command and report."""
JOB_POLL_S = 0.1
"""How often a step waiting for a job to come back (wait_for_job) reads its job.json."""


class NoAcknowledgement(ActionError):
    """The job did not acknowledge the command in time; it was withdrawn unapplied."""


class NotApplied(ActionError):
    """The job answered, with a status other than applied (`status`: rejected, expired or failed)."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


def running_job(
    params: Mapping[str, Any], ctx: StepContext, job_dir: JobDir, registration: Registration
) -> Registration:
    """The registration of a running job: fail fast when it is not running, or wait `wait_for_job` for it."""
    dead = not_running(registration, liveness(registration, job_dir.registration_owner(), time.time()))
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
            if not_running(registration, liveness(registration, owner, time.time())) is None:
                return registration
    if ctx.stopping.is_set():
        raise ActionError(f"{dead}; remediate is stopping: no longer waiting for it (wait_for_job); nothing was sent")
    raise ActionError(f"{dead}; it did not register again within wait_for_job {wait}; nothing was sent")


def wait_for_ack(job_dir: JobDir, command_id: str, until: float, ctx: StepContext) -> Ack | None:
    """The acknowledgement, or None at `until` or as soon as remediate is stopping."""
    while True:
        ack = read_ack(job_dir, command_id)
        if ack is not None:
            return ack
        if time.monotonic() >= until or ctx.stopping.is_set():
            return None
        ctx.stopping.wait(min(ACK_POLL_S, max(0.0, until - time.monotonic())))


def fail_without_ack(
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
    live = liveness(registration, job_dir.registration_owner(), time.time())
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
            f"wake-up: {woken}); command {command.id} expired at {iso(command.expires_at)} and was withdrawn "
            "from the inbox: it will never be applied"
        )
    follow_up = {
        "job": registration.job,
        "command_id": command.id,
        "control_dir": str(paths.dir),
        "host": this_host(),
        "pid": registration.pid,
        "sent_at": iso(command.created_at),
        "expires_at": iso(command.expires_at),
        "gave_up_at": time.time(),
        "taken": job_dir.is_taken(command.id),
    }
    why = "remediate is stopping" if stopping else "it did not acknowledge it in time"
    raise OutcomePending(
        f"training job {registration.job!r} took command {command.id} before it expired "
        f"({iso(command.expires_at)}) but {why} ({seen}); it may still be applying it: "
        "remediate looks for its late acknowledgement and records it on this step",
        follow_up,
    )


def outcome(
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
        **_ack_facts(ack),
        "acknowledged_at": iso(ack.acked_at),
        "acknowledged_by": ack.job,
    }
    if command is not None and registration.host == this_host() and acked_pid == registration.pid:
        # The kernel's account of the process that answered (uid, cgroup, pod UID), not job.json's.
        same = pid_start_time(registration.pid) == registration.pid_start is not None
        result["process"] = process_identity(registration.pid) if same else None
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


def ack_pid(ack: Ack) -> int | None:
    """The pid that wrote the acknowledgement: its top-level `pid` (newer libraries), else the one in
    `job` (who answered); None from a library that names none."""
    for value in (getattr(ack, "pid", None), ack.job.get("pid")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def ack_summary(ack: Ack, registration: Registration) -> dict[str, Any]:
    """What became of a step's command, for reconciliation: status, times (ISO and epoch), who applied it."""
    times = {"claimed_at": iso(ack.received_at), "applied_at": iso(ack.acked_at), "at": ack.acked_at}
    return {**_ack_facts(ack), **times, "registered_pid": registration.pid}


def _ack_facts(ack: Ack) -> dict[str, Any]:
    """The acknowledgement's own facts, as a step's result and a late outcome both show them."""
    said = {name: getattr(ack, name) for name in ("kind", "status", "detail", "step_before", "step_after")}
    return {"command_id": ack.id, **said, **ack.result, "applied_by_pid": ack_pid(ack)}


def read_ack(job_dir: JobDir, command_id: str) -> Ack | None:
    try:
        return job_dir.read_ack(command_id)
    except ProtocolError as exc:
        raise ActionError(f"the job's acknowledgement of {command_id} is not valid: {exc}") from exc
