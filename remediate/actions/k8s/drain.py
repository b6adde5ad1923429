"""`k8s.drain`: cordon a node and evict its pods like kubectl drain, honouring PodDisruptionBudgets."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.k8s.common import NOTE_PARAM, KubeAction, NodeEvent, node_schema
from remediate.actions.k8s.cordon import cordon
from remediate.actions.schema import Param, ParamSchema, positive
from remediate.errors import ActionError
from remediate.kube import (
    DrainOptions,
    KubeError,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    PodInfo,
    classify_pod,
    pdb_forecast,
)


def _not_negative(value: int) -> str | None:
    return None if value >= 0 else "must be 0 or more"


class DrainAction(KubeAction):
    name: ClassVar[str] = "k8s.drain"
    description: ClassVar[str] = "Cordon a node and evict its pods like kubectl drain, honouring PodDisruptionBudgets."
    breaker_gated: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = node_schema(
        grace_period_seconds=Param(int, check=_not_negative, doc="eviction grace period; default: the pod's"),
        timeout=Param(float, default=300.0, check=positive, doc="seconds to evict and wait for the pods"),
        pdb_retry_interval=Param(
            float, default=5.0, check=positive, doc="first wait before evicting a pod a PDB blocked (doubles)"
        ),
        force=Param(bool, default=False, doc="also evict pods no controller manages"),
        delete_emptydir_data=Param(bool, default=False, doc="also evict pods with emptyDir volumes"),
        cordon=Param(bool, default=True, doc="cordon the node first (kubectl drain does)"),
        wait_for_delete=Param(bool, default=True, doc="wait until evicted pods are gone or replaced"),
        allow_incomplete=Param(
            bool, default=False, doc="succeed even if pods are still blocked or terminating at the timeout"
        ),
        note=NOTE_PARAM,
    )

    def _pods(self, node: str, params: Mapping[str, Any], ctx: StepContext) -> list[Any]:
        options = DrainOptions(force=params["force"], delete_emptydir_data=params["delete_emptydir_data"])
        pods = self.api(ctx, lambda c: c.pods_on_node(node))
        return [classify_pod(p, options) for p in sorted(pods, key=lambda p: p.ref)]

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        ref, node, seen = self.observe(params, ctx)
        if seen.get("can_act") is False:
            return seen  # owned by another system: nothing else to say
        verdicts = self._pods(node.name, params, ctx)
        evict = [v.pod for v in verdicts if v.action == "evict"]
        pdb_error = None
        try:
            pdbs = self.api(ctx, lambda c: c.list_pdbs())
        except (KubeError, KubeUnavailable) as exc:
            # Only the forecast needs them (execute learns of PDBs from the evictions' 429s): say so, go on.
            pdbs, pdb_error = [], f"cannot read PodDisruptionBudgets, so blocking ones are not forecast: {exc}"
        forecast = pdb_forecast(evict, pdbs)
        blocking = sorted({p for f in forecast.values() if f["blocked_by"] for p in f["pdbs"]})
        notes = [pdb_error] if pdb_error else []
        return {
            **seen,
            "would_cordon": params["cordon"] and not node.unschedulable,
            "would_evict": [{"pod": p.ref, **forecast[p.ref]} for p in evict],
            "would_skip": [v.to_dict() for v in verdicts if v.action == "skip"],
            "refused": [v.to_dict() for v in verdicts if v.action == "refuse"],
            "pdbs_that_would_block": blocking,
            "breaker": self.breaker_preview(ref.name, ctx),
            "notes": notes,
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        started = time.monotonic()
        deadline = min(started + params["timeout"], time.monotonic() + max(0.0, ctx.remaining() - 1.0))
        ref = self.node_ref(params, ctx)
        result: dict[str, Any] = {"node": ref.name}
        if params["cordon"]:
            result["cordon"] = cordon(self, ref, ctx, kind="drain", note=params.get("note", ""))
        node = self.read_node(ref, ctx)
        result["breaker"] = self.acquire(node.name, "drain", ctx)
        verdicts = self._pods(node.name, params, ctx)
        skipped = [v.to_dict() for v in verdicts if v.action == "skip"]
        refused = [v.to_dict() for v in verdicts if v.action == "refuse"]
        if refused:
            raise ActionError(
                f"drain of {node.name} refused before evicting anything, as kubectl drain would: "
                + "; ".join(f"{r['pod']} {r['reason']}" for r in refused)
                + (f" (node cordoned: {result['cordon']['outcome']})" if "cordon" in result else "")
            )
        pending: dict[str, PodInfo] = {v.pod.ref: v.pod for v in verdicts if v.action == "evict"}
        evicted: dict[str, PodInfo] = {}
        already_gone: list[str] = []
        blocked: dict[str, str] = {}
        wait = params["pdb_retry_interval"]
        grace = params.get("grace_period_seconds")
        while pending:
            for pod_ref, pod in list(pending.items()):
                try:
                    self.api(ctx, lambda c, p=pod: c.evict_pod(p.namespace, p.name, grace), throttled=False)
                except KubeNotFound:
                    already_gone.append(pod_ref)
                except KubeTooManyRequests as exc:
                    blocked[pod_ref] = _blocked_reason(exc)
                    continue
                except KubeUnavailable as exc:
                    # e.g. "more than one PodDisruptionBudget" (500): keep trying until the timeout.
                    blocked[pod_ref] = str(exc)
                    continue
                except KubeError as exc:
                    left = {**blocked, **{p: "not tried" for p in pending}}
                    raise ActionError(
                        f"drain of {node.name}: eviction of {pod_ref} failed: {exc}. "
                        + _drain_summary(evicted, already_gone, skipped, left)
                    ) from exc
                else:
                    evicted[pod_ref] = pod
                pending.pop(pod_ref)
                blocked.pop(pod_ref, None)
            if not pending or time.monotonic() + wait > deadline:
                break
            time.sleep(wait)
            wait = min(wait * 2, max(params["pdb_retry_interval"], 30.0))
        terminating = self._wait_gone(evicted, deadline, ctx) if params["wait_for_delete"] else []
        complete = not pending and not terminating
        result.update(
            evicted=[{"pod": r, "uid": p.uid} for r, p in evicted.items()],
            already_gone=already_gone,
            skipped=skipped,
            blocked=[{"pod": r, "reason": blocked.get(r, "not evicted before the timeout")} for r in pending],
            still_terminating=terminating,
            complete=complete,
            seconds=round(time.monotonic() - started, 3),
        )
        summary = _drain_summary(evicted, already_gone, skipped, {r: blocked.get(r, "") for r in pending})
        if terminating:
            summary += f"; still terminating: {', '.join(terminating)}"
        reason = "RemediateDrained" if complete else "RemediateDrainIncomplete"
        note = f"drained by remediate: {summary}. {params.get('note', '')}".strip()
        result["event"] = self.event(ctx, node, NodeEvent("drain", reason, "Warning", note))
        if not complete and not params["allow_incomplete"]:
            raise ActionError(
                f"drain of {node.name} incomplete after {params['timeout']:g}s: {summary} "
                "(the node stays cordoned; set allow_incomplete: true to accept this)"
            )
        return result

    def _wait_gone(self, evicted: Mapping[str, PodInfo], deadline: float, ctx: StepContext) -> list[str]:
        """Wait until each evicted pod is gone (404) or replaced (same name, new UID); return those that are not."""
        waiting = dict(evicted)
        pause = 0.05
        while waiting:
            for pod_ref, pod in list(waiting.items()):
                try:
                    current = self.api(ctx, lambda c, p=pod: c.get_pod(p.namespace, p.name))
                except KubeNotFound:
                    waiting.pop(pod_ref)
                    continue
                except KubeUnavailable:
                    continue
                if current.uid != pod.uid:
                    waiting.pop(pod_ref)
            if not waiting or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        return sorted(waiting)


def _blocked_reason(exc: KubeTooManyRequests) -> str:
    status = exc.status
    causes = [str(c.get("message", "")) for c in (status.causes if status else ()) if c.get("message")]
    return "; ".join(causes) or (status.message if status else str(exc))


def _drain_summary(
    evicted: Mapping[str, Any], gone: list[str], skipped: list[dict[str, Any]], blocked: Mapping[str, str]
) -> str:
    parts = [f"evicted {len(evicted)}" + (f" ({', '.join(evicted)})" if evicted else "")]
    if gone:
        parts.append(f"already gone {len(gone)} ({', '.join(gone)})")
    parts.append(f"skipped {len(skipped)}" + (f" ({', '.join(s['pod'] for s in skipped)})" if skipped else ""))
    if blocked:
        parts.append("blocked " + "; ".join(f"{p}: {why}" if why else p for p, why in blocked.items()))
    return ", ".join(parts)
