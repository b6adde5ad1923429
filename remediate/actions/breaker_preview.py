"""What a plan says about the circuit breaker: its state, and whether claiming a node would be refused now.

Shared by the breaker-gated families (k8s.cordon/taint/drain, slurm.drain): each passes how it counts its
cluster (`census`: the nodes the breaker's fraction is taken of, those holding remediate's marks now, and the
groups of nodes the node is in whose own share counts too: slurm.drain's partitions), called only when there is
a breaker to ask. The verdict is the breaker's own rule (`cap_counts`), so a plan says what execute would meet.
Reads only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from remediate.actions.base import StepContext
from remediate.breaker import CapCount, cap_counts


@dataclass(frozen=True)
class ClusterCount:
    """What an action counts of its cluster for the breaker (CircuitBreaker.acquire's arguments)."""

    counted: int
    """Nodes the whole scope's fraction is taken of."""
    held: set[str]
    """Nodes holding remediate's marks now."""
    groups: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    """Name -> nodes of each group the node is in whose own share the fraction also caps (Slurm partitions)."""


def _excess(count: CapCount) -> str:
    where = "" if count.group is None else f" of the {count.nodes} nodes of {count.group}"
    return f"{count.held} held / {count.recent} recent{where} > cap {count.cap}"


def breaker_preview(node: str, ctx: StepContext, census: Callable[[], ClusterCount]) -> dict[str, Any]:
    """The breaker's state for a plan, and whether a change of `node` would be refused now."""
    if ctx.breaker is None:
        return {"state": "unknown", "note": "no circuit breaker here (no store): execute would refuse"}
    count = census()
    status = ctx.breaker.status(count.counted)
    held = set(status["held_nodes"]) | count.held
    recent = set(status["recent_nodes"])
    cap = status["cap"] if status["cap"] is not None else 0
    counts = cap_counts(
        ctx.breaker.limits, node, held=held, recent=recent, cluster_nodes=count.counted, groups=count.groups
    )
    if status["open"]:
        verdict = "refused: the breaker is open"
    elif node in held:
        verdict = "allowed: the node already counts as held by remediate"
    elif over := next((c for c in counts if c.over), None):
        verdict = f"refused: it would trip the breaker ({_excess(over)})"
    else:
        shares = "".join(f", {c.held} of at most {c.cap} in {c.group}" for c in counts[1:])
        verdict = f"allowed: {len(held | {node})} of at most {cap} nodes held{shares}"
    return {
        "state": status["state"],
        "would_be": verdict,
        "held_nodes": sorted(held),
        "recent_nodes": sorted(recent),
        "cap": cap,
        "cap_rule": status["cap_rule"],
        "cluster_nodes": count.counted,
        **({"groups": [c.to_dict() for c in counts[1:]]} if count.groups else {}),
        "reason": status["reason"] or None,
        "reset_at": status["reset_at"],
        "alert_started_at": ctx.alert.starts_at,
    }
