"""`slurm.drain` and `slurm.resume`: a node out of service with a reason that names the run, and back.

Drain is `scontrol update NodeName=<node> State=DRAIN Reason=<reason>`: running jobs finish, no new job
starts there. The reason (remediate.slurm.reason) starts with remediate's mark, `remediate run <id>`, and is
the only record of the drain on the node; its run and alert are also remembered (ActionMemory,
`slurm.drain/<node>`), which is what lets resume tell this alert's drain from another's.

Neither action writes over a person's work: a node already out of service with a reason that is not
remediate's is reported (`left_alone`, naming the reason and who set it) and never drained again, nor
resumed. A node slurm.handoff handed to a breakfix system is left to its owner the same way, naming it.
Each decides from a fresh read, so a retry after a lost answer (a time-out, slurmctld restarting) finds its
own drain and finishes: both are idempotent. Slurm has no conditional write: between the read and
the update a person may drain the node by hand, and remediate's reason then replaces theirs; the window is
one command long.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.slurm.common import (
    GPU_LABELS,
    MEMORY_PREFIX,
    SCOPE_PARAM,
    SlurmAction,
    handed_note,
    node_schema,
)
from remediate.slurm import SlurmError, SlurmNode, drain_reason

NOTE_PARAM = Param(
    str,
    default="",
    doc="a few words added to the drain reason, e.g. `xid {{ labels.xid }}` (characters outside letters, digits "
    "and ` ._:,()/#@+%-` become `_`; the reason is cut to Slurm's 255)",
)


def _someone_elses(node: SlurmNode) -> str:
    by = f" by {node.reason_set_by}" if node.reason_set_by else ""
    state = "drained" if node.drained else f"out of service ({node.state})"
    return f"{state}{by} with reason {node.reason!r}: left as it is, and remediate will not resume it"


class SlurmDrainAction(SlurmAction):
    name: ClassVar[str] = "slurm.drain"
    description: ClassVar[str] = (
        "Drain a Slurm node (running jobs finish, none start) with a reason naming the run; never a node drained "
        "by someone else (circuit breaker)."
    )
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = node_schema(note=NOTE_PARAM)

    def reason(self, params: Mapping[str, Any], ctx: StepContext) -> str:
        gpu = next((ctx.alert.labels[label] for label in GPU_LABELS if ctx.alert.labels.get(label)), "")
        alertname = ctx.alert.alertname or ctx.alert.labels.get("alertname") or ctx.playbook
        return drain_reason(ctx.run_id, alertname=alertname, gpu=gpu, note=params.get("note", ""))

    def _settled(self, node: SlurmNode, ctx: StepContext) -> dict[str, Any] | None:
        """The result when the node needs no drain from this run; None when it does."""
        if node.drained_by_run == ctx.run_id:
            # An earlier attempt of this run drained it (its answer was lost): done, not done again.
            return {"outcome": "drained", "node": node.name, "reason": node.reason, "earlier": "drained already"}
        if node.drained_by_run is not None:
            return {
                "outcome": "already_drained_by_remediate",
                "node": node.name,
                "drained_by_run": node.drained_by_run,
                "reason": f"run {node.drained_by_run} drained it already ({node.reason!r}); nothing to do",
            }
        if (handed := node.handed_to) is not None:  # slurm.handoff: its owner's now, drained all the same
            return {
                "outcome": "left_alone",
                "node": node.name,
                "owner": handed.owner,
                "handed_by_run": handed.run,
                "slurm_reason": node.reason,
                "reason": f"{handed_note(node)}: left as it is",
            }
        if node.out_of_service and node.reason:
            return {
                "outcome": "left_alone",
                "node": node.name,
                "set_by": node.reason_set_by,
                "slurm_reason": node.reason,
                "reason": _someone_elses(node),
            }
        return None

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        self.check_scope(ref, node)
        seen: dict[str, Any] = {"node": node.name, "from": ref.source, "found": True, "current": node.summary()}
        settled = self._settled(node, ctx)
        if settled is None:
            reason = self.reason(params, ctx)
            return {**seen, "would": f"drain the node with reason {reason!r}", "reason": reason,
                    "breaker": self.preview(node, ctx)}  # fmt: skip
        if settled["outcome"] == "left_alone":
            return {**seen, "can_act": False, "why_not": settled["reason"], "would": "nothing"}
        return {**seen, "would": f"nothing: {settled.get('earlier') or settled['reason']}"}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        self.check_scope(ref, node)
        settled = self._settled(node, ctx)
        if settled is not None:
            return settled
        breaker = self.acquire(node, ctx)
        reason = self.reason(params, ctx)
        # Remembered before the write: a crash in between leaves a record resume checks against the reason
        # (which is not remediate's then), never a drain resume could not prove.
        ctx.memory.remember(
            MEMORY_PREFIX + node.name,
            {"run": ctx.run_id, "alert": ctx.alert.fingerprint, "reason": reason},
            run_id=ctx.run_id,
        )
        self.client.drain(node.name, reason)
        return {"outcome": "drained", "node": node.name, "reason": reason, "was": node.summary(), "breaker": breaker}


class SlurmResumeAction(SlurmAction):
    name: ClassVar[str] = "slurm.resume"
    description: ClassVar[str] = (
        "Resume a Slurm node, only if it is drained and its reason is still remediate's. Never refused."
    )
    schema: ClassVar[ParamSchema] = node_schema(scope=SCOPE_PARAM)

    def _decide(self, node: SlurmNode, params: Mapping[str, Any], ctx: StepContext) -> tuple[bool, str]:
        if not node.drained:
            return False, "not drained: nothing to undo"
        if node.handed_to is not None:
            return False, f"left alone: {handed_note(node)}"
        run = node.drained_by_run
        if run is None:
            return False, f"left alone: {_someone_elses(node)}"
        if params["scope"] == "alert":
            drained = ctx.memory.recall(MEMORY_PREFIX + node.name) or {}
            if drained.get("run") != run:
                return False, (
                    f"left alone: run {run} of remediate drained it, but no record here says for which alert; "
                    "this alert's resolution cannot prove it its own (scope: any would resume it)"
                )
            if drained.get("alert") != ctx.alert.fingerprint:
                return False, (
                    f"left alone: run {run} drained it for another alert ({drained.get('alert') or 'none'}); "
                    "that alert's resolution resumes it (scope: any would now)"
                )
        return True, f"resume: run {run} of remediate drained it ({node.reason!r})"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        _, why = self._decide(node, params, ctx)
        return {"node": node.name, "from": ref.source, "found": True, "current": node.summary(), "would": why}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        undo, why = self._decide(node, params, ctx)
        if not undo:
            # A node no longer drained by remediate (a person resumed it) stops counting as held; one handed to
            # another system still does (its drain is remediate's doing) until its owner resumes it.
            released = self.release(node.name, ctx) if node.held_by_run is None else False
            return {"outcome": "left_alone", "node": node.name, "reason": why, "breaker_released": released}
        try:
            self.client.resume(node.name)
        except SlurmError:
            # 22.05 answers "Invalid node state specified" to a RESUME of a node whose state is UNKNOWN (just
            # after a slurmctld restart, before its slurmd answered a ping), and clears DRAIN all the same.
            after = self.read(ref)
            if after.drained:
                raise
        ctx.memory.forget(MEMORY_PREFIX + node.name)
        return {
            "outcome": "resumed",
            "node": node.name,
            "drained_by_run": node.drained_by_run,
            "was": node.summary(),
            "breaker_released": self.release(node.name, ctx),
        }
