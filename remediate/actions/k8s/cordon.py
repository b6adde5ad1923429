"""`k8s.cordon` and `k8s.uncordon`: a node unschedulable, annotated with the run that did it, and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.k8s.common import NOTE_PARAM, SCOPE_PARAM, KubeAction, NodeEvent, iso_now, node_schema
from remediate.actions.k8s.patching import Decision, patch_until_stable
from remediate.actions.schema import ParamSchema
from remediate.kube import CORDONED_AT, CORDONED_BY_RUN, CORDONED_FOR_ALERT, NodeInfo, NodeRef


def cordon(action: KubeAction, ref: NodeRef, ctx: StepContext, *, kind: str, note: str) -> dict[str, Any]:
    """Cordon the node for this run (k8s.cordon, and k8s.drain first); the breaker is claimed before the write."""
    event = NodeEvent("cordon", "RemediateCordoned", "Warning", f"cordoned by remediate. {note}".strip(), "cordon")
    breaker: dict[str, Any] | None = None

    def cordoned(node: NodeInfo, recorded: dict[str, Any] | None) -> dict[str, Any]:
        return {"outcome": "cordoned", "node": node.name, "event": recorded, "breaker": breaker}

    def decide(node: NodeInfo) -> Decision:
        nonlocal breaker
        if node.unschedulable:
            if node.cordoned_by_run == ctx.run_id:
                # An earlier attempt of this run cordoned it (its answer was lost): finish, do not redo.
                return Decision(cordoned, event=event)
            if node.cordoned_by_run is not None:
                return _nothing(
                    {
                        "outcome": "already_cordoned_by_remediate",
                        "node": node.name,
                        "cordoned_by_run": node.cordoned_by_run,
                        "reason": f"run {node.cordoned_by_run} cordoned it already; nothing to do",
                    }
                )
            return _nothing(
                {
                    "outcome": "left_alone",
                    "node": node.name,
                    "reason": "already cordoned by someone else (no remediate.io/cordoned-by-run annotation): "
                    "left as it is, and remediate will not uncordon it",
                }
            )
        if breaker is None:
            breaker = action.acquire(node.name, kind, ctx)
        marks = {
            CORDONED_BY_RUN: str(ctx.run_id),
            CORDONED_FOR_ALERT: ctx.alert.fingerprint,
            CORDONED_AT: iso_now(),
        }
        return Decision(cordoned, {"metadata": {"annotations": marks}, "spec": {"unschedulable": True}}, event)

    return patch_until_stable(action, ref, ctx, decide)


def _nothing(result: dict[str, Any]) -> Decision:
    return Decision(lambda _node, _event: result)


class CordonAction(KubeAction):
    name: ClassVar[str] = "k8s.cordon"
    description: ClassVar[str] = "Mark a node unschedulable, recording that remediate did it (circuit breaker)."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = node_schema(note=NOTE_PARAM)

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref, node, seen = self.observe(params, ctx)
        if seen.get("can_act") is False:
            return seen  # owned by another system: nothing else to say
        if not node.unschedulable:
            would = "cordon the node and annotate it with this run"
        elif node.cordoned_by_run is not None:
            would = f"nothing: run {node.cordoned_by_run} of remediate cordoned it already"
        else:
            would = "nothing: someone else cordoned it (remediate will not uncordon it)"
        return {**seen, "would": would, "breaker": self.breaker_preview(ref.name, ctx)}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return cordon(self, self.node_ref(params, ctx), ctx, kind="cordon", note=params.get("note", ""))


class UncordonAction(KubeAction):
    name: ClassVar[str] = "k8s.uncordon"
    description: ClassVar[str] = "Make a node schedulable again, only if remediate cordoned it. Never refused."
    schema: ClassVar[ParamSchema] = node_schema(note=NOTE_PARAM, scope=SCOPE_PARAM)

    def _decide(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[bool, str]:
        if not node.unschedulable:
            return False, "not cordoned: nothing to undo"
        if node.cordoned_by_run is None:
            return False, (
                "left alone: cordoned by someone else (no remediate.io/cordoned-by-run annotation), "
                "remediate only undoes its own cordon"
            )
        alert = ctx.alert.fingerprint
        if params["scope"] == "alert" and node.cordoned_for_alert and node.cordoned_for_alert != alert:
            return False, (
                f"left alone: run {node.cordoned_by_run} cordoned it for another alert "
                f"({node.cordoned_for_alert}); that alert's resolution uncordons it (scope: any would now)"
            )
        return True, f"uncordon: run {node.cordoned_by_run} of remediate cordoned it"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        _, node, seen = self.observe(params, ctx)
        _, why = self._decide(node, params, ctx)
        return {**seen, "would": why}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)

        def decide(node: NodeInfo) -> Decision:
            undo, why = self._decide(node, params, ctx)
            if not undo:
                left_alone = self.released(ctx, "left_alone", node=ref.name, reason=why)
                # Someone uncordoned it by hand: drop remediate's leftover marks (no event: nothing changes).
                stale_marks = not node.unschedulable and CORDONED_BY_RUN in node.annotations
                return Decision(left_alone, _drop_marks() if stale_marks else None)

            def uncordoned(now: NodeInfo, event: dict[str, Any] | None) -> dict[str, Any]:
                return {
                    "outcome": "uncordoned",
                    "node": ref.name,
                    "cordoned_by_run": node.cordoned_by_run,
                    "event": event,
                    "breaker_released": self.release(now, ctx),
                }

            note = f"uncordoned by remediate (it cordoned the node in run {node.cordoned_by_run}). "
            event = NodeEvent("uncordon", "RemediateUncordoned", "Normal", note + params.get("note", ""), "uncordon")
            return Decision(uncordoned, {**_drop_marks(), "spec": {"unschedulable": None}}, event)

        return patch_until_stable(self, ref, ctx, decide)


def _drop_marks() -> dict[str, Any]:
    return {"metadata": {"annotations": {CORDONED_BY_RUN: None, CORDONED_FOR_ALERT: None, CORDONED_AT: None}}}
