"""`slurm.requeue`: the batch jobs on a node remediate drained go back to the queue, to start again elsewhere.

`scontrol requeue <job id>` for each job holding the node that Slurm can requeue (a batch job that allows
it); a job that cannot be requeued (an srun or salloc allocation, a job submitted with --no-requeue) is named
in the result with the reason, and left running: remediate never kills a job.

Only on a node whose drain is remediate's: a requeued job must not start again on the same node (the drain
keeps it off), and a node a person drained is theirs to empty. Each step starts from a fresh `squeue
--json`: a requeued job is pending, no longer on the node, so a retry requeues only what is still there
(idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.schema import ParamSchema
from remediate.actions.slurm.common import SlurmAction, handed_note, node_schema
from remediate.slurm import SlurmError, SlurmJob, SlurmNode, SlurmUnavailable


class SlurmRequeueAction(SlurmAction):
    name: ClassVar[str] = "slurm.requeue"
    description: ClassVar[str] = (
        "Requeue the batch jobs on a node remediate drained; a job that cannot be requeued is named, never killed."
    )
    schema: ClassVar[ParamSchema] = node_schema()

    def _read(self, params: Mapping[str, Any], ctx: StepContext) -> tuple[SlurmNode, str | None]:
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        self.check_scope(ref, node)
        if node.drained_by_run is not None:
            return node, None
        if node.handed_to is not None:
            return node, f"{handed_note(node)}: its jobs are its owner's to requeue"
        if node.drained:
            return node, f"drained by someone else ({node.reason!r}): its jobs are theirs to requeue"
        return node, "not drained by remediate: a requeued job could start on it again (slurm.drain it first)"

    @staticmethod
    def _split(jobs: tuple[SlurmJob, ...]) -> tuple[list[SlurmJob], list[dict[str, Any]]]:
        requeue = [job for job in jobs if job.requeueable]
        kept = [{**job.summary(), "why": job.why_not_requeueable()} for job in jobs if not job.requeueable]
        return requeue, kept

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        node, why_not = self._read(params, ctx)
        seen: dict[str, Any] = {"node": node.name, "found": True, "current": node.summary()}
        if why_not is not None:
            return {**seen, "can_act": False, "why_not": why_not, "would": "nothing"}
        requeue, kept = self._split(self.client.jobs_on(node.name))
        ids = ", ".join(str(job.job_id) for job in requeue) or "none"
        return {**seen, "would": f"requeue jobs {ids}", "would_requeue": [j.summary() for j in requeue],
                "left_running": kept}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        node, why_not = self._read(params, ctx)
        if why_not is not None:
            return {"outcome": "left_alone", "node": node.name, "reason": why_not}
        requeue, kept = self._split(self.client.jobs_on(node.name))
        requeued = []
        for job in requeue:
            try:
                self.client.requeue(job.job_id)
            except SlurmUnavailable:
                raise  # retried: the jobs requeued so far are pending, the retry's read no longer finds them
            except SlurmError as exc:
                # Ended, or changed, between the read and the requeue: named with Slurm's words, not retried.
                kept.append({**job.summary(), "why": str(exc)})
                continue
            requeued.append({**job.summary(), "restarts_before": job.restarts})
        return {"outcome": "requeued", "node": node.name, "requeued": requeued, "left_running": kept}
