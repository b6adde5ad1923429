"""A run's progress writes, in the caller's transaction: the lease check that opens each (`check_lease`),
and the statements of a `RunWrite` (`write_runs`): attempts closed and started, steps ended and skipped,
the run's end. Who calls it: the run queue (claims and records, remediate.store.queue) and the leases'
recovery (remediate.store.leases), each in a write transaction of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from remediate.errors import ClaimLostError
from remediate.runs import AttemptOutcome, RunLease, RunStatus, RunWrite, StepStatus
from remediate.store import schema as t
from remediate.store.rows import dumps

_now = sa.bindparam("p_now", type_=sa.Float)
# The statements, built once with bind parameters: SQLAlchemy compiles each once per database (its
# compiled cache) and runs it with new values every time; a RunWrite's are each run once (executemany)
# with one row of parameters per step or run.
_FINISH_ATTEMPT = (
    sa.update(t.attempts)
    .where(t.attempts.c.step_id == sa.bindparam("p_step_id"), t.attempts.c.number == sa.bindparam("p_number"))
    .values(
        finished_at=sa.bindparam("p_now", type_=sa.Float),
        outcome=sa.bindparam("p_outcome", type_=sa.String),
        error=sa.bindparam("p_error", type_=sa.Text),
    )
)
# A heartbeat never goes backwards: recovery watches the value change, so a wall clock stepped back is no silence.
NEXT_HEARTBEAT = sa.case((t.runs.c.heartbeat_at >= _now, t.runs.c.heartbeat_at + 0.001), else_=_now)
# The lease check of a progress write; it also refreshes the heartbeat.
_CHECK_LEASE = (
    sa.update(t.runs)
    .where(
        t.runs.c.id == sa.bindparam("p_run_id"),
        t.runs.c.claimed_by == sa.bindparam("p_worker", type_=sa.String),
        t.runs.c.claim_generation == sa.bindparam("p_generation", type_=sa.Integer),
        t.runs.c.status == RunStatus.RUNNING,
    )
    .values(heartbeat_at=NEXT_HEARTBEAT)
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


def check_lease(conn: sa.Connection, lease: RunLease | None, now: float) -> None:
    """Raise ClaimLostError (rolling the transaction back) unless `lease` still holds its run."""
    if lease is None:
        return
    params = {"p_run_id": lease.run_id, "p_worker": lease.worker, "p_generation": lease.generation, "p_now": now}
    if conn.execute(_CHECK_LEASE, params).rowcount != 1:
        raise ClaimLostError(
            f"run {lease.run_id} is no longer claimed by {lease.worker} (claim {lease.generation}): "
            "it was recovered or claimed by another executor; this one writes nothing more to it"
        )


def write_runs(conn: sa.Connection, writes: Sequence[RunWrite], now: float) -> None:
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


def finish_attempt(
    conn: sa.Connection, step_id: int, number: int, outcome: AttemptOutcome, error: str | None, now: float
) -> None:
    """Close attempt `number` of a step as it ended."""
    conn.execute(
        _FINISH_ATTEMPT,
        {"p_step_id": step_id, "p_number": number, "p_now": now, "p_outcome": outcome, "p_error": error},
    )
