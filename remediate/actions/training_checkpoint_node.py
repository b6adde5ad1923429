"""`training.checkpoint_node`: ask every training job running on this node to save a checkpoint, and wait.

A drain evicts the node's pods: whatever a job computed since its last checkpoint is lost. So
the shipped ladders, before any drain, ask each job registered under this node's control root
(`training_control_root`, a setting) to checkpoint now and wait for its acknowledgement,
bounded by `timeout` per job and by the step's deadline. The alert names the node, not a job:
every job of the root is asked, one after the other; a node that runs no job has nothing to
lose, and the step says so and succeeds.

Only live jobs are asked (polled recently, process not known to be gone, control not closed):
a stale registration left by a crashed pod is listed as skipped. Each job gets the command
`training.checkpoint` would send it (same protocol, ack, pid check and expiry). With
`best_effort: true` a job that refuses or does not answer in time is listed in the result and
the step still succeeds, so the drain that follows is delayed by at most the timeout but never
blocked by a job that cannot checkpoint (a broken GPU may well stop it from doing so);
without it, such a job fails the step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.training import (
    COMMON_PARAMS,
    DEADLINE_MARGIN_S,
    TrainingCheckpointAction,
    _open_job_dir,
    _read_registration,
)
from remediate.errors import ActionError
from remediate.training.protocol import JobPaths, ProtocolError, job_name_problem


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
        """(the live jobs registered under the root, with how they were found; the skipped ones and why)."""
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
                with _open_job_dir(paths, how) as job_dir:
                    registration = _read_registration(job_dir, paths, how)
                    alive = self.liveness(registration, job_dir.registration_owner(), time.time())
            except (ActionError, ProtocolError) as exc:
                skipped.append({"job": name, "why": str(exc)})
                continue
            if self.not_running(registration, alive) is not None or not alive["alive"]:
                skipped.append({"job": name, "why": alive["why_not"] or "not running"})
                continue
            live.append((paths, how))
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
        for paths, how in live:
            if ctx.remaining() - DEADLINE_MARGIN_S <= 0:
                failed.append({"job": paths.job, "error": "no time left in the step: not asked"})
                continue
            try:
                with _open_job_dir(paths, how) as job_dir:
                    done.append(self._execute(params, ctx, paths, job_dir, how))
            except ActionError as exc:  # OutcomePending included: the job may still save it, but later
                failed.append({"job": paths.job, "error": str(exc)})
        result: dict[str, Any] = {"checkpointed": done, "failed": failed, "skipped": skipped}
        if not live:
            result["note"] = f"no running training job is registered under {self.root}: nothing to checkpoint"
        if failed and not params["best_effort"]:
            raise ActionError(
                f"{len(failed)} of {len(live)} training job(s) on this node did not checkpoint: "
                + "; ".join(f"{f['job']}: {f['error']}" for f in failed)
            )
        return result
