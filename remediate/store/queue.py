"""The run queue: claim the run at the head of the queue (or a batch of cheap runs), its steps and their
attempts, the lease every progress write checks, a batch's bookkeeping in one transaction, the run's end,
recovery of runs whose executor died, approval, and the queue's depth.

Who calls it: the executor (through `facade.Store`), the HTTP server and the CLI (approve, queue depth).
Every write after the claim starts with the lease check (`RunQueue._check_lease`) in its own transaction.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from remediate import schema as t
from remediate.errors import ClaimLostError, RunStateError, UnknownRunError
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    BatchWrite,
    ClaimedRun,
    PendingOutcome,
    RunEnd,
    RunLease,
    RunningClaim,
    RunStatus,
    StepEnd,
    StepRecord,
    StepStatus,
    batchable_steps,
)
from remediate.store.database import Transactions
from remediate.store.prepared import Prepared
from remediate.store.rows import ALERT_CONTEXT_COLUMNS, MAX_ID, alert_context, dumps, loads

EXECUTOR_STOPPED = "the executor stopped"
"""What stopped a step in flight when recovery requeues its run (its `interrupted` error says it)."""


def worker_identity(replica_name: str | None = None) -> str:
    """Who claims runs and runs their attempts: `<replica name, else the host name>:<pid>`."""
    return f"{replica_name or socket.gethostname()}:{os.getpid()}"


# The statements of the hot paths (claim, step bookkeeping), built once with bind
# parameters: building a Core statement and its cache key costs more than running it on SQLite.
def _candidates_statement(skip_locked: bool) -> sa.Select[tuple[int, int]]:
    """The queue's head: queued runs whose prior run (after_run_id) is final, by priority then id."""
    prior = t.runs.alias("prior")
    prior_unfinished = sa.exists().where(prior.c.id == t.runs.c.after_run_id, prior.c.status.not_in(FINAL_RUN_STATUSES))
    head = (
        sa.select(t.runs.c.id, t.runs.c.priority)
        .where(t.runs.c.status == RunStatus.QUEUED, sa.not_(prior_unfinished))
        .order_by(t.runs.c.priority, t.runs.c.id)  # ix_runs_queue (status, priority, id)
        .limit(sa.bindparam("p_limit", type_=sa.Integer))
    )
    # FOR UPDATE SKIP LOCKED where the dialect has it: concurrent claimers take different runs.
    return head.with_for_update(skip_locked=True) if skip_locked else head


_CANDIDATES = {False: Prepared(_candidates_statement(False)), True: Prepared(_candidates_statement(True))}
# Whether anything is queued at all (ix_runs_queue): read before the claim's write transaction.
_ANY_QUEUED = Prepared(sa.select(t.runs.c.id).where(t.runs.c.status == RunStatus.QUEUED).limit(1))
_now = sa.bindparam("p_now", type_=sa.Float)
_CLAIM = (
    sa.update(t.runs)
    .where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)), t.runs.c.status == RunStatus.QUEUED)
    .values(
        status=RunStatus.RUNNING,
        claimed_by=sa.bindparam("p_worker", type_=sa.String),
        claim_generation=t.runs.c.claim_generation + 1,
        heartbeat_at=_now,
        updated_at=_now,
        started_at=sa.func.coalesce(t.runs.c.started_at, _now),
    )
    .returning(t.runs.c.id, t.runs.c.claim_generation)
)
_SYNC_DECISIONS_OF = (
    sa.update(t.decisions)
    .where(t.decisions.c.run_id.in_(sa.bindparam("p_ids", expanding=True)))
    .values(status=sa.bindparam("p_status", type_=sa.String))
)
_CLAIMED_RUNS = (
    sa.select(t.runs, *ALERT_CONTEXT_COLUMNS)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)))
)
_STEPS_OF_RUNS = (
    sa.select(t.steps)
    .where(t.steps.c.run_id.in_(sa.bindparam("p_ids", expanding=True)))
    .order_by(t.steps.c.run_id, t.steps.c.idx)
)
_CLAIMED_RUN = (
    sa.select(t.runs, *ALERT_CONTEXT_COLUMNS)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(t.runs.c.id == sa.bindparam("p_run_id"))
)
_STEPS_OF = sa.select(t.steps).where(t.steps.c.run_id == sa.bindparam("p_run_id")).order_by(t.steps.c.idx)
_START_ATTEMPT = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"))
    .values(
        status=StepStatus.RUNNING,
        attempts=t.steps.c.attempts + 1,
        started_at=sa.func.coalesce(t.steps.c.started_at, sa.bindparam("p_now", type_=sa.Float)),
    )
    .returning(t.steps.c.attempts)
)
_INSERT_ATTEMPT = sa.insert(t.attempts)
_FINISH_ATTEMPT = (
    sa.update(t.attempts)
    .where(t.attempts.c.step_id == sa.bindparam("p_step_id"), t.attempts.c.number == sa.bindparam("p_number"))
    .values(
        finished_at=sa.bindparam("p_now", type_=sa.Float),
        outcome=sa.bindparam("p_outcome", type_=sa.String),
        error=sa.bindparam("p_error", type_=sa.Text),
    )
)
_UPDATE_STEP = sa.update(t.steps).where(t.steps.c.id == sa.bindparam("p_step_id"))
# The lease check of a progress write; it also refreshes the heartbeat (never backwards, whatever the wall clock).
_CHECK_LEASE = (
    sa.update(t.runs)
    .where(
        t.runs.c.id == sa.bindparam("p_run_id"),
        t.runs.c.claimed_by == sa.bindparam("p_worker", type_=sa.String),
        t.runs.c.claim_generation == sa.bindparam("p_generation", type_=sa.Integer),
        t.runs.c.status == RunStatus.RUNNING,
    )
    .values(
        heartbeat_at=sa.case(
            (
                t.runs.c.heartbeat_at >= sa.bindparam("p_now", type_=sa.Float),
                t.runs.c.heartbeat_at + 0.001,
            ),
            else_=sa.bindparam("p_now", type_=sa.Float),
        )
    )
)
_FINISH_RUN = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("p_run_id"))
    .values(
        status=sa.bindparam("p_status", type_=sa.String),
        finished_at=sa.bindparam("p_now", type_=sa.Float),
        updated_at=sa.bindparam("p_now", type_=sa.Float),
        error=sa.bindparam("p_error", type_=sa.Text),
        claimed_by=None,
    )
)
_SYNC_DECISION_STATUS = (
    sa.update(t.decisions)
    .where(t.decisions.c.run_id == sa.bindparam("p_run_id"))
    .values(status=sa.bindparam("p_status", type_=sa.String))
)


# A batch's statements (RunQueue.record_batch), each run once with one row of parameters per step or run.
_LEASES = sa.select(t.runs.c.id, t.runs.c.claimed_by, t.runs.c.claim_generation).where(
    t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)), t.runs.c.status == RunStatus.RUNNING
)
_HEARTBEATS = (
    sa.update(t.runs)
    .where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)))
    .values(heartbeat_at=sa.case((t.runs.c.heartbeat_at >= _now, t.runs.c.heartbeat_at + 0.001), else_=_now))
)
_BATCH_START_STEP = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"))
    .values(
        status=StepStatus.RUNNING,
        attempts=sa.bindparam("p_number", type_=sa.Integer),
        started_at=sa.func.coalesce(t.steps.c.started_at, _now),
        plan=sa.bindparam("p_plan", type_=sa.Text),
    )
)
_BATCH_END_STEP = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"))
    .values(
        status=sa.bindparam("p_status", type_=sa.String),
        finished_at=_now,
        error=sa.bindparam("p_error", type_=sa.Text),
        # A plan recorded with the attempt's start, and a result, stay unless this end brings its own.
        result=sa.func.coalesce(sa.bindparam("p_result", type_=sa.Text), t.steps.c.result),
        plan=sa.func.coalesce(sa.bindparam("p_plan", type_=sa.Text), t.steps.c.plan),
    )
)
_BATCH_SKIP_STEP = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"), t.steps.c.status == StepStatus.PENDING)
    .values(status=StepStatus.SKIPPED, error=sa.bindparam("p_error", type_=sa.Text), finished_at=_now)
)
_BATCH_INSERT_ATTEMPT = sa.insert(t.attempts).values(
    step_id=sa.bindparam("p_step_id", type_=sa.Integer),
    number=sa.bindparam("p_number", type_=sa.Integer),
    started_at=_now,
    worker=sa.bindparam("p_worker", type_=sa.String),
)
_MARK_RERUNNABLE = (
    sa.update(t.runs).where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True))).values(rerunnable=True)
)

# Compiled once, run on SQLite's own cursor (store.prepared): per row and per statement, SQLAlchemy's bind
# processing and its rendering of an IN list cost more than SQLite's work in a batch's bookkeeping.
_FINISH_ATTEMPTS = Prepared(_FINISH_ATTEMPT)
_END_STEPS = Prepared(_BATCH_END_STEP)
_SKIP_STEPS = Prepared(_BATCH_SKIP_STEP)
_START_STEPS = Prepared(_BATCH_START_STEP)
_INSERT_ATTEMPTS = Prepared(_BATCH_INSERT_ATTEMPT)
_FINISH_RUNS = Prepared(_FINISH_RUN)
_SYNC_DECISIONS = Prepared(_SYNC_DECISION_STATUS)
_CLAIM_IDS = Prepared(_CLAIM)
_SYNC_DECISIONS_OF_IDS = Prepared(_SYNC_DECISIONS_OF)
_CLAIMED_RUNS_OF_IDS = Prepared(_CLAIMED_RUNS)
_STEPS_OF_RUN_IDS = Prepared(_STEPS_OF_RUNS)
_HEARTBEATS_OF_IDS = Prepared(_HEARTBEATS)


def sync_decision_status(conn: sa.Connection, run_id: int, status: RunStatus) -> None:
    """The run's decision row follows its status (so /history?status=failed is one indexed lookup)."""
    conn.execute(_SYNC_DECISION_STATUS, {"p_run_id": run_id, "p_status": status})


def _step_record(r: sa.Row[Any]) -> StepRecord:
    return StepRecord(
        r.id, r.run_id, r.idx, r.name, r.action, r.where, json.loads(r.params), r.timeout, r.retries,
        StepStatus(r.status), r.attempts, bool(r.always), r.error, r.finished_at is not None,
        continue_on_error=bool(r.continue_on_error),
    )  # fmt: skip


class RunQueue:
    """The runs' lifecycle in the database, from queued to finished (or requeued after a crash)."""

    def __init__(self, transactions: Transactions, *, skip_locked: bool) -> None:
        self._tx = transactions
        self._candidates = _CANDIDATES[skip_locked]
        # Where FOR UPDATE exists, a batch's lease check locks its runs until its writes commit.
        self._leases = Prepared(_LEASES.with_for_update() if skip_locked else _LEASES)

    def claim(self, worker: str, now: float) -> ClaimedRun | None:
        """Take the run at the head of the queue for this worker, atomically across processes."""
        claimed = self.claim_runs(worker, now)
        return claimed[0] if claimed else None

    def claim_runs(
        self,
        worker: str,
        now: float,
        *,
        limit: int = 1,
        batchable: Collection[str] = (),
        start: Callable[[list[ClaimedRun]], Sequence[BatchWrite]] | None = None,
    ) -> list[ClaimedRun]:
        """Take the run at the head of the queue (priority, then id) or, when it is a batch's, a batch: those of
        the queue's first `limit` runs that have the head's priority and whose steps are all `batchable` (action
        names), `where: cluster`, and not started yet. A batch's runs come with their steps (ClaimedRun.steps);
        a single run without. One transaction, atomically across processes.

        `start`: called with a batch's runs inside the claim's transaction (it must return at once: it holds
        the write lock), its writes (their first steps' plans and attempt starts) commit with the claim."""
        # An idle executor polls and a busy one asks once more after its last run: when nothing is queued, a
        # read answers, without the write lock (most of an empty claim's cost).
        with self._tx.read() as conn:
            if not _ANY_QUEUED.rows(conn):
                return []
        with self._tx.write() as conn:
            head = self._candidates.rows(conn, {"p_limit": max(1, limit)})
            # A batch keeps to the head's priority: a fresh alert's run is not held up by a storm's in its batch.
            ids = [i for i, priority in head if priority == head[0][1]] if head else []
            if not ids:
                return []
            steps: dict[int, list[StepRecord]] = {}
            batch = False
            if batchable and limit > 1:
                for row in _STEPS_OF_RUN_IDS.rows(conn, {"p_ids": ids}):
                    steps.setdefault(row.run_id, []).append(_step_record(row))
                eligible = [i for i in ids if batchable_steps(steps.get(i, ()), batchable)]
                # The head decides: a batch when it is a batch's run (the others of the window join it).
                batch = bool(eligible) and eligible[0] == ids[0]
                ids = eligible if batch else ids[:1]
            generations = dict(_CLAIM_IDS.rows(conn, {"p_ids": ids, "p_worker": worker, "p_now": now}))
            if not generations:  # pragma: no cover - the candidates were read under the write lock
                return []
            claimed = [i for i in ids if i in generations]
            _SYNC_DECISIONS_OF_IDS.rows(conn, {"p_ids": claimed, "p_status": str(RunStatus.RUNNING)})
            rows = {row.id: row for row in _CLAIMED_RUNS_OF_IDS.rows(conn, {"p_ids": claimed})}
            runs = [
                ClaimedRun(
                    i,
                    rows[i].playbook,
                    rows[i].target,
                    rows[i].phase,
                    rows[i].mode,
                    alert_context(rows[i]),
                    int(generations[i]),
                    worker,
                    rung=rows[i].rung,
                    started_at=rows[i].started_at,
                    steps=tuple(steps[i]) if batch else None,
                )
                for i in claimed
            ]
            if batch and start is not None:
                self._write_batch(conn, start(runs), now)  # claimed just now, in this transaction: all held
        return runs

    def record_batch(self, writes: Sequence[BatchWrite], now: float) -> set[int]:
        """Record every run's `BatchWrite` of a batch in one transaction; returns the ids of the runs whose
        lease was lost (another executor took them over): nothing is written for those, all else is."""
        if not writes:
            return set()
        with self._tx.write() as conn:
            held = self._held(conn, writes)
            mine = [w for w in writes if w.lease.run_id in held]
            if not mine:
                return {w.lease.run_id for w in writes}
            _HEARTBEATS_OF_IDS.rows(conn, {"p_ids": sorted(held), "p_now": now})
            self._write_batch(conn, mine, now)
        return {w.lease.run_id for w in writes} - held

    @staticmethod
    def _write_batch(conn: sa.Connection, mine: Sequence[BatchWrite], now: float) -> None:
        """The writes of a batch's runs whose leases hold, in the caller's transaction."""
        ends = [e for w in mine for e in w.ends]
        _FINISH_ATTEMPTS.many(
            conn,
            [
                {"p_step_id": e.step_id, "p_number": e.attempt, "p_now": now, "p_outcome": str(e.outcome),
                 "p_error": None if e.outcome == AttemptOutcome.SUCCEEDED else e.error}
                for e in ends
                if e.attempt is not None
            ],
        )  # fmt: skip
        _END_STEPS.many(
            conn,
            [
                {"p_step_id": e.step_id, "p_status": str(e.status), "p_now": now, "p_error": e.error,
                 "p_result": None if e.result is None else dumps(e.result),
                 "p_plan": None if e.plan is None else dumps(e.plan)}
                for e in ends
            ],
        )  # fmt: skip
        _SKIP_STEPS.many(conn, [{"p_step_id": i, "p_error": w.skip_reason, "p_now": now} for w in mine for i in w.skip])
        starts = [(w.lease.worker, s) for w in mine for s in w.starts]
        _START_STEPS.many(
            conn,
            [{"p_step_id": s.step_id, "p_number": s.number, "p_now": now, "p_plan": dumps(s.plan)} for _, s in starts],
        )
        _INSERT_ATTEMPTS.many(
            conn,
            [{"p_step_id": s.step_id, "p_number": s.number, "p_now": now, "p_worker": worker} for worker, s in starts],
        )
        run_ends = [w.run_end for w in mine if w.run_end is not None]
        _FINISH_RUNS.many(
            conn,
            [{"p_run_id": e.run_id, "p_status": str(e.status), "p_now": now, "p_error": e.error} for e in run_ends],
        )
        rerunnable = [w.lease.run_id for w in mine if w.rerunnable and w.run_end is not None]
        if rerunnable:
            conn.execute(_MARK_RERUNNABLE, {"p_ids": rerunnable})
        _SYNC_DECISIONS.many(conn, [{"p_run_id": e.run_id, "p_status": str(e.status)} for e in run_ends])

    def _held(self, conn: sa.Connection, writes: Sequence[BatchWrite]) -> set[int]:
        """The runs of `writes` whose lease still holds (locked until the transaction ends where FOR UPDATE is)."""
        leases = {w.lease.run_id: (w.lease.worker, w.lease.generation) for w in writes}
        return {
            row.id
            for row in self._leases.rows(conn, {"p_ids": list(leases)})
            if (row.claimed_by, row.claim_generation) == leases[row.id]
        }

    def steps_of(self, run_id: int) -> list[StepRecord]:
        with self._tx.read() as conn:
            return [_step_record(r) for r in conn.execute(_STEPS_OF, {"p_run_id": run_id})]

    @staticmethod
    def _check_lease(conn: sa.Connection, lease: RunLease | None, now: float) -> None:
        """Raise ClaimLostError (rolling the transaction back) unless `lease` still holds its run."""
        if lease is None:
            return
        params = {"p_run_id": lease.run_id, "p_worker": lease.worker, "p_generation": lease.generation, "p_now": now}
        if conn.execute(_CHECK_LEASE, params).rowcount != 1:
            raise ClaimLostError(
                f"run {lease.run_id} is no longer claimed by {lease.worker} (claim {lease.generation}): "
                "it was recovered or claimed by another executor; this one writes nothing more to it"
            )

    def check_lease(self, lease: RunLease, now: float) -> None:
        """ClaimLostError unless `lease` still holds its run (and refresh its heartbeat)."""
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)

    def start_attempt(self, step_id: int, now: float, *, plan: Any = None, lease: RunLease | None = None) -> int:
        """Record that an attempt of the step starts, before the action runs; returns its number.

        With `plan` (the first attempt), the step's plan is recorded in the same transaction.
        If the executor dies during the attempt, `recover_stale` marks it interrupted.
        """
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)
            if plan is not None:
                conn.execute(_UPDATE_STEP, {"p_step_id": step_id, "plan": dumps(plan)})
            number = conn.execute(_START_ATTEMPT, {"p_step_id": step_id, "p_now": now}).scalar_one()
            worker = None if lease is None else lease.worker
            conn.execute(_INSERT_ATTEMPT, {"step_id": step_id, "number": number, "started_at": now, "worker": worker})
        return int(number)

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
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)
            self._finish_attempt(conn, step_id, number, outcome, error, now)

    def record_plan(self, step_id: int, plan: Any) -> None:
        with self._tx.write() as conn:
            conn.execute(_UPDATE_STEP, {"p_step_id": step_id, "plan": dumps(plan)})

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
    ) -> None:
        """Record the step's outcome, durably, before the next step starts.

        In the same transaction: with `succeeded_attempt`, that attempt is closed as succeeded;
        with `run_end` (the run's last step, or the one that failed it), the run is finished.
        """
        values: dict[str, Any] = {"status": status, "finished_at": now, "error": error}
        if result is not None:
            values["result"] = dumps(result)
        if plan is not None:
            values["plan"] = dumps(plan)
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)
            if succeeded_attempt is not None:
                self._finish_attempt(conn, step_id, succeeded_attempt, AttemptOutcome.SUCCEEDED, None, now)
            conn.execute(_UPDATE_STEP, {"p_step_id": step_id, **values})
            self._skip_steps(conn, skip, skip_reason, now)
            if run_end is not None:
                self._finish_run(conn, run_end.run_id, run_end.status, now, run_end.error, rerunnable=rerunnable)

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
        with self._tx.read() as conn:
            rows = conn.execute(query).all()
        found = []
        for r in rows:
            result = loads(r.result)
            if not isinstance(result, dict) or not isinstance(result.get("pending"), dict) or "late_outcome" in result:
                continue
            context = alert_context(r)
            step = StepRecord(
                r.id, r.run_id, r.idx, r.name, r.action, r.where, json.loads(r.params), r.timeout, r.retries,
                StepStatus(r.status), r.attempts,
            )  # fmt: skip
            run = ClaimedRun(r.run_id, r.playbook, r.target, r.phase, r.mode, context)
            found.append(PendingOutcome(step, run, result["pending"], r.finished_at))
        return found

    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool:
        """Record what became of a pending step: `late_outcome` joins its result, `note` is appended to the
        step's and the run's error. False when another executor settled it first (nothing written)."""
        with self._tx.write() as conn:
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
    ) -> None:
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)
            self._skip_steps(conn, skip, skip_reason, now)
            self._finish_run(conn, run_id, status, now, error, rerunnable=rerunnable)

    def skip_steps(self, step_ids: Sequence[int], reason: str, *, now: float, lease: RunLease | None = None) -> None:
        """Mark steps `skipped` (an earlier step failed), with the reason."""
        with self._tx.write() as conn:
            self._check_lease(conn, lease, now)
            self._skip_steps(conn, step_ids, reason, now)

    @staticmethod
    def _skip_steps(conn: sa.Connection, step_ids: Sequence[int], reason: str, now: float) -> None:
        if step_ids:
            conn.execute(
                sa.update(t.steps)
                .where(t.steps.c.id.in_(list(step_ids)), t.steps.c.status == StepStatus.PENDING)
                .values(status=StepStatus.SKIPPED, error=reason, finished_at=now)
            )

    @staticmethod
    def _finish_attempt(
        conn: sa.Connection, step_id: int, number: int, outcome: AttemptOutcome, error: str | None, now: float
    ) -> None:
        conn.execute(
            _FINISH_ATTEMPT,
            {"p_step_id": step_id, "p_number": number, "p_now": now, "p_outcome": outcome, "p_error": error},
        )

    @staticmethod
    def _finish_run(
        conn: sa.Connection, run_id: int, status: RunStatus, now: float, error: str | None, *, rerunnable: bool = False
    ) -> None:
        conn.execute(_FINISH_RUN, {"p_run_id": run_id, "p_status": status, "p_now": now, "p_error": error})
        if rerunnable:
            conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(rerunnable=True))
        sync_decision_status(conn, run_id, status)

    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None:
        if not run_ids:
            return
        with self._tx.write() as conn:
            # Never backwards: recovery watches the value change, so a wall clock stepped back is no silence.
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id.in_(run_ids), t.runs.c.claimed_by == worker, t.runs.c.status == RunStatus.RUNNING)
                .values(
                    heartbeat_at=sa.case(
                        (t.runs.c.heartbeat_at >= now, t.runs.c.heartbeat_at + 0.001), else_=sa.literal(now)
                    )
                )
            )

    def running_claims(self) -> list[RunningClaim]:
        """The running runs and who holds them (recovery decides which owners are gone)."""
        with self._tx.read() as conn:
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
        with self._tx.write() as conn:
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
                BatchWrite(RunLease(i, by_id[i].claimed_by, by_id[i].generation), ends=(ends[i],))
                for i in still
                if ends and i in ends
            ]
            if kept:
                self._write_batch(conn, kept, now)
            self._requeue(conn, still, now, why)
        return still

    def recover_stale(self, *, now: float, stale_after: float, is_dead: Any) -> list[int]:
        """Requeue runs whose executor died; their in-flight steps become `interrupted`.

        `is_dead(claimed_by) -> bool` says whether an owner is known dead (same host, pid gone),
        otherwise a heartbeat older than `stale_after` decides. The executor then decides,
        per action, whether an interrupted step may run again.
        """
        with self._tx.write() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.id, t.runs.c.claimed_by, t.runs.c.heartbeat_at).where(
                    t.runs.c.status == RunStatus.RUNNING
                )
            ).all()
            stale = [r.id for r in rows if is_dead(r.claimed_by or "") or (r.heartbeat_at or 0) < now - stale_after]
            if not stale:
                return []
            self._requeue(conn, stale, now)
        return stale

    def _requeue(self, conn: sa.Connection, stale: list[int], now: float, why: str = EXECUTOR_STOPPED) -> None:
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

    def queue_depth(self) -> dict[str, int]:
        with self._tx.read() as conn:
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
        with self._tx.read() as conn:
            # ix_runs_status (status, id): the first queued id is the oldest, found without a scan.
            return conn.execute(
                sa.select(t.runs.c.created_at).where(t.runs.c.status == RunStatus.QUEUED).order_by(t.runs.c.id).limit(1)
            ).scalar_one_or_none()

    def approve(self, run_id: int, *, by: str, now: float) -> None:
        if not 0 < run_id <= MAX_ID:
            raise UnknownRunError(f"no run {run_id}")
        with self._tx.write() as conn:
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
