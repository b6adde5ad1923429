"""What the circuit breaker counts and says: its limits and cap, its state, a claim, the ledger that keeps them,
and why it is open or an alert stale (pure; remediate.breaker.circuit acts on them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from remediate.config.durations import format_duration
from remediate.errors import ActionError


class BreakerOpen(ActionError):
    """The circuit breaker of cluster actions is open: no new node is changed until it is reset."""

    def __init__(self, message: str, *, status: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.status = dict(status)


class StaleAlert(ActionError):
    """The alert started before the breaker was reset and is older than the stale horizon."""


@dataclass(frozen=True)
class BreakerLimits:
    max_fraction: float = 0.10
    max_nodes: int = 3
    window: float = 600.0
    node_selector: str | None = None
    stale_horizon: float = 900.0

    def cap(self, cluster_nodes: int) -> int:
        if cluster_nodes <= 0 or self.max_nodes <= 0 or self.max_fraction <= 0:
            return 0
        by_fraction = max(1, math.floor(self.max_fraction * cluster_nodes + 1e-9))
        return min(self.max_nodes, by_fraction)

    def describe_cap(self, cluster_nodes: int | None, *, group: str | None = None) -> str:
        """How the cap of the whole scope, or of one `group` of its nodes (a Slurm partition), is reached."""
        if group is not None:
            scope = f"nodes of {group}"
        else:
            scope = f"nodes matching {self.node_selector}" if self.node_selector else "nodes"
        if cluster_nodes is None:
            return f"min({self.max_fraction:.0%} of {scope}, {self.max_nodes})"
        share = math.floor(self.max_fraction * cluster_nodes + 1e-9)
        return (
            f"{self.cap(cluster_nodes)} = min({self.max_fraction:.0%} of {cluster_nodes} {scope} = {share}"
            f"{' (at least 1)' if share == 0 and cluster_nodes else ''}, max_nodes {self.max_nodes})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_fraction": self.max_fraction,
            "max_nodes": self.max_nodes,
            "window_seconds": self.window,
            "node_selector": self.node_selector,
            "stale_horizon_seconds": self.stale_horizon,
        }


@dataclass(frozen=True)
class CapCount:
    """One cap a claim is checked against, counting the node claimed: the whole scope (`group` None: every
    node counted, or those matching the selector), or one group of nodes the claimed node is in (a Slurm
    partition), which the fraction holds for on its own, so a small group beside a big one cannot all go."""

    group: str | None
    nodes: int
    held: int
    """Nodes held by remediate, the claimed one included."""
    recent: int
    """Nodes changed within the window, the claimed one included."""
    cap: int

    @property
    def over(self) -> bool:
        return self.held > self.cap or self.recent > self.cap

    def trip_reason(self, limits: BreakerLimits, *, kind: str, node: str, run_id: int) -> str:
        """What the breaker records when this count trips it."""
        held = f"{self.held} nodes" if self.group is None else f"{self.held} of the {self.nodes} nodes of {self.group}"
        return (
            f"{kind} of node {node} (run {run_id}) would make {held} held by remediate now and {self.recent} "
            f"changed within {format_duration(limits.window)}; the cap is "
            f"{limits.describe_cap(self.nodes, group=self.group)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cap_counts(
    limits: BreakerLimits,
    node: str,
    *,
    held: AbstractSet[str],
    recent: AbstractSet[str],
    cluster_nodes: int,
    groups: Mapping[str, AbstractSet[str]] | None = None,
) -> list[CapCount]:
    """The counts a claim of `node` is checked against: the whole scope's, then each of `groups` (name -> its
    nodes: the groups the node is in; it counts as one of them even where their list missed it), by name.
    The same rule for each: `limits.cap` of the nodes counted, the fraction rounded down, at least 1."""
    counts = [CapCount(None, cluster_nodes, len(held | {node}), len(recent | {node}), limits.cap(cluster_nodes))]
    chosen = groups or {}
    for name in sorted(chosen):
        members = chosen[name]
        nodes = len(members) + (node not in members)
        # Walks the held and recent nodes (a few), never the group's (thousands).
        counts.append(
            CapCount(name, nodes, _within(held, members, node), _within(recent, members, node), limits.cap(nodes))
        )
    return counts


def _within(nodes: AbstractSet[str], members: AbstractSet[str], node: str) -> int:
    return len({name for name in nodes if name in members} | {node})


@dataclass(frozen=True)
class BreakerState:
    """What is persisted (the store's meta row `breaker`)."""

    open: bool = False
    tripped_at: float | None = None
    reason: str = ""
    tripped_by_run: int | None = None
    tripped_node: str = ""
    refused: int = 0
    """Claims refused since the breaker last tripped."""
    last_refused_at: float | None = None
    reset_at: float | None = None
    reset_by: str = ""
    reset_reason: str = ""
    cluster_nodes: int | None = None
    """Cluster size (within the selector) the last time an action asked."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> BreakerState:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Claim:
    node: str
    kind: str
    run_id: int
    claimed_at: float
    released_at: float | None = None


class ClaimRow(Protocol):
    """A claim as a ledger hands it back: a `Claim`, or the store's plain row with the same fields.

    The store reads and writes these fields without knowing this module (its rows are not Claims).
    """

    @property
    def node(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def run_id(self) -> int: ...
    @property
    def claimed_at(self) -> float: ...
    @property
    def released_at(self) -> float | None: ...


class BreakerLedger(Protocol):
    """The breaker's rows, seen inside one transaction."""

    def state(self) -> dict[str, Any] | None: ...
    def save_state(self, state: Mapping[str, Any]) -> None: ...
    def open_claims(self) -> Sequence[ClaimRow]: ...
    def claims_since(self, since: float) -> Sequence[ClaimRow]: ...
    def add_claim(self, claim: ClaimRow) -> None: ...
    def release(self, node: str, *, now: float, reason: str) -> int: ...


LedgerFactory = Callable[[], AbstractContextManager[BreakerLedger]]


def is_stale(alert_started_at: float | None, state: BreakerState, now: float, horizon: float) -> bool:
    """After a reset: did the alert start before it, and longer ago than `horizon`?"""
    return (
        state.reset_at is not None
        and alert_started_at is not None
        and alert_started_at < state.reset_at
        and now - alert_started_at > horizon
    )


def stale_reason(alert_started_at: float, state: BreakerState, horizon: float) -> str:
    return (
        f"stale: the alert started at {iso_utc(alert_started_at)}, before the circuit breaker was reset at "
        f"{iso_utc(state.reset_at or 0)}, and is older than the stale horizon {format_duration(horizon)}: "
        "not acting on it (a new occurrence of the alert will be acted on)"
    )


def open_reason(state: BreakerState) -> str:
    """One line for decisions refused at ingest while the breaker is open."""
    since = f" since {iso_utc(state.tripped_at)}" if state.tripped_at else ""
    return f"breaker open{since}: {state.reason or 'tripped'}; reset it with `remediate breaker reset`"


def window_start(state: BreakerState, now: float, window: float) -> float:
    """Changes count within the window, and only since the last reset: a person checked those before."""
    return max(now - window, state.reset_at or 0.0)


def iso_utc(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def limits_from_settings(breaker: Any) -> BreakerLimits:
    """The breaker limits of its settings section (`remediate.config.settings.BreakerSettings`: the same fields)."""
    return BreakerLimits(**asdict(breaker))
