"""The store as its users need it: what the engine and the executor call, as Protocols.

Why Protocols: the engine and the executor depend on these shapes, not on one backend. The SQLite
`Store` (remediate.store) satisfies them, and so does `InMemoryStore` (remediate.store.inmemory),
the fake their unit tests run on; tests/unit/store/test_contract.py runs one set of behaviours
against both so the fake cannot drift from the real thing. Names and signatures are the real
store's: a method added here must exist there with the same meaning.

The breaker's ledger and the action memory are described structurally here, not imported: the
store knows no breaker logic and no actions (import-linter's "store" contract).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from remediate.runs import (
    AttemptOutcome,
    BatchWrite,
    ClaimedRun,
    LadderState,
    PendingOutcome,
    RunEnd,
    RunLease,
    RunningClaim,
    RunStatus,
    StepEnd,
    StepRecord,
    StepStatus,
)
from remediate.store.announcements import AwaitingRun
from remediate.store.pause import PauseState
from remediate.store.queue import EXECUTOR_STOPPED


class GuardReads(Protocol):
    """The facts the guards judge from (remediate.engine.Engine.judge), read in one transaction."""

    def pause_state(self) -> PauseState: ...
    def breaker_state(self) -> dict[str, Any] | None: ...
    def existing_runs(self, keys: Iterable[str]) -> dict[str, tuple[int, str]]: ...
    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]: ...
    def target_history(
        self, playbook: str, guard_key: str, since: float, rung: int | None = None
    ) -> tuple[float | None, int]: ...
    def ladder(self, playbook: str, guard_key: str) -> LadderState | None: ...
    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]: ...
    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]: ...


class IngestWrites(GuardReads, Protocol):
    """One notification's writes (Engine.ingest): all of them commit together, or none does.

    A run whose dedupe key is taken raises remediate.errors.StoreConflict (the transaction is rolled back).
    """

    def lock_guards(self, names: Iterable[str]) -> None: ...

    def insert_notification(
        self, *, received_at: float, receiver: str, status: str, group_key: str, alert_count: int, raw: str
    ) -> int: ...
    def insert_alerts(self, rows: Sequence[Mapping[str, Any]]) -> list[int]: ...
    def insert_runs(self, rows: Sequence[Mapping[str, Any]]) -> list[int]: ...
    def insert_steps(self, rows: Sequence[Mapping[str, Any]]) -> list[int]: ...
    def insert_decisions(self, rows: Sequence[Mapping[str, Any]]) -> list[int]: ...
    def release_dedupe_key(self, run_id: int) -> None: ...
    def mark_superseded(self, run_id: int, by_run: int, now: float) -> None: ...
    def cancel_awaiting(self, run_id: int, reason: str, now: float) -> bool: ...
    def save_ladder(self, state: LadderState) -> None: ...


class EngineStore(Protocol):
    """What remediate.engine.Engine needs of a store."""

    def writer(self) -> AbstractContextManager[IngestWrites]: ...
    def guard_reader(self) -> AbstractContextManager[GuardReads]: ...
    def pause_state(self) -> PauseState: ...


class ClaimRowLike(Protocol):
    """A breaker claim as the ledger hands it back (the fields of remediate.breaker.ClaimRow)."""

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


class BreakerRowsLike(Protocol):
    """The circuit breaker's rows (what remediate.breaker.BreakerLedger reads and writes)."""

    def state(self) -> dict[str, Any] | None: ...
    def save_state(self, state: Mapping[str, Any]) -> None: ...
    def open_claims(self) -> Sequence[ClaimRowLike]: ...
    def claims_since(self, since: float) -> Sequence[ClaimRowLike]: ...
    def add_claim(self, claim: ClaimRowLike) -> None: ...
    def release(self, node: str, *, now: float, reason: str) -> int: ...


class MemoryLike(Protocol):
    """What actions remember between runs (remediate.actions.base.ActionMemory)."""

    def recall(self, key: str) -> dict[str, Any] | None: ...
    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None: ...
    def forget(self, key: str) -> None: ...


class ExecutorStore(Protocol):
    """What remediate.executor.Executor (and its recovery) needs of a store: the durable run queue."""

    def claim_run(self, worker: str, now: float) -> ClaimedRun | None: ...
    def claim_runs(
        self,
        worker: str,
        now: float,
        *,
        limit: int = 1,
        batchable: Collection[str] = (),
        start: Callable[[list[ClaimedRun]], Sequence[BatchWrite]] | None = None,
    ) -> list[ClaimedRun]: ...
    def record_batch(self, writes: Sequence[BatchWrite], now: float) -> set[int]: ...
    def steps_of(self, run_id: int) -> list[StepRecord]: ...
    def check_lease(self, lease: RunLease, now: float) -> None: ...
    def start_attempt(self, step_id: int, now: float, *, plan: Any = None, lease: RunLease | None = None) -> int: ...
    def finish_attempt(
        self,
        step_id: int,
        number: int,
        outcome: AttemptOutcome,
        error: str | None,
        now: float,
        *,
        lease: RunLease | None = None,
    ) -> None: ...
    def record_plan(self, step_id: int, plan: Any) -> None: ...
    def finish_step(
        self,
        step_id: int,
        status: StepStatus,
        *,
        now: float,
        result: Any = None,
        error: str | None = None,
        plan: Any = None,
        succeeded_attempt: int | None = None,
        run_end: RunEnd | None = None,
        lease: RunLease | None = None,
        skip: Sequence[int] = (),
        skip_reason: str = "",
        rerunnable: bool = False,
    ) -> None: ...
    def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        *,
        now: float,
        error: str | None = None,
        lease: RunLease | None = None,
        skip: Sequence[int] = (),
        skip_reason: str = "",
        rerunnable: bool = False,
    ) -> None: ...
    def skip_steps(
        self, step_ids: Sequence[int], reason: str, *, now: float, lease: RunLease | None = None
    ) -> None: ...
    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None: ...
    def running_claims(self) -> list[RunningClaim]: ...
    def requeue_claims(
        self,
        claims: Sequence[RunningClaim],
        *,
        now: float,
        own: bool = False,
        ends: Mapping[int, StepEnd] | None = None,
        why: str = EXECUTOR_STOPPED,
    ) -> list[int]: ...
    def recover_stale(self, *, now: float, stale_after: float, is_dead: Callable[[str], bool]) -> list[int]: ...
    def pending_outcomes(self, since: float, limit: int = 100) -> list[PendingOutcome]: ...
    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool: ...
    def memory(self) -> MemoryLike: ...
    def breaker_ledger(self) -> AbstractContextManager[BreakerRowsLike]: ...
    def breaker_view(self) -> AbstractContextManager[BreakerRowsLike]: ...


class AnnouncerStore(Protocol):
    """What the announcer of runs awaiting approval needs (remediate.announce)."""

    def take_announcement(self, now: float, actions: Sequence[str]) -> AwaitingRun | None: ...
    def record_announcement(self, run_id: int, *, error: str | None) -> None: ...
