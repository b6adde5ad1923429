"""`training.checkpoint_node`: ask every training job running on this node to save a checkpoint, and wait.

A drain evicts the node's pods: whatever a job computed since its last checkpoint is lost. So
the shipped ladders, before any drain, ask each job registered under this node's control root
(`training_control_root`, a setting) to checkpoint now and wait for its acknowledgement,
bounded by `timeout` per job and by the step's deadline. The alert names the node, not a job:
every job of the root is asked, one after the other; a node that runs no job has nothing to
lose, and the step says so and succeeds.

A job is asked unless it certainly cannot answer: it closed its control, its process is known to be
gone (same host, pid not running or reused), or its registration is abandoned (no poll for an hour
and its process cannot be seen from here). Silence alone never skips a job whose process runs: a
hung job (alive, not polling) is asked like any other, and without an acknowledgement within
`timeout` it is `timed_out`. Each job gets the command `training.checkpoint` would send it (same
protocol, ack, pid check and expiry). Without `best_effort` a job that is `timed_out`, refuses or
fails fails the step; with `best_effort: true` it is listed and the step still succeeds, so the drain
that follows is delayed by at most the timeout but never blocked by a job that cannot checkpoint (a
broken GPU may well stop it from doing so).

The result lists every job's outcome (`outcomes`: job -> checkpointed | timed_out | rejected |
failed | not_asked | skipped), with the details under `checkpointed`, `failed` and `skipped` — also
when the step fails (a `PartialFailure` carries it into the history): the jobs that did checkpoint
are never lost from the record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.training import COMMON_PARAMS, TrainingCheckpointAction
from remediate.actions.training_delivery import DEADLINE_MARGIN_S, NoAcknowledgement, NotApplied
from remediate.actions.training_job import liveness, not_running, open_job_dir, read_registration
from remediate.errors import ActionError, OutcomePending, PartialFailure
from remediate.training.files import JobPaths
from remediate.training.protocol import REJECTED, ProtocolError, Registration, job_name_problem

ABANDONED_AFTER_S = 3600.0
"""A registration whose process cannot be seen from here (another PID namespace or host) and that has not
polled for this long is abandoned (a crashed pod's), not asked. A job whose process is seen running is
always asked, however long it has been silent."""


class TrainingCheckpointNodeAction(TrainingCheckpointAction):
    name: ClassVar[str] = "training.checkpoint_node"
    description: ClassVar[str] = (
        "Ask every training job running on this node to save a checkpoint now (before a drain), and wait."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "timeout": COMMON_PARAMS["timeout"],
            "wake": COMMON_PARAMS["wake"],
            "best_effort": Param(
                bool,
                default=False,
                static=True,
                doc="a job that refuses or does not acknowledge in time is listed in the result and the step "
                "still succeeds (the drain after it goes on); default: it fails the step",
            ),
        }
    )

    def running_jobs(self) -> tuple[list[tuple[JobPaths, str]], list[dict[str, Any]]]:
        """(the jobs registered under the root that are asked, with how they were found; the skipped ones and why)."""
        root = self.root
        live: list[tuple[JobPaths, str]] = []
        skipped: list[dict[str, Any]] = []
        try:
            names = sorted(entry.name for entry in root.iterdir() if entry.is_dir() and not entry.is_symlink())
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise ActionError(f"cannot list the training control root {root}: {exc.strerror or exc}") from exc
        for name in names:
            if job_name_problem(name) is not None:
                continue
            paths = JobPaths(root, name)
            if not paths.registration.exists():
                continue
            how = f"registered under {root}"
            try:
                with open_job_dir(paths, how) as job_dir:
                    registration = read_registration(job_dir, paths, how)
                    alive = liveness(registration, job_dir.registration_owner(), time.time())
            except (ActionError, ProtocolError) as exc:
                skipped.append({"job": name, "why": str(exc)})
                continue
            why = not_running(registration, alive) or _abandoned(registration, alive)
            if why is not None:
                skipped.append({"job": name, "why": why})
                continue
            live.append((paths, how))  # alive, or silent but not known to be gone: it is asked
        return live, skipped

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        live, skipped = self.running_jobs()
        plan: dict[str, Any] = {
            "control_root": str(self.root),
            "would_checkpoint": [paths.job for paths, _ in live],
            "skipped": skipped,
            "would_wait_s": float(params["timeout"]) * len(live),
            "can_act": True,
        }
        if not live:
            plan["note"] = "no running training job is registered on this node: nothing to checkpoint"
        return plan

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        live, skipped = self.running_jobs()
        done: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        outcomes: dict[str, str] = {s["job"]: "skipped" for s in skipped}
        for paths, how in live:
            if ctx.remaining() - DEADLINE_MARGIN_S <= 0:
                failed.append(
                    {"job": paths.job, "outcome": "not_asked", "error": "no time left in the step: not asked"}
                )
                outcomes[paths.job] = "not_asked"
                continue
            try:
                with open_job_dir(paths, how) as job_dir:
                    done.append(self._execute(params, ctx, paths, job_dir, how))
                outcomes[paths.job] = "checkpointed"
            except ActionError as exc:  # OutcomePending included: the job may still save it, but later
                outcome = _outcome_of(exc)
                failed.append({"job": paths.job, "outcome": outcome, "error": str(exc)})
                outcomes[paths.job] = outcome
        result: dict[str, Any] = {
            "outcomes": dict(sorted(outcomes.items())),
            "checkpointed": done,
            "failed": failed,
            "skipped": skipped,
        }
        if not live:
            result["note"] = f"no running training job is registered under {self.root}: nothing to checkpoint"
        if failed and not params["best_effort"]:
            raise PartialFailure(
                f"{len(failed)} of {len(live)} training job(s) on this node did not checkpoint "
                f"({len(done)} did): " + "; ".join(f"{f['job']} {f['outcome']}: {f['error']}" for f in failed),
                result,
            )
        return result


def _abandoned(registration: Registration, alive: Mapping[str, Any]) -> str | None:
    """Why a registration is abandoned (not asked), else None: silent for an hour, its process not visible here."""
    age = alive.get("last_poll_age_s")
    if alive.get("process_running") is not None or age is None or age <= ABANDONED_AFTER_S:
        return None
    return (
        f"abandoned: last poll {age:.0f} s ago (more than {ABANDONED_AFTER_S:.0f} s) and process "
        f"{registration.pid} on {registration.host} cannot be seen from here"
    )


def _outcome_of(exc: ActionError) -> str:
    if isinstance(exc, NoAcknowledgement | OutcomePending):
        return "timed_out"
    if isinstance(exc, NotApplied) and exc.status == REJECTED:
        return REJECTED  # the job's own acknowledgement (training.protocol), not a run status
    return "failed"
