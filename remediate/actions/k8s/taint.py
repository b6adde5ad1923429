"""`k8s.taint` and `k8s.untaint`: add a taint without losing others', and remove only remediate's own.

What remediate added is recorded in the remediate.io/taints annotation by the same write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.k8s.common import (
    NOTE_PARAM,
    SCOPE_PARAM,
    KubeAction,
    NodeEvent,
    digest,
    iso_now,
    node_schema,
)
from remediate.actions.k8s.patching import Decision, patch_until_stable
from remediate.actions.schema import Param, ParamSchema
from remediate.kube import TAINT_EFFECTS, TAINTS, NodeInfo, Taint, check_taint_key, check_taint_value


class TaintAction(KubeAction):
    name: ClassVar[str] = "k8s.taint"
    description: ClassVar[str] = "Add a taint to a node without losing others (read-modify-write, circuit breaker)."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = node_schema(
        key=Param(str, required=True, static=True, check=check_taint_key, doc="taint key, e.g. remediate.io/gpu-xid"),
        value=Param(str, default="", check=check_taint_value, doc="taint value (may come from the alert)"),
        effect=Param(str, default="NoSchedule", static=True, choices=TAINT_EFFECTS),
        note=NOTE_PARAM,
    )

    def _decide(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[str, str]:
        """(add | done | already | left_alone, why)."""
        wanted = Taint(params["key"], params["effect"], params.get("value") or None)
        record = node.owned_taints().get(wanted.id)
        present = next((t for t in node.taints if t.id == wanted.id), None)
        if present is None:
            return "add", f"add {wanted.describe()}"
        if record is None:
            return "left_alone", (
                f"left alone: {present.describe()} is already on the node, put there by someone else "
                "(remediate will not remove it)"
            )
        if record.get("run") == ctx.run_id:
            return "done", f"{present.describe()} added by this run (an earlier attempt)"
        return "already", f"{present.describe()} already added by remediate run {record.get('run')}; nothing to do"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref, node, seen = self.observe(params, ctx)
        if seen.get("can_act") is False:
            return seen  # owned by another system: nothing else to say
        _, why = self._decide(node, params, ctx)
        return {**seen, "would": why, "breaker": self.breaker_preview(ref.name, ctx)}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)
        wanted = Taint(
            params["key"],
            params["effect"],
            params.get("value") or None,
            iso_now() if params["effect"] == "NoExecute" else None,
        )
        note = f"taint {wanted.describe()} added by remediate. {params.get('note', '')}".strip()
        event = NodeEvent("taint", "RemediateTainted", "Warning", note, f"taint.{digest(wanted.id)}")
        breaker: dict[str, Any] | None = None

        def tainted(now: NodeInfo, recorded: dict[str, Any] | None) -> dict[str, Any]:
            return {
                "outcome": "tainted",
                "node": ref.name,
                "taint": wanted.describe(),
                "taints_now": [t.describe() for t in now.taints],
                "event": recorded,
                "breaker": breaker,
            }

        def done(_now: NodeInfo, recorded: dict[str, Any] | None) -> dict[str, Any]:
            return {"outcome": "tainted", "node": ref.name, "taint": wanted.describe(), "event": recorded}

        def decide(node: NodeInfo) -> Decision:
            nonlocal breaker
            what, why = self._decide(node, params, ctx)
            if what == "done":
                return Decision(done, event=event)
            if what in ("already", "left_alone"):
                outcome = "already_tainted_by_remediate" if what == "already" else "left_alone"
                return Decision(lambda _now, _event: {"outcome": outcome, "node": ref.name, "reason": why})
            if breaker is None:
                breaker = self.acquire(node.name, "taint", ctx)
            records = node.owned_taints()
            records[wanted.id] = {
                "run": ctx.run_id,
                "alert": ctx.alert.fingerprint,
                "value": wanted.value,
                "at": iso_now(),
            }
            patch = {
                "metadata": {"annotations": {TAINTS: json.dumps(records, sort_keys=True)}},
                # A strategic-merge patch replaces the whole list: write every taint the node had, plus ours.
                "spec": {"taints": [t.to_api() for t in node.taints] + [wanted.to_api()]},
            }
            return Decision(tainted, patch, event)

        return patch_until_stable(self, ref, ctx, decide)


class UntaintAction(KubeAction):
    name: ClassVar[str] = "k8s.untaint"
    description: ClassVar[str] = "Remove taints remediate added (never others'). Never refused by the breaker."
    schema: ClassVar[ParamSchema] = node_schema(
        key=Param(str, required=True, static=True, check=check_taint_key),
        effect=Param(str, static=True, choices=TAINT_EFFECTS, doc="default: every effect of `key`"),
        note=NOTE_PARAM,
        scope=SCOPE_PARAM,
    )

    def _split(self, node: NodeInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[list[Taint], list[str]]:
        """(taints of ours to remove, why each other matching taint stays)."""
        owned = node.owned_taints()
        alert = ctx.alert.fingerprint
        ours, kept = [], []
        for taint in node.taints:
            if taint.key != params["key"] or (params.get("effect") and taint.effect != params["effect"]):
                continue
            record = owned.get(taint.id)
            if record is None:
                kept.append(f"{taint.describe()}: put there by someone else")
            elif params["scope"] == "alert" and record.get("alert") and record.get("alert") != alert:
                kept.append(f"{taint.describe()}: added by run {record.get('run')} for another alert")
            else:
                ours.append(taint)
        return ours, kept

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        _, node, seen = self.observe(params, ctx)
        ours, kept = self._split(node, params, ctx)
        return {**seen, "would_remove": [t.describe() for t in ours], "would_keep": kept}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref = self.node_ref(params, ctx)

        def decide(node: NodeInfo) -> Decision:
            ours, kept = self._split(node, params, ctx)
            if not ours:
                return Decision(self.released(ctx, "left_alone" if kept else "not_tainted", node=ref.name, kept=kept))
            gone = {t.id for t in ours}
            records = {k: v for k, v in node.owned_taints().items() if k not in gone}
            patch = {
                "metadata": {"annotations": {TAINTS: json.dumps(records, sort_keys=True) if records else None}},
                "spec": {"taints": [t.to_api() for t in node.taints if t.id not in gone]},
            }
            removed = [t.describe() for t in ours]

            def untainted(now: NodeInfo, event: dict[str, Any] | None) -> dict[str, Any]:
                return {
                    "outcome": "untainted",
                    "node": ref.name,
                    "removed": removed,
                    "kept": kept,
                    "event": event,
                    "breaker_released": self.release(now, ctx),
                }

            note = f"removed {', '.join(removed)} (added by remediate). {params.get('note', '')}".strip()
            event = NodeEvent("untaint", "RemediateUntainted", "Normal", note, f"untaint.{digest(*sorted(gone))}")
            return Decision(untainted, patch, event)

        return patch_until_stable(self, ref, ctx, decide)
