"""GuardReads: the facts the guards judge from, as a Protocol, because two real readers provide them.

`GuardReader` (remediate.store.ingest) reads them from the database in one transaction (the ingest's
`IngestWriter` is one); `EmptyGuardReader` answers for a database that does not exist yet (a dry run
against an empty history). The rest of the store has one implementation, `Store`, whatever the database:
what differs between SQLite and PostgreSQL is behind `Dialect`, so callers type against `Store` itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from remediate.config.promotion import WaveEvidence
from remediate.runs import LadderState
from remediate.store.pause import PauseState


class GuardReads(Protocol):
    """The facts the guards judge from (remediate.judging.engine.Engine.judge), read in one transaction."""

    def pause_state(self) -> PauseState: ...
    def breaker_state(self) -> dict[str, Any] | None: ...
    def existing_runs(self, keys: Iterable[str]) -> dict[str, tuple[int, str]]: ...
    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]: ...
    def target_history(
        self, playbook: str, guard_key: str, since: float, rung: int | None = None
    ) -> tuple[float | None, int]: ...
    def ladder(self, playbook: str, guard_key: str) -> LadderState | None: ...
    def acted_runs(self, playbook: str, target: str, since: float) -> int: ...
    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]: ...
    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]: ...
    def wave_evidence(
        self, playbook: str, version: str, wave: str, *, since: float, after: int, undoes: bool
    ) -> WaveEvidence: ...
