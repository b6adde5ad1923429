"""The circuit breaker of cluster actions: a cap on the nodes remediate cordons, taints or drains.

Who calls it: the k8s.cordon / k8s.taint / k8s.drain actions (`acquire`, through
`StepContext.breaker`), k8s.uncordon / k8s.untaint (`release`, never refused), the
engine's guards (is it open? is an alert stale?), the CLI and HTTP server (`status`,
`reset`). The logic is here; the rows live in the store (`Store.breaker`),
or in memory for tests (`MemoryLedger`).

What it counts: nodes, not steps. A node is *held* while remediate's cordon or taints
are on it (an unreleased claim, or the node's own remediate.io/ annotations as the
action just read them); it is *recent* if remediate claimed it within `window` (and after the last reset). Both
counts must stay within the cap:

    cap = min(max_nodes, floor(max_fraction x cluster nodes))      (at least 1 when both are > 0)

where cluster nodes are all nodes, or those matching `node_selector` (e.g. GPU nodes). An action may also
name groups of nodes the claimed node is in (slurm.drain: its partitions in scope): the same cap holds for
each group's own nodes, so a partition of 8 beside one of 1,000 keeps its share however big the rest.
A step that would take one node more trips the breaker: it is refused, and so is
every later claim of a new node until a person resets it (`remediate breaker reset`,
POST /breaker/reset). A run that already holds its node may finish with it (cordon,
then taint, then drain the same node). Undo (uncordon, untaint) is never refused.

Check and count are one store transaction (`acquire` runs inside `write()`), so
executor threads of every worker process see each other's claims: 100 alerts at
once cannot cordon more than the cap.

After a reset, an alert that started before the reset and is older than
`stale_horizon` is stale: its runs are recorded as such instead of acting on what a
storm left behind.

The package: model.py is what the breaker counts and says (limits and the cap, its state, a claim, the ledger it
keeps them in, why it is open or an alert stale; pure); circuit.py is the breaker itself (CircuitBreaker: acquire,
release, status, reset in one ledger transaction) and MemoryLedger for tests and rehearsals.

May import: remediate.errors and config's durations; never the store (its rows implement BreakerLedger),
execution, Kubernetes or HTTP (pyproject.toml's `breaker` contract).
"""

from __future__ import annotations

from remediate.breaker.circuit import CircuitBreaker, MemoryLedger, memory_breaker
from remediate.breaker.model import (
    BreakerLedger,
    BreakerLimits,
    BreakerOpen,
    BreakerState,
    CapCount,
    Claim,
    ClaimRow,
    StaleAlert,
    cap_counts,
    is_stale,
    iso_utc,
    limits_from_settings,
    open_reason,
    stale_reason,
)

__all__ = [
    "BreakerLedger",
    "BreakerLimits",
    "BreakerOpen",
    "BreakerState",
    "CapCount",
    "CircuitBreaker",
    "Claim",
    "ClaimRow",
    "MemoryLedger",
    "StaleAlert",
    "cap_counts",
    "is_stale",
    "iso_utc",
    "limits_from_settings",
    "memory_breaker",
    "open_reason",
    "stale_reason",
]
