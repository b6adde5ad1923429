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

where cluster nodes are all nodes, or those matching `node_selector` (e.g. GPU nodes).
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
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
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

    def describe_cap(self, cluster_nodes: int | None) -> str:
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


@dataclass(eq=False)
class CircuitBreaker:
    write: LedgerFactory
    """A write transaction on the ledger (claims, releases, trips and resets)."""
    read: LedgerFactory | None = None
    """A read of the ledger (status); None: `write`'s."""
    _: KW_ONLY
    limits: BreakerLimits = field(default_factory=BreakerLimits)
    clock: Callable[[], float] = time.time

    # ------------------------------------------------------------------ claims

    def acquire(
        self,
        node: str,
        *,
        kind: str,
        run_id: int,
        cluster_nodes: int,
        held_in_cluster: Collection[str] = (),
        alert_started_at: float | None = None,
    ) -> dict[str, Any]:
        """Claim `node` for a change of `kind` (cordon, taint, drain); raise BreakerOpen or StaleAlert.

        Returns the breaker's status after the claim (recorded in the step's result).
        """
        now = self.clock()
        limits = self.limits
        refusal: ActionError | None = None
        with self.write() as ledger:
            state = replace(BreakerState.from_dict(ledger.state()), cluster_nodes=cluster_nodes)
            if is_stale(alert_started_at, state, now, limits.stale_horizon):
                assert alert_started_at is not None
                ledger.save_state(state.to_dict())
                refusal = StaleAlert(stale_reason(alert_started_at, state, limits.stale_horizon))
            else:
                claims = ledger.open_claims()
                held_now = set(held_in_cluster)
                for claim in claims:
                    # A claim whose node no longer shows remediate's marks was undone by hand; give it up once
                    # it is out of the window (a younger one may be a change still in flight).
                    if claim.node not in held_now and claim.claimed_at < now - limits.window and claim.node != node:
                        ledger.release(claim.node, now=now, reason="remediate's marks are gone from the node")
                claims = ledger.open_claims()
                held = held_now | {c.node for c in claims}
                recent = {c.node for c in ledger.claims_since(_window_start(state, now, limits.window))}
                own = any(c.node == node and c.run_id == run_id for c in claims)
                cap = limits.cap(cluster_nodes)
                if state.open and not own:
                    state = replace(state, refused=state.refused + 1, last_refused_at=now)
                    refusal = BreakerOpen(
                        self._refusal(node, kind, run_id, state, held, recent, cap, cluster_nodes),
                        status=self._status(state, held, recent, cap),
                    )
                elif own or node in held:
                    if not own:
                        ledger.add_claim(Claim(node, kind, run_id, now))
                elif len(held | {node}) > cap or len(recent | {node}) > cap:
                    why = (
                        f"{kind} of node {node} (run {run_id}) would make {len(held | {node})} nodes held by "
                        f"remediate now and {len(recent | {node})} changed within {format_duration(limits.window)}; "
                        f"the cap is {limits.describe_cap(cluster_nodes)}"
                    )
                    state = replace(
                        state,
                        open=True,
                        tripped_at=now,
                        reason=why,
                        tripped_by_run=run_id,
                        tripped_node=node,
                        refused=1,
                        last_refused_at=now,
                    )
                    refusal = BreakerOpen(
                        self._refusal(node, kind, run_id, state, held, recent, cap, cluster_nodes),
                        status=self._status(state, held, recent, cap),
                    )
                else:
                    ledger.add_claim(Claim(node, kind, run_id, now))
                    held.add(node)
                    recent.add(node)
                ledger.save_state(state.to_dict())
                snapshot = self._status(state, held, recent, cap)
        # Raised after the transaction committed: the refusal and the trip are recorded either way.
        if refusal is not None:
            raise refusal
        return snapshot

    def release(self, node: str, *, run_id: int, reason: str = "") -> int:
        """The node no longer carries any change of remediate: it stops counting as held. Never refused."""
        with self.write() as ledger:
            return ledger.release(node, now=self.clock(), reason=reason or f"undone by run {run_id}")

    # ------------------------------------------------------------------ operator

    def state(self) -> BreakerState:
        with (self.read or self.write)() as ledger:
            return BreakerState.from_dict(ledger.state())

    def status(self, cluster_nodes: int | None = None) -> dict[str, Any]:
        """Everything an operator needs to decide on a reset. Reads only."""
        now = self.clock()
        with (self.read or self.write)() as ledger:
            state = BreakerState.from_dict(ledger.state())
            held = {c.node for c in ledger.open_claims()}
            recent = {c.node for c in ledger.claims_since(_window_start(state, now, self.limits.window))}
        nodes = cluster_nodes if cluster_nodes is not None else state.cluster_nodes
        return self._status(state, held, recent, self.limits.cap(nodes) if nodes is not None else None)

    def reset(self, *, by: str, reason: str = "") -> dict[str, Any]:
        """Close an open breaker; the status with `reset` true. A closed breaker is left as it is (`reset`
        false): a reset moves the stale horizon and the cap's window start, so resetting a closed breaker
        would silently turn older alerts stale."""
        now = self.clock()
        with self.write() as ledger:
            state = BreakerState.from_dict(ledger.state())
            was_open = state.open
            if was_open:
                state = replace(state, open=False, reset_at=now, reset_by=by, reset_reason=reason, refused=0)
                ledger.save_state(state.to_dict())
        return {**self.status(), "reset": was_open}

    # ------------------------------------------------------------------ words

    def _status(self, state: BreakerState, held: set[str], recent: set[str], cap: int | None) -> dict[str, Any]:
        nodes = state.cluster_nodes
        return {
            "open": state.open,
            "state": "open" if state.open else "closed",
            "tripped_at": state.tripped_at,
            "reason": state.reason,
            "tripped_by_run": state.tripped_by_run,
            "tripped_node": state.tripped_node or None,
            "refused": state.refused,
            "last_refused_at": state.last_refused_at,
            "reset_at": state.reset_at,
            "reset_by": state.reset_by or None,
            "reset_reason": state.reset_reason or None,
            "held_nodes": sorted(held),
            "recent_nodes": sorted(recent),
            "cluster_nodes": nodes,
            "cap": cap,
            "cap_rule": self.limits.describe_cap(nodes),
            "limits": self.limits.to_dict(),
        }

    def _refusal(
        self,
        node: str,
        kind: str,
        run_id: int,
        state: BreakerState,
        held: set[str],
        recent: set[str],
        cap: int,
        cluster_nodes: int,
    ) -> str:
        shown = ", ".join(sorted(held)[:10]) + (" ..." if len(held) > 10 else "")
        return (
            f"breaker open: refused to {kind} node {node} (run {run_id}). Tripped at "
            f"{iso_utc(state.tripped_at or 0)} by run {state.tripped_by_run}: {state.reason}. Now {len(held)} nodes "
            f"held by remediate [{shown}], {len(recent)} changed within {format_duration(self.limits.window)}, "
            f"cap {cap} of {cluster_nodes} nodes; {state.refused} refused since the trip. Check the nodes, then "
            "`remediate breaker reset` (or POST /breaker/reset)"
        )


@dataclass(eq=False)
class MemoryLedger:
    """A BreakerLedger in memory (tests, and plans without a store). `transaction` is the LedgerFactory."""

    claims: list[Claim] = field(default_factory=list)
    _state: dict[str, Any] = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.RLock)

    @contextmanager
    def transaction(self) -> Iterator[MemoryLedger]:
        with self._lock:
            saved = (dict(self._state), list(self.claims))
            try:
                yield self
            except BaseException:
                self._state, self.claims = saved
                raise

    def state(self) -> dict[str, Any] | None:
        return dict(self._state) or None

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._state = dict(state)

    def open_claims(self) -> list[Claim]:
        return [c for c in self.claims if c.released_at is None]

    def claims_since(self, since: float) -> list[Claim]:
        return [c for c in self.claims if c.claimed_at >= since]

    def add_claim(self, claim: Claim) -> None:
        self.claims.append(claim)

    def release(self, node: str, *, now: float, reason: str) -> int:
        count = 0
        for index, claim in enumerate(self.claims):
            if claim.node == node and claim.released_at is None:
                self.claims[index] = replace(claim, released_at=now)
                count += 1
        return count


def memory_breaker(limits: BreakerLimits | None = None, clock: Callable[[], float] = time.time) -> CircuitBreaker:
    return CircuitBreaker(MemoryLedger().transaction, limits=limits or BreakerLimits(), clock=clock)


def _window_start(state: BreakerState, now: float, window: float) -> float:
    """Changes count within the window, and only since the last reset: a person checked those before."""
    return max(now - window, state.reset_at or 0.0)


def iso_utc(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def limits_from_settings(breaker: Any) -> BreakerLimits:
    """The breaker limits of its settings section (`remediate.config.settings.BreakerSettings`: the same fields)."""
    return BreakerLimits(**asdict(breaker))
