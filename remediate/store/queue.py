"""The run queue: the run at the head of the queue and its claim (which carries the first step's attempt
start), its steps and their attempts, the lease every progress write checks, the run's end, recovery of runs
whose executor died, approval, and the queue's depth.

Who calls it: the executor (through `facade.Store`), the HTTP server and the CLI (approve, queue depth).
Every write after the claim starts with the lease check (`RunQueue._check_lease`) in its own transaction.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from remediate import schema as t
from remediate.errors import ClaimLostError, RunStateError, UnknownRunError
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    PendingOutcome,
    RunLease,
    RunningClaim,
    RunStatus,
    RunWrite,
    StepEnd,
    StepRecord,
    StepStatus,
)
from remediate.store.database import Transactions
from remediate.store.rows import ALERT_CONTEXT_COLUMNS, MAX_ID, alert_context, dumps, loads

EXECUTOR_STOPPED = "the executor stopped"
"""What stopped a step in flight when recovery requeues its run (its `interrupted` error says it)."""


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

# A RunWrite's statements (RunQueue.record, RunQueue.claim_next), each run once with one row of parameters
# per step or run.
_WRITE_START_STEP = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"))
    .values(
        status=StepStatus.RUNNING,
        attempts=sa.bindparam("p_number", type_=sa.Integer),
        started_at=sa.func.coalesce(t.steps.c.started_at, _now),
        # The first attempt brings the plan; a retry keeps it.
        plan=sa.func.coalesce(sa.bindparam("p_plan", type_=sa.Text), t.steps.c.plan),
    )
)
_WRITE_END_STEP = (
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
_WRITE_SKIP_STEP = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"), t.steps.c.status == StepStatus.PENDING)
    .values(status=StepStatus.SKIPPED, error=sa.bindparam("p_error", type_=sa.Text), finished_at=_now)
)
_WRITE_INSERT_ATTEMPT = sa.insert(t.attempts).values(
    step_id=sa.bindparam("p_step_id", type_=sa.Integer),
    number=sa.bindparam("p_number", type_=sa.Integer),
    started_at=_now,
    worker=sa.bindparam("p_worker", type_=sa.String),
)
_MARK_RERUNNABLE = (
    sa.update(t.runs).where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True))).values(rerunnable=True)
)


def _execute(conn: sa.Connection, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
    """Run `statement` once per row of parameters (executemany); nothing when there is none."""
    if rows:
        conn.execute(statement, rows)


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

    def __init__(self, transactions: Transactions) -> None:
        self._tx = transactions

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
        with self._tx.read() as conn:
            head = conn.execute(_QUEUE_HEAD, {"p_limit": len(skip) + 1}).all()
            row = next((r for r in head if r.id not in skip), None)
            if row is None:
                return None
            steps = tuple(_step_record(r) for r in conn.execute(_STEPS_OF, {"p_run_id": row.id}))
        return ClaimedRun(
            row.id, row.playbook, row.target, row.phase, row.mode, alert_context(row), int(row.claim_generation) + 1,
            worker, rung=row.rung, started_at=row.started_at, steps=steps,
        )  # fmt: skip

    def claim_next(self, run: ClaimedRun, now: float, write: RunWrite | None = None) -> bool:
        """Claim `run` (from `next_run`) and record `write` (its first step's attempt start, or its end) in
        one transaction; False, writing nothing, when another executor claimed it since it was read. A run
        claimed the first time starts at `run.started_at` (when its executor took it in hand), else `now`."""
        with self._tx.write() as conn:
            started = now if run.started_at is None else run.started_at
            params = {"p_run_id": run.id, "p_generation": run.generation, "p_worker": run.worker, "p_now": now,
                      "p_started": started}  # fmt: skip
            if conn.execute(_CLAIM, params).rowcount != 1:
                return False
            sync_decision_status(conn, run.id, RunStatus.RUNNING)
            if write is not None:
                self._write(conn, [write], now)
        return True

    def record(self, write: RunWrite, now: float) -> None:
        """Record `write` in one transaction under its lease (ClaimLostError: the run was taken over)."""
        with self._tx.write() as conn:
            self._check_lease(conn, write.lease, now)
            self._write(conn, [write], now)

    @staticmethod
    def _write(conn: sa.Connection, writes: Sequence[RunWrite], now: float) -> None:
        """The `writes` of runs whose leases hold, in the caller's transaction."""
        ends = [e for w in writes for e in w.ends]
        _execute(
            conn,
            _FINISH_ATTEMPT,
            [
                {"p_step_id": e.step_id, "p_number": e.attempt, "p_now": now, "p_outcome": str(e.outcome),
                 "p_error": None if e.outcome == AttemptOutcome.SUCCEEDED else e.error}
                for e in ends
                if e.attempt is not None
            ],
        )  # fmt: skip
        _execute(
            conn,
            _WRITE_END_STEP,
            [
                {"p_step_id": e.step_id, "p_status": str(e.status), "p_now": now, "p_error": e.error,
                 "p_result": None if e.result is None else dumps(e.result),
                 "p_plan": None if e.plan is None else dumps(e.plan)}
                for e in ends
            ],
        )  # fmt: skip
        skips = [{"p_step_id": i, "p_error": w.skip_reason, "p_now": now} for w in writes for i in w.skip]
        _execute(conn, _WRITE_SKIP_STEP, skips)
        starts = [(w.lease.worker, s) for w in writes for s in w.starts]
        _execute(
            conn,
            _WRITE_START_STEP,
            [{"p_step_id": s.step_id, "p_number": s.number, "p_now": now,
              "p_plan": None if s.plan is None else dumps(s.plan)} for _, s in starts],
        )  # fmt: skip
        _execute(
            conn,
            _WRITE_INSERT_ATTEMPT,
            [{"p_step_id": s.step_id, "p_number": s.number, "p_now": now, "p_worker": worker} for worker, s in starts],
        )
        run_ends = [w.run_end for w in writes if w.run_end is not None]
        _execute(
            conn,
            _FINISH_RUN,
            [{"p_run_id": e.run_id, "p_status": str(e.status), "p_now": now, "p_error": e.error} for e in run_ends],
        )
        rerunnable = [w.lease.run_id for w in writes if w.rerunnable and w.run_end is not None]
        if rerunnable:
            conn.execute(_MARK_RERUNNABLE, {"p_ids": rerunnable})
        _execute(conn, _SYNC_DECISION_STATUS, [{"p_run_id": e.run_id, "p_status": str(e.status)} for e in run_ends])

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

    @staticmethod
    def _finish_attempt(
        conn: sa.Connection, step_id: int, number: int, outcome: AttemptOutcome, error: str | None, now: float
    ) -> None:
        conn.execute(
            _FINISH_ATTEMPT,
            {"p_step_id": step_id, "p_number": number, "p_now": now, "p_outcome": outcome, "p_error": error},
        )

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
                RunWrite(RunLease(i, by_id[i].claimed_by, by_id[i].generation), ends=(ends[i],))
                for i in still
                if ends and i in ends
            ]
            if kept:
                self._write(conn, kept, now)
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
