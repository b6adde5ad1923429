"""The run queue: the run at the head of the queue and its claim (which carries the first step's attempt
start), the run's progress recorded under its lease (`RunWrite`s: remediate.store.writes), its steps,
the outcomes still pending, approval, and the queue's depth. Leases and recovery: remediate.store.leases.

Who calls it: the executor (`Store.queue`), the HTTP server and the CLI (approve, queue depth).
Every write after the claim starts with the lease check (`writes.check_lease`) in its own transaction.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from remediate.errors import RunStateError, UnknownRunError
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    PendingOutcome,
    RunLease,
    RunStatus,
    RunWrite,
    StepRecord,
    StepStatus,
)
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.rows import ALERT_CONTEXT_COLUMNS, MAX_ID, alert_context, dumps, loads
from remediate.store.writes import check_lease, finish_attempt, sync_decision_status, write_runs


def worker_identity(replica_name: str | None = None) -> str:
    """Who claims runs and runs their attempts: `<replica name, else the host name>:<pid>`."""
    return f"{replica_name or socket.gethostname()}:{os.getpid()}"


# The statements of the hot paths (claim, step bookkeeping), built once with bind parameters: SQLAlchemy
# compiles each once per database (its compiled cache) and runs it with new values every time.
_prior = t.runs.alias("prior")
# The queue's head, with each run's alert: queued runs by priority then id ...
_QUEUE_HEAD = (
    sa.select(t.runs, *ALERT_CONTEXT_COLUMNS)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(
        t.runs.c.status == RunStatus.QUEUED,
        # ... whose prior run (after_run_id: a resolved run waits for its firing run) is final.
        sa.not_(sa.exists().where(_prior.c.id == t.runs.c.after_run_id, _prior.c.status.not_in(FINAL_RUN_STATUSES))),
    )
    .order_by(t.runs.c.priority, t.runs.c.id)  # ix_runs_queue (status, priority, id)
    .limit(sa.bindparam("p_limit", type_=sa.Integer))
)
_now = sa.bindparam("p_now", type_=sa.Float)
# A claim takes the run only in the state its steps were read in (queued, that claim generation): a run
# another executor claimed (and perhaps requeued) since is not taken on a stale reading.
_CLAIM = (
    sa.update(t.runs)
    .where(
        t.runs.c.id == sa.bindparam("p_run_id", type_=sa.Integer),
        t.runs.c.status == RunStatus.QUEUED,
        t.runs.c.claim_generation == sa.bindparam("p_generation", type_=sa.Integer) - 1,
    )
    .values(
        status=RunStatus.RUNNING,
        claimed_by=sa.bindparam("p_worker", type_=sa.String),
        claim_generation=t.runs.c.claim_generation + 1,
        heartbeat_at=_now,
        updated_at=_now,
        started_at=sa.func.coalesce(t.runs.c.started_at, sa.bindparam("p_started", type_=sa.Float)),
    )
)
_STEPS_OF = sa.select(t.steps).where(t.steps.c.run_id == sa.bindparam("p_run_id")).order_by(t.steps.c.idx)
_UPDATE_STEP = sa.update(t.steps).where(t.steps.c.id == sa.bindparam("p_step_id"))


def _step_record(r: sa.Row[Any]) -> StepRecord:
    return StepRecord(
        r.id, r.run_id, r.idx, r.name, r.action, r.where, json.loads(r.params), r.timeout, r.retries,
        StepStatus(r.status), r.attempts, bool(r.always), r.error, r.finished_at is not None,
        continue_on_error=bool(r.continue_on_error), node=r.node,
    )  # fmt: skip


def _outcome(result: str | None) -> str | None:
    loaded = loads(result) if result else None
    outcome = loaded.get("outcome") if isinstance(loaded, dict) else None
    return outcome if isinstance(outcome, str) else None


@dataclass
class RunQueue:
    """The runs' lifecycle in the database, from queued to finished (`Store.queue`); their leases and recovery
    are remediate.store.leases', the statements of their progress writes remediate.store.writes'."""

    tx: Transactions

    def claim(self, worker: str, now: float) -> ClaimedRun | None:
        """Take the run at the head of the queue for this worker, atomically across processes."""
        while (run := self.next_run(worker)) is not None:
            if self.claim_next(run, now):
                return run if run.started_at is not None else replace(run, started_at=now)
        return None

    def next_run(self, worker: str, *, skip: Collection[int] = ()) -> ClaimedRun | None:
        """The run at the head of the queue (priority, then id; `skip`: runs this process has in hand), as it
        will be once `worker` claims it (`claim_next`), with its steps; None when none is queued. A read: the
        executor plans the run's first step before the claim, outside any write transaction."""
        with self.tx.read() as conn:
            head = conn.execute(_QUEUE_HEAD, {"p_limit": len(skip) + 1}).all()
            row = next((r for r in head if r.id not in skip), None)
            if row is None:
                return None
            steps = tuple(_step_record(r) for r in conn.execute(_STEPS_OF, {"p_run_id": row.id}))
        return ClaimedRun(
            row.id, row.playbook, row.target, row.phase, row.mode, alert_context(row), int(row.claim_generation) + 1,
            worker, rung=row.rung, started_at=row.started_at, steps=steps, approved_by=row.approved_by,
        )  # fmt: skip

    def claim_next(self, run: ClaimedRun, now: float, write: RunWrite | None = None) -> bool:
        """Claim `run` (from `next_run`) and record `write` (its first step's attempt start, or its end) in
        one transaction; False, writing nothing, when another executor claimed it since it was read. A run
        claimed the first time starts at `run.started_at` (when its executor took it in hand), else `now`."""
        with self.tx.write() as conn:
            started = now if run.started_at is None else run.started_at
            params = {"p_run_id": run.id, "p_generation": run.generation, "p_worker": run.worker, "p_now": now,
                      "p_started": started}  # fmt: skip
            if conn.execute(_CLAIM, params).rowcount != 1:
                return False
            sync_decision_status(conn, run.id, RunStatus.RUNNING)
            if write is not None:
                write_runs(conn, [write], now)
        return True

    def record(self, write: RunWrite, now: float) -> None:
        """Record `write` in one transaction under its lease (ClaimLostError: the run was taken over)."""
        with self.tx.write() as conn:
            check_lease(conn, write.lease, now)
            write_runs(conn, [write], now)

    def steps_of(self, run_id: int) -> list[StepRecord]:
        """The run's steps with the outcome each one's result names (what a notification reports: a burn-in
        that succeeded as `skipped` is not one that passed)."""
        with self.tx.read() as conn:
            rows = conn.execute(_STEPS_OF, {"p_run_id": run_id}).all()
        return [replace(_step_record(r), outcome=_outcome(r.result)) for r in rows]

    def finish_attempt(
        self,
        step_id: int,
        number: int,
        outcome: AttemptOutcome,
        error: str | None,
        now: float,
        *,
        lease: RunLease | None = None,
    ) -> None:
        with self.tx.write() as conn:
            check_lease(conn, lease, now)
            finish_attempt(conn, step_id, number, outcome, error, now)

    def pending_outcomes(self, since: float, limit: int = 100) -> list[PendingOutcome]:
        """Failed steps that handed a change over and gave up waiting for it (result ``{"pending": ...}``,
        from OutcomePending), finished at or after `since` and not settled yet: Executor.reconcile_pending's work."""
        query = (
            sa.select(
                t.steps,
                t.runs.c.playbook,
                t.runs.c.target,
                t.runs.c.phase,
                t.runs.c.mode,
                t.runs.c.alertname,
                *ALERT_CONTEXT_COLUMNS,
            )
            .join(t.runs, t.runs.c.id == t.steps.c.run_id)
            .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
            .where(t.steps.c.status.in_((StepStatus.FAILED, StepStatus.INTERRUPTED)))
            .where(t.steps.c.finished_at >= since, t.steps.c.result.is_not(None))
            .order_by(t.steps.c.id)
            .limit(limit)
        )
        with self.tx.read() as conn:
            rows = conn.execute(query).all()
        found = []
        for r in rows:
            result = loads(r.result)
            if not isinstance(result, dict) or not isinstance(result.get("pending"), dict) or "late_outcome" in result:
                continue
            context = alert_context(r)
            step = StepRecord(
                r.id, r.run_id, r.idx, r.name, r.action, r.where, json.loads(r.params), r.timeout, r.retries,
                StepStatus(r.status), r.attempts, node=r.node,
            )  # fmt: skip
            run = ClaimedRun(r.run_id, r.playbook, r.target, r.phase, r.mode, context)
            found.append(PendingOutcome(step, run, result["pending"], r.finished_at))
        return found

    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool:
        """Record what became of a pending step: `late_outcome` joins its result, `note` is appended to the
        step's and the run's error. False when another executor settled it first (nothing written)."""
        with self.tx.write() as conn:
            row = conn.execute(
                sa.select(t.steps.c.result, t.steps.c.error, t.steps.c.run_id).where(t.steps.c.id == step_id)
            ).one()
            result = loads(row.result)
            if not isinstance(result, dict) or "late_outcome" in result:
                return False
            result["late_outcome"] = dict(late_outcome)
            conn.execute(
                _UPDATE_STEP,
                {"p_step_id": step_id, "result": dumps(result), "error": f"{row.error or ''}; {note}".lstrip("; ")},
            )
            run_error = conn.execute(sa.select(t.runs.c.error).where(t.runs.c.id == row.run_id)).scalar_one()
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == row.run_id)
                .values(error=f"{run_error or ''}; {note}".lstrip("; "), updated_at=now)
            )
        return True

    def queue_depth(self) -> dict[str, int]:
        with self.tx.read() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.status, sa.func.count())
                .where(t.runs.c.status.in_([RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL]))
                .group_by(t.runs.c.status)
            ).all()
        depth = {RunStatus.QUEUED: 0, RunStatus.RUNNING: 0, RunStatus.AWAITING_APPROVAL: 0}
        depth.update({status: count for status, count in rows})
        return depth

    def oldest_queued_at(self) -> float | None:
        """When the oldest run still queued was created (UNIX seconds); None when none is queued."""
        with self.tx.read() as conn:
            # ix_runs_status (status, id): the first queued id is the oldest, found without a scan.
            return conn.execute(
                sa.select(t.runs.c.created_at).where(t.runs.c.status == RunStatus.QUEUED).order_by(t.runs.c.id).limit(1)
            ).scalar_one_or_none()

    def approve(self, run_id: int, *, by: str, now: float) -> None:
        if not 0 < run_id <= MAX_ID:
            raise UnknownRunError(f"no run {run_id}")
        with self.tx.write() as conn:
            # FOR UPDATE: a second approval (another replica) waits for this one's commit, then reads `queued`.
            status = conn.execute(
                sa.select(t.runs.c.status).where(t.runs.c.id == run_id).with_for_update()
            ).scalar_one_or_none()
            if status is None:
                raise UnknownRunError(f"no run {run_id}")
            if status != RunStatus.AWAITING_APPROVAL:
                raise RunStateError(f"run {run_id} is {status}, not awaiting approval")
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == run_id)
                .values(status=RunStatus.QUEUED, approved_by=by, approved_at=now, updated_at=now)
            )
            sync_decision_status(conn, run_id, RunStatus.QUEUED)
