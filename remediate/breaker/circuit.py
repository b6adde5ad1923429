"""The circuit breaker of cluster actions (see remediate.breaker): acquire, release, status and reset, each in one
transaction of its ledger; MemoryLedger keeps one in memory (tests, dry-run, replay)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from remediate.breaker.model import (
    BreakerLimits,
    BreakerOpen,
    BreakerState,
    CapCount,
    Claim,
    LedgerFactory,
    StaleAlert,
    cap_counts,
    is_stale,
    iso_utc,
    stale_reason,
    window_start,
)
from remediate.config.durations import format_duration
from remediate.errors import ActionError
from remediate.runs import UNDONE_BY_HAND


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
        groups: Mapping[str, AbstractSet[str]] | None = None,
        alert_started_at: float | None = None,
    ) -> dict[str, Any]:
        """Claim `node` for a change of `kind` (cordon, taint, drain); raise BreakerOpen or StaleAlert.

        `groups`: name -> the nodes of each group the node is in (the Slurm partitions in scope, named as a
        person reads them: `partition debug`); the fraction holds for each on its own, besides the whole scope.
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
                        ledger.release(claim.node, now=now, reason=UNDONE_BY_HAND)
                claims = ledger.open_claims()
                held = held_now | {c.node for c in claims}
                recent = {c.node for c in ledger.claims_since(window_start(state, now, limits.window))}
                own = any(c.node == node and c.run_id == run_id for c in claims)
                cap = limits.cap(cluster_nodes)

                def counts(held: set[str], recent: set[str]) -> list[CapCount]:
                    return cap_counts(
                        limits, node, held=held, recent=recent, cluster_nodes=cluster_nodes, groups=groups
                    )

                if state.open and not own:
                    state = replace(state, refused=state.refused + 1, last_refused_at=now)
                    refusal = BreakerOpen(
                        self._refusal(node, kind, run_id, state, held, recent, cap, cluster_nodes),
                        status=self._status(state, held, recent, cap),
                    )
                elif own or node in held:
                    if not own:
                        ledger.add_claim(Claim(node, kind, run_id, now))
                elif over := next((c for c in counts(held, recent) if c.over), None):
                    why = over.trip_reason(limits, kind=kind, node=node, run_id=run_id)
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
                if groups:
                    snapshot["groups"] = [c.to_dict() for c in counts(held, recent)[1:]]
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
            recent = {c.node for c in ledger.claims_since(window_start(state, now, self.limits.window))}
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
