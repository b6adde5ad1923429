"""`slurm.requeue`: the batch jobs on a node remediate drained go back to the queue, to start again elsewhere,
or get the signal they ask for instead.

`scontrol requeue <job id>` for each job holding the node that Slurm can requeue (a batch job that allows
it); a job that cannot be requeued (an srun or salloc allocation, a job submitted with --no-requeue) is named
in the result with the reason, and left running: remediate never kills a job.

A job that checkpoints and requeues itself on a signal (PyTorch Lightning's auto-requeue, submitit) asks for
that signal in its comment (`remediate-signal=USR1`, remediate.slurm.signals); the step's `signal` param asks
it for every requeueable job that says nothing (remediate.actions.slurm.jobfate). Such a job gets `scancel
--signal=SIG --full` and no requeue from remediate: what it does next is its own.

Only on a node whose drain is remediate's: a requeued job must not start again on the same node (the drain
keeps it off), and a node a person drained is theirs to empty. Each step starts from a fresh `squeue
--json`: a requeued job is pending, no longer on the node, so a retry requeues only what is still there
(idempotent). A signalled job may still be there (checkpointing, or a job that only checkpoints): the
action memory `slurm.requeue/<node>` names the jobs this run signalled, so a retry of the run does not signal
them twice; a later run (another alert) signals them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.slurm.common import SlurmAction, handed_note, node_schema
from remediate.actions.slurm.jobfate import Fates, JobFate, split
from remediate.slurm import SlurmError, SlurmNode, SlurmUnavailable
from remediate.slurm.signals import COMMENT_KEY, JOB_SIGNALS

MEMORY_PREFIX = "slurm.requeue/"
"""ActionMemory keys `slurm.requeue/<node>`: `{run, signalled: [job ids]}`, the jobs a run signalled there."""

SIGNAL_PARAM = Param(
    str,
    static=True,
    choices=JOB_SIGNALS,
    doc=f"signal sent (scancel --signal=SIG --full) instead of a requeue to each requeueable job whose comment "
    f"does not say otherwise ({COMMENT_KEY}=SIG or {COMMENT_KEY}=none); only for jobs that handle it (a job "
    f"without a handler ends); default: none, jobs are requeued unless their comment asks for a signal",
)


class SlurmRequeueAction(SlurmAction):
    name: ClassVar[str] = "slurm.requeue"
    description: ClassVar[str] = (
        "Requeue the batch jobs on a node remediate drained, or signal those that ask for it; a job that cannot be "
        "requeued is named, never killed."
    )
    schema: ClassVar[ParamSchema] = node_schema(signal=SIGNAL_PARAM)

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

    def _fates(self, node: SlurmNode, params: Mapping[str, Any], ctx: StepContext) -> tuple[Fates, list[JobFate]]:
        """What happens to each job on the node, and the jobs to signal that this run signalled already."""
        fates = split(self.client.jobs_on(node.name), params.get("signal"))
        done = _signalled_by(ctx, node.name)
        already = [fate for fate in fates.signal if fate.job.job_id in done]
        fates.signal[:] = [fate for fate in fates.signal if fate.job.job_id not in done]
        return fates, already

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        node, why_not = self._read(params, ctx)
        seen: dict[str, Any] = {"node": node.name, "found": True, "current": node.summary()}
        if why_not is not None:
            return {**seen, "can_act": False, "why_not": why_not, "would": "nothing"}
        fates, already = self._fates(node, params, ctx)
        return {**seen, "would": fates.would(), "would_requeue": [f.entry() for f in fates.requeue],
                "would_signal": [f.entry() for f in fates.signal], "left_running": [f.entry() for f in fates.leave],
                "already_signalled": [f.entry() for f in already]}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        node, why_not = self._read(params, ctx)
        if why_not is not None:
            return {"outcome": "left_alone", "node": node.name, "reason": why_not}
        fates, already = self._fates(node, params, ctx)
        kept = [fate.entry() for fate in fates.leave]
        requeued, signalled = [], []
        # Signals first: a job that asked for one gets the most time to checkpoint before the node fails it.
        done = [fate.job.job_id for fate in already]
        for fate in fates.signal:
            assert fate.signal is not None
            try:
                self.client.signal(fate.job.job_id, fate.signal)
            except SlurmUnavailable:
                raise  # retried: the jobs signalled so far are in the action memory, not signalled again
            except SlurmError as exc:
                kept.append({**fate.job.summary(), "why": str(exc)})
                continue
            signalled.append(fate.entry())
            done.append(fate.job.job_id)
            ctx.memory.remember(
                MEMORY_PREFIX + node.name, {"run": ctx.run_id, "signalled": list(done)}, run_id=ctx.run_id
            )
        for fate in fates.requeue:
            try:
                self.client.requeue(fate.job.job_id)
            except SlurmUnavailable:
                raise  # retried: the jobs requeued so far are pending, the retry's read no longer finds them
            except SlurmError as exc:
                # Ended, or changed, between the read and the requeue: named with Slurm's words, not retried.
                kept.append({**fate.job.summary(), "why": str(exc)})
                continue
            requeued.append({**fate.entry(), "restarts_before": fate.job.restarts})
        return {"outcome": "requeued", "node": node.name, "requeued": requeued, "signalled": signalled,
                "already_signalled": [f.entry() for f in already], "left_running": kept}  # fmt: skip


def _signalled_by(ctx: StepContext, node: str) -> set[int]:
    """The jobs on `node` this same run signalled (an earlier try of this step), from the action memory."""
    memory = ctx.memory.recall(MEMORY_PREFIX + node) or {}
    if memory.get("run") != ctx.run_id:
        return set()
    return {job for job in memory.get("signalled") or () if isinstance(job, int)}
