"""A node's latest re-admission gate: the newest run of that target with a gate step (`gpu.health`), and that
run's gate and burn-in steps, for the node page.

The action names and the playbooks that have a gate step come from the caller (the store knows no actions and
no playbooks). One statement on both databases: the run's id from the node's decisions, newest first
(ix_decisions_target: target, id; or ix_decisions_target_playbook), joined to their steps by run
(uq_steps_run_idx: run_id, idx) for the gate playbooks' decisions only, then that run's chosen steps by the
same index. No index holds a step's action, and none is added for this page: the walk reads each step of the
gate playbooks' runs on the node newer than its latest gate (in the shipped ladder, the firing runs since its
last resolve: a few). Measured on bench/history.py's store, for its busiest node whose only gate is its oldest
run: 1M runs (one step each), 39,000 decisions on that node: 123 ms over every playbook's runs, 36 ms over
the gate playbook's (11,000); 100k runs with nine steps each: 55 ms, 13 ms. A gate of a playbook no longer
loaded is not looked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from remediate.store import schema as t
from remediate.store.rows import loads


class GateStep(NamedTuple):
    """One gate or burn-in step of the run, with what it planned and found (None: not yet)."""

    index: int
    name: str
    action: str
    status: str
    plan: Any
    result: Any
    error: str | None
    started_at: float | None
    finished_at: float | None


class GateRun(NamedTuple):
    """The run that gated the node last, and its gate and burn-in steps in their order."""

    run_id: int
    playbook: str
    phase: str
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    steps: list[GateStep]


def latest_gate(
    conn: sa.Connection, target: str, gate: str, others: Sequence[str] = (), *, playbooks: Sequence[str]
) -> GateRun | None:
    """The newest run of `playbooks` on `target` with a step of action `gate`: its steps of `gate` and of
    `others` (the burn-ins); None when no such run has one (or `playbooks` is empty)."""
    if not playbooks:
        return None
    d, s, r = t.decisions, t.steps, t.runs
    # Only the decision that made a run names it (a duplicate names none), so the node's decisions newest first
    # are its runs newest first: the walk stops at the first with a gate step.
    newest = (
        sa.select(d.c.run_id)
        .join(s, s.c.run_id == d.c.run_id)
        .where(d.c.target == target, d.c.playbook.in_(sorted(set(playbooks))), s.c.action == gate)
        .order_by(d.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    columns = (
        r.c.id.label("run_id"), r.c.playbook, r.c.phase, r.c.status.label("run_status"), r.c.created_at,
        r.c.started_at.label("run_started_at"), r.c.finished_at.label("run_finished_at"),
        s.c.idx, s.c.name, s.c.action, s.c.status, s.c.plan, s.c.result, s.c.error, s.c.started_at, s.c.finished_at,
    )  # fmt: skip
    rows = conn.execute(
        sa.select(*columns)
        .join(s, s.c.run_id == r.c.id)
        .where(r.c.id == newest, s.c.action.in_([gate, *others]))
        .order_by(s.c.idx)
    ).all()
    if not rows:
        return None
    first = rows[0]
    return GateRun(
        first.run_id, first.playbook, first.phase, first.run_status, first.created_at, first.run_started_at,
        first.run_finished_at,
        [GateStep(row.idx, row.name, row.action, row.status, loads(row.plan), loads(row.result), row.error,
                  row.started_at, row.finished_at) for row in rows],
    )  # fmt: skip
