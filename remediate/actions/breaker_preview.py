"""What a plan says about the circuit breaker: its state, and whether claiming a node would be refused now.

Shared by the breaker-gated families (k8s.cordon/taint/drain, slurm.drain): each passes how it counts its
cluster (`census`: the nodes the breaker's fraction is taken of, and those holding remediate's marks now),
called only when there is a breaker to ask. Reads only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediate.actions.base import StepContext


def breaker_preview(node: str, ctx: StepContext, census: Callable[[], tuple[int, set[str]]]) -> dict[str, Any]:
    """The breaker's state for a plan, and whether a change of `node` would be refused now."""
    if ctx.breaker is None:
        return {"state": "unknown", "note": "no circuit breaker here (no store): execute would refuse"}
    cluster_nodes, held_in_cluster = census()
    status = ctx.breaker.status(cluster_nodes)
    held = set(status["held_nodes"]) | held_in_cluster
    recent = set(status["recent_nodes"])
    cap = status["cap"] if status["cap"] is not None else 0
    if status["open"]:
        verdict = "refused: the breaker is open"
    elif node in held:
        verdict = "allowed: the node already counts as held by remediate"
    elif len(held | {node}) > cap or len(recent | {node}) > cap:
        counts = f"{len(held | {node})} held / {len(recent | {node})} recent > cap {cap}"
        verdict = f"refused: it would trip the breaker ({counts})"
    else:
        verdict = f"allowed: {len(held | {node})} of at most {cap} nodes held"
    return {
        "state": status["state"],
        "would_be": verdict,
        "held_nodes": sorted(held),
        "recent_nodes": sorted(recent),
        "cap": cap,
        "cap_rule": status["cap_rule"],
        "cluster_nodes": cluster_nodes,
        "reason": status["reason"] or None,
        "reset_at": status["reset_at"],
        "alert_started_at": ctx.alert.starts_at,
    }
