"""Reading the history: a page of decisions (newest first, by cursor), one run in detail, the table counts.

The answers are typed rows, not the HTTP API's JSON: `remediate.history.api` turns them into the shapes
of /history and /runs/<id>, which the CLI prints too. The rows are NamedTuples: a page builds a hundred,
and a frozen dataclass costs several times more to build (bench/history.py measured it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from remediate.errors import UnknownRunError
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.decision_time import time_conditions
from remediate.store.dialect import Dialect
from remediate.store.gate_history import GateRun, latest_gate
from remediate.store.repeat_offenders import RepeatOffender, RepeatRule, read_repeat_offenders
from remediate.store.report import Report, ReportQuery, build_report, read_report_rows
from remediate.store.rows import MAX_ID, loads


@dataclass(frozen=True)
class HistoryQuery:
    playbook: str | None = None
    alertname: str | None = None
    target: str | None = None
    status: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 50
    cursor: str | None = None
    search: str | None = None
    """Text that the alertname, the target (node), the playbook or a label or annotation of the alert (a GPU's
    UUID) contains, in any case: one search box over all of them. Unlike the exact filters no index serves
    it: a rare text reads back through the history until a page is full (the pages' search; the filters
    stay the fast way)."""


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"d:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = text.partition(":")
        if kind != "d":
            raise ValueError(cursor)
        last_id = int(number)
        if not 0 <= last_id <= MAX_ID:
            raise ValueError(cursor)
        return last_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid cursor (pass back the next_cursor of a previous page)") from exc


class RunSummary(NamedTuple):
    """The run of a history entry, as far as the history shows it."""

    id: int
    phase: str
    mode: str
    status: str
    started_at: float | None
    finished_at: float | None
    error: str | None
    rung: int | None = None
    """The escalation ladder's rung (1-based) the run ran; None for a playbook without a ladder."""


class HistoryEntry(NamedTuple):
    """One decision of the audit history; `status` is its run's while a run exists, else the decision."""

    id: int
    time: float
    alertname: str
    fingerprint: str
    alert_status: str
    playbook: str | None
    target: str | None
    decision: str
    reason: str | None
    status: str
    run_id: int | None
    run: RunSummary | None
    notification_reason: str | None = None
    """Why AlertManager sent the decision's notification (0.32+: "repeat interval elapsed", ...;
    remediate.intake.reason); None when it did not say (older AlertManagers, notifications before v14)."""


class DecisionSummary(NamedTuple):
    decision: str
    reason: str | None


class AlertDetail(NamedTuple):
    id: int
    notification_id: int
    fingerprint: str
    status: str
    starts_at: str
    ends_at: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    generator_url: str


class AttemptDetail(NamedTuple):
    """An attempt as GET /runs/<id> shows it: its fields are the API's keys, in their order."""

    number: int
    started_at: float
    finished_at: float | None
    outcome: str | None
    error: str | None
    ran_on: str | None = None
    """The executor that ran it (`<replica>:<pid>`); None for attempts recorded before schema version 6."""


class StepDetail(NamedTuple):
    """A step as GET /runs/<id> shows it: its fields are the API's keys, in their order (`attempts` as dicts)."""

    index: int
    name: str
    action: str
    where: str
    params: Any
    status: str
    plan: Any
    result: Any
    error: str | None
    attempts: list[AttemptDetail]
    timeout: float
    retries: int
    always: bool
    continue_on_error: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    node: str | None = None
    """The node a `run_on` step runs on (resolved when the run was created); None: the run's target."""


class RunDetail(NamedTuple):
    """A run as GET /runs/<id> shows it: its fields up to `superseded_by` are the API's first keys, in their
    order (history_api.run_json)."""

    id: int
    playbook: str
    alertname: str
    target: str
    phase: str
    mode: str
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    approved_by: str | None
    approved_at: float | None
    announced_at: float | None
    """When the chat message that the run awaits approval was sent (remediate.executor.announce); None: not
    announced."""
    announce_error: str | None
    """Why that message was not (or not surely) sent; None when it was, or when none was due."""
    error: str | None
    rerunnable: bool
    superseded_by: int | None
    rung: int | None
    """The escalation ladder's rung (1-based) the run ran; None for a playbook without a ladder."""
    decision: DecisionSummary | None
    alert: AlertDetail
    steps: list[StepDetail]
    playbook_version: str | None = None
    """The content hash of its playbook when judged (Playbook.version); None for runs stored before."""
    wave: str | None = None
    """The one rollout wave its node was in when judged; None in none, two or an unknown one."""


# The columns a RunDetail (an AlertDetail) takes as they are stored.
_RUN_DETAIL_COLUMNS = (
    "id", "playbook", "alertname", "target", "phase", "mode", "status", "created_at", "started_at", "finished_at",
    "approved_by", "approved_at", "error", "superseded_by", "rung", "announced_at", "announce_error",
    "playbook_version", "wave",
)  # fmt: skip
_ALERT_DETAIL_COLUMNS = ("id", "notification_id", "fingerprint", "status", "starts_at", "ends_at", "generator_url")


def history_page(
    conn: sa.Connection, query: HistoryQuery, *, time_follows_id: bool = False
) -> tuple[list[HistoryEntry], str | None]:
    """The page of entries `query` asks for, newest first, and the cursor of the next page (None at the end).

    `time_follows_id`: the database's decision times never decrease with the id (Dialect.decision_time_
    follows_id), so `since`/`until` are id bounds (store.decision_time.time_conditions)."""
    d = t.decisions
    conditions = []
    for column, value in (
        (d.c.playbook, query.playbook),
        (d.c.alertname, query.alertname),
        (d.c.target, query.target),
        (d.c.status, query.status),
    ):
        if value is not None:
            conditions.append(column == value)
    if query.search:
        needle = query.search.lower()
        a = t.alerts.c
        # Any label or annotation value of the decision's alert too (a GPU's UUID, an XID): searched in their
        # stored JSON text, so a key matches as well; one alert row per decision (its primary key).
        in_alert = sa.exists().where(
            a.id == d.c.alert_id,
            sa.or_(*(sa.func.lower(c).contains(needle, autoescape=True) for c in (a.labels, a.annotations))),
        )
        conditions.append(
            sa.or_(
                *(
                    sa.func.lower(c).contains(needle, autoescape=True)
                    for c in (d.c.alertname, d.c.target, d.c.playbook)
                ),
                in_alert,
            )
        )
    conditions.extend(time_conditions(query.since, query.until, follows_id=time_follows_id))
    if query.cursor:
        conditions.append(d.c.id < decode_cursor(query.cursor))
    # The page's ids first, from an index alone; then read and join only those rows. In one
    # statement, a since/until window made SQLite read and join every row of the window before
    # sorting by id (80 ms for a 7-day window of a 1M-run store; 10 ms this way: bench/history.py).
    # With the time bounds as id bounds, the ids come from one range of the primary key or of a
    # (column, id) index, newest first: a page's worth of index entries, wherever the window lies.
    page = sa.select(d.c.id).where(*conditions).order_by(d.c.id.desc()).limit(query.limit + 1)
    statement = (
        sa.select(
            d,
            t.runs.c.phase,
            t.runs.c.mode,
            t.runs.c.started_at,
            t.runs.c.finished_at,
            t.runs.c.error.label("run_error"),
            t.runs.c.rung,
            t.notifications.c.notification_reason,
        )
        .outerjoin(t.runs, t.runs.c.id == d.c.run_id)
        # By primary key, the page's rows only: a notification's reason is its decisions' (AlertManager's).
        .join(t.notifications, t.notifications.c.id == d.c.notification_id)
        .where(d.c.id.in_(page.scalar_subquery()))
        .order_by(d.c.id.desc())
    )
    rows = conn.execute(statement).all()
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    entries = [
        HistoryEntry(
            r.id,
            r.created_at,
            r.alertname,
            r.fingerprint,
            r.alert_status,
            r.playbook,
            r.target,
            r.decision,
            r.reason,
            r.status,
            r.run_id,
            None
            if r.run_id is None
            else RunSummary(r.run_id, r.phase, r.mode, r.status, r.started_at, r.finished_at, r.run_error, r.rung),
            r.notification_reason,
        )
        for r in rows
    ]
    return entries, (encode_cursor(rows[-1].id) if more and rows else None)


def run_detail(conn: sa.Connection, run_id: int) -> RunDetail:
    if not 0 < run_id <= MAX_ID:
        raise UnknownRunError(f"no run {run_id}")
    run = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).one_or_none()
    if run is None:
        raise UnknownRunError(f"no run {run_id}")
    alert = conn.execute(sa.select(t.alerts).where(t.alerts.c.id == run.alert_id)).one()
    step_rows = conn.execute(sa.select(t.steps).where(t.steps.c.run_id == run_id).order_by(t.steps.c.idx)).all()
    attempt_rows = conn.execute(
        sa.select(t.attempts)
        .where(t.attempts.c.step_id.in_([s.id for s in step_rows]))
        .order_by(t.attempts.c.step_id, t.attempts.c.number)
    ).all()
    decision = conn.execute(sa.select(t.decisions).where(t.decisions.c.run_id == run_id)).first()
    attempts_by_step: dict[int, list[AttemptDetail]] = {}
    for a in attempt_rows:
        attempts_by_step.setdefault(a.step_id, []).append(
            AttemptDetail(a.number, a.started_at, a.finished_at, a.outcome, a.error, a.worker)
        )
    return RunDetail(
        **{c: run._mapping[c] for c in _RUN_DETAIL_COLUMNS},
        rerunnable=bool(run.rerunnable),
        decision=None if decision is None else DecisionSummary(decision.decision, decision.reason),
        alert=AlertDetail(
            **{c: alert._mapping[c] for c in _ALERT_DETAIL_COLUMNS},
            labels=json.loads(alert.labels),
            annotations=json.loads(alert.annotations),
        ),
        steps=[
            StepDetail(
                index=s.idx,
                name=s.name,
                action=s.action,
                where=s.where,
                params=json.loads(s.params),
                status=s.status,
                plan=loads(s.plan),
                result=loads(s.result),
                error=s.error,
                attempts=attempts_by_step.get(s.id, []),
                timeout=s.timeout,
                retries=s.retries,
                always=bool(s.always),
                continue_on_error=bool(s.continue_on_error),
                started_at=s.started_at,
                finished_at=s.finished_at,
                node=s.node,
            )
            for s in step_rows
        ],
    )


class RunLinks(NamedTuple):
    """The runs of the same alert occurrence and playbook in the other phase: a resolved run's firing run
    (the one it undoes) and a firing run's resolved (undo, on_resolved) runs, for the run page's links."""

    firing_run: int | None
    resolved_runs: list[int]


def run_links(conn: sa.Connection, run_id: int) -> RunLinks:
    """Found by the occurrence (fingerprint and startsAt, ix_alerts_fingerprint) rather than `after_run_id`
    alone: a resolved run names its firing run there only while that run had not finished."""
    run = conn.execute(
        sa.select(
            t.runs.c.playbook, t.runs.c.phase, t.runs.c.after_run_id, t.alerts.c.fingerprint, t.alerts.c.starts_at
        )
        .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
        .where(t.runs.c.id == run_id)
    ).one_or_none()
    if run is None:
        raise UnknownRunError(f"no run {run_id}")
    # Two index lookups (ix_alerts_fingerprint, then ix_runs_alert), the playbook compared here: in one
    # join, SQLite without ANALYZE walked the runs of the playbook instead (250-600 ms on 1M runs).
    alert_ids = (
        conn.execute(
            sa.select(t.alerts.c.id).where(
                t.alerts.c.fingerprint == run.fingerprint, t.alerts.c.starts_at == run.starts_at
            )
        )
        .scalars()
        .all()
    )
    rows = conn.execute(
        sa.select(t.runs.c.id, t.runs.c.phase, t.runs.c.playbook).where(t.runs.c.alert_id.in_(alert_ids))
    ).all()
    others = sorted((r for r in rows if r.playbook == run.playbook and r.id != run_id), key=lambda r: r.id)
    if run.phase == "resolved":
        firing = [r.id for r in others if r.phase != "resolved"]
        return RunLinks(run.after_run_id or (firing[-1] if firing else None), [])
    return RunLinks(None, [r.id for r in others if r.phase == "resolved"])


@dataclass
class History:
    """The audit history of a store (`Store.history`), read: pages, one run and its links, the report."""

    tx: Transactions
    dialect: Dialect

    def page(self, query: HistoryQuery) -> tuple[list[HistoryEntry], str | None]:
        """A page of the audit history, newest first, and the next page's cursor (None at the end)."""
        with self.tx.read() as conn:
            return history_page(conn, query, time_follows_id=self.dialect.decision_time_follows_id)

    def run_detail(self, run_id: int) -> RunDetail:
        """One run with its alert, decision, steps and attempts; UnknownRunError if there is none."""
        with self.tx.read() as conn:
            return run_detail(conn, run_id)

    def run_links(self, run_id: int) -> RunLinks:
        """A run's firing run (when it is a resolved one) and its resolved runs (when it is a firing one)."""
        with self.tx.read() as conn:
            return run_links(conn, run_id)

    def latest_gate(
        self, target: str, gate: str, others: Sequence[str] = (), *, playbooks: Sequence[str]
    ) -> GateRun | None:
        """The newest run of `playbooks` on `target` with a `gate` step, with its steps of `gate` and `others`
        (store.gate_history); None when the target was never gated by them."""
        if not playbooks:
            return None
        with self.tx.read() as conn:
            return latest_gate(conn, target, gate, others, playbooks=playbooks)

    def report(self, query: ReportQuery) -> Report:
        """The reliability figures of a window (store.report): incidents, remediations by rung, MTTR, held nodes."""
        with self.tx.read() as conn:
            rows, held = read_report_rows(conn, query)
            offenders = read_repeat_offenders(conn, query.repeat_rules, query.until)
        return build_report(rows, held, query, offenders)

    def repeat_offenders(self, rules: Sequence[RepeatRule], *, until: float) -> list[RepeatOffender]:
        """The targets at or over a rule's count in its window before `until` (the state page lists them)."""
        with self.tx.read() as conn:
            return read_repeat_offenders(conn, rules, until)
