"""Finding the training job a step is for, and judging it: registered, alive, the one the alert names.

Shared by every training action (`remediate.actions.training`, `training_command`,
`training_checkpoint_node`). Every file below the control root is reached through directory
descriptors opened with O_NOFOLLOW (`training.files.JobDir`): the agent may be root while the job
owns its directory.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remediate.errors import ActionError
from remediate.training.files import JobDir, JobPaths
from remediate.training.procfs import pid_start_time, pid_uid, pod_uid_of, process_cgroup, this_host
from remediate.training.protocol import ProtocolError, Registration, job_name_problem

ALIVE_MIN_S = 30.0
"""A job that polled within max(this, 5 heartbeats) counts as alive in a plan."""


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def find_job(
    root: Path, job_labels: Sequence[str], job: str | None, labels: Mapping[str, str]
) -> tuple[JobPaths, Registration, str]:
    """(paths, registration, how it was found): the job named by `job`, else the first of `job_labels` whose
    value names a job registered under `root`; ActionError when no registered job fits."""
    if job:
        return registered(root, job, "param job")
    tried = []
    for label in job_labels:
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
        return registered(root, value, f"label {label}")
    looked = ", ".join(tried) if tried else "none of them is set"
    raise ActionError(
        f"no registered training job found under {root} from the labels {', '.join(job_labels)}: {looked}"
    )


def registered(root: Path, name: str, how: str) -> tuple[JobPaths, Registration, str]:
    paths = JobPaths(root, name)
    with open_job_dir(paths, how) as job_dir:
        registration = read_registration(job_dir, paths, how)
    return paths, registration, how


def liveness(registration: Registration, owner: int | None, now: float) -> dict[str, Any]:
    """`owner`: the uid owning job.json (read through the job's directory fd), None when unknown."""
    age = None if registration.last_poll_at is None else round(now - registration.last_poll_at, 3)
    window = max(ALIVE_MIN_S, 5 * registration.heartbeat_s)
    same_host = registration.host == this_host()
    process = None
    if same_host:
        process = same_process(registration, owner)
    reasons = []
    if registration.closed_at is not None:
        reasons.append(f"the job closed its control at {iso(registration.closed_at)}")
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
        "last_poll_at": iso(registration.last_poll_at),
        "last_poll_age_s": age,
        "process_running": process,
        "process": process_identity(registration.pid) if process else None,
    }


def not_running(registration: Registration, live: Mapping[str, Any]) -> str | None:
    """Why the job certainly cannot take a command now (closed, or its process is gone), else None.

    A job that merely has not polled for a while may be in a long evaluation: it still gets the
    command (and the wake-up signal).
    """
    if registration.closed_at is not None:
        return (
            f"training job {registration.job!r} closed its control at {iso(registration.closed_at)} "
            f"(at step {registration.last_step}): it is not running"
        )
    if live["process_running"] is False:
        return f"training job {registration.job!r} is not running: {live['why_not']}"
    return None


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
    return f"training job {registration.job!r} (pid {registration.pid}) is not the job the alert names: " + "; ".join(
        problems
    )


def wake(registration: Registration, owner: int | None) -> str:
    """Send the job's registered wake-up signal when it is safe to; say what was done."""
    if registration.wake_signal is None:
        return "the job registered no wake-up signal"
    if registration.host != this_host():
        return f"the job runs on {registration.host}, not here"
    if not same_process(registration, owner):
        return f"process {registration.pid} is not the registered job (gone, or a reused pid)"
    try:
        os.kill(registration.pid, getattr(signal, registration.wake_signal))
    except OSError as exc:
        return f"{registration.wake_signal} to {registration.pid} failed: {exc.strerror or exc}"
    return f"sent {registration.wake_signal} to {registration.pid}"


def open_job_dir(paths: JobPaths, how: str) -> JobDir:
    try:
        return JobDir(paths)
    except ProtocolError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): {exc}") from None
    except OSError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): cannot open {paths.dir}: {exc.strerror}") from None


def read_registration(job_dir: JobDir, paths: JobPaths, how: str) -> Registration:
    try:
        registration = job_dir.read_registration()
    except FileNotFoundError:
        raise ActionError(f"training job {paths.job!r} ({how}) is not registered under {paths.root}") from None
    except ProtocolError as exc:
        raise ActionError(f"training job {paths.job!r} ({how}): {exc}") from None
    if registration.job != paths.job:
        raise ActionError(f"{paths.registration} names job {registration.job!r}, not {paths.job!r}")
    return registration


def same_process(registration: Registration, owner: int | None) -> bool:
    """Whether the registered pid is still the job: same start time, owned by whoever owns job.json."""
    started = pid_start_time(registration.pid)
    if started is None or registration.pid_start is None or started != registration.pid_start:
        return False
    return owner is not None and pid_uid(registration.pid) == owner


def process_identity(pid: int) -> dict[str, Any]:
    """Who the registered process is, as the kernel says (read from /proc here, never from job.json): its uid,
    its cgroup and the pod UID in it. Only meaningful once `same_process` said the pid is the job."""
    cgroup = process_cgroup(pid)
    return {"pid": pid, "uid": pid_uid(pid), "cgroup": cgroup, "pod_uid": pod_uid_of(cgroup)}
