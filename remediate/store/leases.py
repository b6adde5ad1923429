"""The leases of running runs: their heartbeats, the check that a lease still holds, and recovery, which
requeues the runs whose executor died (or handed them back) with their in-flight steps `interrupted`.

Who calls it: the executor (remediate.executor.leases) through `Store.leases`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from remediate.runs import AttemptOutcome, RunLease, RunningClaim, RunStatus, RunWrite, StepEnd, StepStatus
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.writes import NEXT_HEARTBEAT, sync_decision_status, write_runs

EXECUTOR_STOPPED = "the executor stopped"
"""What stopped a step in flight when recovery requeues its run (its `interrupted` error says it)."""


@dataclass
class Leases:
    """Heartbeats, lease checks and recovery of a store's running runs (`Store.leases`)."""

    tx: Transactions

    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None:
        if not run_ids:
            return
        with self.tx.write() as conn:
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id.in_(run_ids), t.runs.c.claimed_by == worker, t.runs.c.status == RunStatus.RUNNING)
                .values(heartbeat_at=NEXT_HEARTBEAT),
                {"p_now": now},
            )

    def running_claims(self) -> list[RunningClaim]:
        """The running runs and who holds them (recovery decides which owners are gone)."""
        with self.tx.read() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.id, t.runs.c.claimed_by, t.runs.c.claim_generation, t.runs.c.heartbeat_at).where(
                    t.runs.c.status == RunStatus.RUNNING
                )
            ).all()
        return [RunningClaim(r.id, r.claimed_by or "", int(r.claim_generation), r.heartbeat_at) for r in rows]

    def requeue_claims(
        self,
        claims: Sequence[RunningClaim],
        *,
        now: float,
        own: bool = False,
        ends: Mapping[int, StepEnd] | None = None,
        why: str = EXECUTOR_STOPPED,
    ) -> list[int]:
        """Requeue these runs, each only if it is still held by the same claim with the same heartbeat (an
        owner that renewed its lease meanwhile keeps it); their in-flight steps become `interrupted` (`why`:
        what stopped them, in their error). `own`: the owner hands back its own claims (after a store outage):
        its heartbeats do not count; `ends` (run id -> step end): the ends of steps whose action ran but whose
        end the store failed to record, written first (the run goes on from the next step).
        Returns the ids requeued."""
        if not claims:
            return []
        with self.tx.write() as conn:
            still = [
                c.id
                for c in claims
                if conn.execute(
                    sa.select(t.runs.c.id).where(
                        t.runs.c.id == c.id,
                        t.runs.c.status == RunStatus.RUNNING,
                        t.runs.c.claim_generation == c.generation,
                        # The heartbeat recovery watched: one renewed since is an owner alive after all.
                        sa.true()
                        if own
                        else t.runs.c.heartbeat_at.is_(None)
                        if c.heartbeat_at is None
                        else t.runs.c.heartbeat_at == c.heartbeat_at,
                    )
                ).first()
            ]
            by_id = {c.id: c for c in claims}
            kept = [
                RunWrite(RunLease(i, by_id[i].claimed_by, by_id[i].generation), ends=(ends[i],))
                for i in still
                if ends and i in ends
            ]
            if kept:
                write_runs(conn, kept, now)
            _requeue(conn, still, now, why)
        return still


def _requeue(conn: sa.Connection, stale: list[int], now: float, why: str = EXECUTOR_STOPPED) -> None:
    if stale:
        conn.execute(
            sa.update(t.steps)
            .where(t.steps.c.run_id.in_(stale), t.steps.c.status == StepStatus.RUNNING)
            .values(status=StepStatus.INTERRUPTED, error=f"{why} while this step was running")
        )
        conn.execute(
            sa.update(t.attempts)
            .where(
                t.attempts.c.finished_at.is_(None),
                t.attempts.c.step_id.in_(sa.select(t.steps.c.id).where(t.steps.c.run_id.in_(stale))),
            )
            .values(
                finished_at=now,
                outcome=AttemptOutcome.INTERRUPTED,
                error=f"{why} during this attempt",
            )
        )
        conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id.in_(stale))
            .values(status=RunStatus.QUEUED, claimed_by=None, updated_at=now)
        )
        for run_id in stale:
            sync_decision_status(conn, run_id, RunStatus.QUEUED)
