"""What slurm.requeue does to each job holding the node: requeue it, signal it, or leave it running. Pure.

The job's own word comes first: a comment token `remediate-signal=SIG` (remediate.slurm.signals) gets the
job that signal, even a job Slurm cannot requeue (an srun allocation that handles it decides what to do);
`remediate-signal=none` gets it requeued. Without a token, the step's `signal` param, when set, goes to the
jobs Slurm could requeue, and only to them: a job that cannot be requeued and asked nothing keeps running as
before, rather than meet a signal whose default action (USR1, USR2, TERM, ...) ends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remediate.slurm import SlurmJob
from remediate.slurm.signals import COMMENT_KEY, comment_signal


class How(StrEnum):
    REQUEUE = "requeue"
    SIGNAL = "signal"
    LEAVE = "leave"


ASKED_BY_JOB = "the job's comment"
ASKED_BY_STEP = "the step's signal param"


@dataclass(frozen=True)
class JobFate:
    job: SlurmJob
    how: How
    signal: str | None = None
    asked_by: str | None = None
    """Who asked for the signal: ASKED_BY_JOB or ASKED_BY_STEP."""
    why: str | None = None
    """Why a job left running is not requeued (Slurm's reason, or its words when the requeue failed)."""
    note: str | None = None
    """A `remediate-signal=` token of the job's comment that is not honoured, and why."""

    def entry(self) -> dict[str, Any]:
        """The job as the plan and the result name it."""
        out: dict[str, Any] = self.job.summary()
        if self.how is How.SIGNAL:
            out |= {"signal": self.signal, "asked_by": self.asked_by}
        if self.how is How.LEAVE:
            out["why"] = self.why
        if self.note is not None:
            out["note"] = self.note
        return out


def decide(job: SlurmJob, step_signal: str | None) -> JobFate:
    ask = comment_signal(job.comment)
    note = ask.problem if ask is not None else None
    if job.state != "RUNNING" and (step_signal is not None or (ask is not None and ask.signal is not None)):
        # Suspended, completing, configuring: a signal would not reach it (the client signals running jobs
        # only), so it is handled as a job that asked nothing.
        return _unasked(job, f"{job.state}, not running: a signal reaches only a running job")
    if ask is not None and ask.signal is not None:
        return JobFate(job, How.SIGNAL, signal=ask.signal, asked_by=ASKED_BY_JOB)
    opted_out = ask is not None and ask.problem is None  # remediate-signal=none
    if job.requeueable:
        if step_signal is not None and not opted_out:
            return JobFate(job, How.SIGNAL, signal=step_signal, asked_by=ASKED_BY_STEP, note=note)
        return JobFate(job, How.REQUEUE, note=note)
    why = job.why_not_requeueable()
    if step_signal is not None and not opted_out:
        why = (
            f"{why}; the step's signal goes only to a job Slurm could requeue, or to one whose comment asks for it "
            f"({COMMENT_KEY}=...)"
        )
    return JobFate(job, How.LEAVE, why=why, note=note)


def _unasked(job: SlurmJob, note: str) -> JobFate:
    if job.requeueable:
        return JobFate(job, How.REQUEUE, note=note)
    return JobFate(job, How.LEAVE, why=job.why_not_requeueable(), note=note)


@dataclass(frozen=True)
class Fates:
    requeue: list[JobFate] = field(default_factory=list)
    signal: list[JobFate] = field(default_factory=list)
    leave: list[JobFate] = field(default_factory=list)

    def would(self) -> str:
        """The plan's one line: `requeue jobs 7, 8; signal job 9 (USR1)`."""
        ids = ", ".join(str(fate.job.job_id) for fate in self.requeue) or "none"
        parts = [f"requeue jobs {ids}"]
        parts += [f"signal job {fate.job.job_id} ({fate.signal})" for fate in self.signal]
        return "; ".join(parts)


def split(jobs: Iterable[SlurmJob], step_signal: str | None) -> Fates:
    fates = Fates()
    for job in jobs:
        fate = decide(job, step_signal)
        {How.REQUEUE: fates.requeue, How.SIGNAL: fates.signal, How.LEAVE: fates.leave}[fate.how].append(fate)
    return fates
