"""Reliability figures over a window: incidents, remediations by rung, time to remediate, held nodes.

What a platform team shows its users each week (`remediate report`, GET /report) and what /metrics
exports as `remediate_report_*`. Two reads, the same on every backend: the firing decisions of the
window with their alert and run (`read_report_rows`: one indexed range scan of
`decisions.created_at`), and the open breaker claims; the figures are computed from those rows in
Python by `build_report`, so SQLite and PostgreSQL cannot disagree.

Definitions (docs/report.md):

- an **incident** is one alert occurrence that fired: a distinct (fingerprint, startsAt) among the
  firing alerts received in the window; its node is the target a playbook resolved for it, its job
  the first of `job_labels` the alert carries;
- a **remediation** is a firing run of the window that acted and finished: succeeded or failed (not
  rejected, cancelled, dry-run, or still queued/running), counted by its rung (`runs.rung`; None for a
  playbook without a ladder, shown as "-");
- **time to remediate** of an incident: from its startsAt to the last step finished of its last
  succeeded firing run; the mean over the incidents that have one;
- **time between incidents** of a node: (last startsAt - first startsAt) / (incidents - 1), for a node
  with at least two;
- a node is **held** while the circuit breaker has an unreleased claim on it (cordoned, tainted or
  drained by remediate, not yet undone);
- a **repeat offender** is a target whose firing runs of a playbook with `repeat_offender` acted
  (succeeded) at least its `count` times within its `within` before `until` (store.repeat_offenders).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from remediate.errors import PayloadError
from remediate.intake.alerts import format_timestamp, parse_timestamp
from remediate.runs import RunStatus
from remediate.store import schema as t
from remediate.store.repeat_offenders import RepeatOffender, RepeatRule

REMEDIATED = (RunStatus.SUCCEEDED, RunStatus.FAILED)
NO_RUNG = "-"
NO_NODE = "-"


@dataclass(frozen=True)
class ReportQuery:
    since: float
    until: float
    job_labels: tuple[str, ...] = ("training_job", "job")
    """Alert labels naming an incident's training job, in order; the first the alert carries wins."""
    repeat_rules: tuple[RepeatRule, ...] = ()
    """The loaded playbooks' `repeat_offender` rules: the targets at or over one are listed."""


class FiringRow(NamedTuple):
    """One decision on a firing alert of the window, with its alert and (if any) its run."""

    fingerprint: str
    starts_at: str
    labels: str
    target: str | None
    run_id: int | None
    run_status: str | None
    rung: int | None
    run_finished_at: float | None
    last_step_at: float | None


class HeldNode(NamedTuple):
    node: str
    kind: str
    run_id: int
    since: float


def read_report_rows(conn: sa.Connection, query: ReportQuery) -> tuple[list[FiringRow], list[HeldNode]]:
    """The rows of the window and the open claims, read on `conn` (SQLite and PostgreSQL alike)."""
    d, a, r, s = t.decisions.c, t.alerts.c, t.runs.c, t.steps.c
    last_step = sa.select(sa.func.max(s.finished_at)).where(s.run_id == r.id).scalar_subquery()
    statement = (
        sa.select(
            d.fingerprint,
            a.starts_at,
            a.labels,
            d.target,
            r.id,
            r.status,
            r.rung,
            r.finished_at,
            last_step,
        )
        .select_from(t.decisions.join(t.alerts, a.id == d.alert_id).outerjoin(t.runs, r.id == d.run_id))
        .where(d.created_at >= query.since, d.created_at < query.until, d.alert_status == "firing")
        .order_by(d.id)
    )
    rows = [FiringRow(*row) for row in conn.execute(statement)]
    c = t.breaker_claims.c
    claims = conn.execute(
        sa.select(c.node, c.kind, c.run_id, c.claimed_at).where(c.released_at.is_(None)).order_by(c.claimed_at, c.id)
    )
    return rows, [HeldNode(*claim) for claim in claims]


@dataclass
class _Tally:
    incidents: set[tuple[str, str]] = field(default_factory=set)
    runs: dict[int, str] = field(default_factory=dict)
    """run id -> final status (succeeded/failed)."""
    repair_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    starts: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        succeeded = sum(1 for status in self.runs.values() if status == RunStatus.SUCCEEDED)
        return {
            "incidents": len(self.incidents),
            "remediations": len(self.runs),
            "succeeded": succeeded,
            "failed": len(self.runs) - succeeded,
            "mttr_seconds": _mean(self.repair_seconds.values()),
        }


@dataclass(frozen=True)
class Report:
    """The figures of one window; `as_json` is the documented shape (docs/report.md)."""

    since: float
    until: float
    totals: dict[str, Any]
    by_rung: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    held: list[dict[str, Any]]
    repeat_offenders: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": _rfc3339(self.since),
            "until": _rfc3339(self.until),
            "window_seconds": round(self.until - self.since, 3),
            "totals": self.totals,
            "by_rung": self.by_rung,
            "nodes": self.nodes,
            "jobs": self.jobs,
            "held": self.held,
            "repeat_offenders": self.repeat_offenders,
        }


def build_report(
    rows: Iterable[FiringRow], held: Sequence[HeldNode], query: ReportQuery, offenders: Sequence[RepeatOffender] = ()
) -> Report:
    """The figures from the window's rows, the open claims and the repeat offenders (pure)."""
    total, per_node, per_job = _Tally(), defaultdict(_Tally), defaultdict(_Tally)
    rungs: dict[int | None, dict[int, str]] = defaultdict(dict)
    incident_node: dict[tuple[str, str], str] = {}
    incident_job: dict[tuple[str, str], str | None] = {}
    incident_start: dict[tuple[str, str], float | None] = {}
    repaired_at: dict[tuple[str, str], float] = {}
    remediations: list[tuple[tuple[str, str], int, str, int | None]] = []
    for row in rows:
        key = (row.fingerprint, row.starts_at)
        if key not in incident_start:
            incident_start[key] = _seconds(row.starts_at)
            incident_job[key] = _job(row.labels, query.job_labels)
        if row.target and key not in incident_node:
            incident_node[key] = row.target
        if row.run_id is None or row.run_status not in REMEDIATED:
            continue
        remediations.append((key, row.run_id, str(row.run_status), row.rung))
        done = row.last_step_at if row.last_step_at is not None else row.run_finished_at
        if row.run_status == RunStatus.SUCCEEDED and done is not None:
            repaired_at[key] = max(done, repaired_at.get(key, done))

    for key, started in incident_start.items():
        tallies = [total, per_node[incident_node.get(key, NO_NODE)]]
        if incident_job[key] is not None:
            tallies.append(per_job[incident_job[key]])
        for tally in tallies:
            tally.incidents.add(key)
            if started is not None:
                tally.starts.append(started)
            if key in repaired_at and started is not None:
                tally.repair_seconds[key] = max(0.0, repaired_at[key] - started)
    for key, run_id, status, rung in remediations:
        rungs[rung][run_id] = status
        for tally in (total, per_node[incident_node.get(key, NO_NODE)], per_job.get(incident_job[key] or "")):
            if tally is not None:
                tally.runs[run_id] = status

    held_first: dict[str, HeldNode] = {}
    for claim in held:
        held_first.setdefault(claim.node, claim)
    for node in held_first:
        per_node.setdefault(node, _Tally())

    nodes = []
    for node, tally in sorted(per_node.items(), key=lambda item: (-len(item[1].incidents), item[0])):
        claim = held_first.get(node)
        nodes.append(
            {
                "node": node,
                **tally.figures(),
                "mtbi_seconds": _mtbi(tally.starts),
                "held": claim is not None,
                "held_since": _rfc3339(claim.since) if claim else None,
            }
        )
    jobs = [
        {"job": job, **tally.figures()}
        for job, tally in sorted(per_job.items(), key=lambda item: (-len(item[1].incidents), item[0]))
    ]
    by_rung = []
    for rung in sorted(rungs, key=lambda value: (value is None, value or 0)):
        statuses = list(rungs[rung].values())
        succeeded = sum(1 for status in statuses if status == RunStatus.SUCCEEDED)
        by_rung.append(
            {"rung": rung, "remediations": len(statuses), "succeeded": succeeded, "failed": len(statuses) - succeeded}
        )
    held_json = [
        {"node": c.node, "kind": c.kind, "run_id": c.run_id, "since": _rfc3339(c.since)} for c in held_first.values()
    ]
    totals = {**total.figures(), "nodes_held": len(held_first)}
    repeat = [offender.as_json() for offender in offenders]
    return Report(query.since, query.until, totals, by_rung, nodes, jobs, held_json, repeat)


def _job(labels_text: str, names: Sequence[str]) -> str | None:
    # Most alerts name no job: a substring test spares decoding their labels (the report's largest cost).
    if not any(f'"{name}"' in labels_text for name in names):
        return None
    try:
        labels = json.loads(labels_text)
    except ValueError:
        return None
    for name in names:
        value = labels.get(name) if isinstance(labels, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


def _seconds(text: str) -> float | None:
    """startsAt as stored (RFC 3339, checked at intake) in UNIX seconds; None if it is not one."""
    try:
        # fromisoformat is C and reads AlertManager's forms (Z, nanoseconds); 5x faster than the strict parser.
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is not None and moment.tzinfo is not None:
        return moment.timestamp()
    try:
        return parse_timestamp(text, "startsAt").timestamp()
    except PayloadError:
        return None


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return round(sum(items) / len(items), 3) if items else None


def _mtbi(starts: list[float]) -> float | None:
    if len(starts) < 2:
        return None
    return round((max(starts) - min(starts)) / (len(starts) - 1), 3)


def _rfc3339(seconds: float) -> str:
    return format_timestamp(datetime.fromtimestamp(seconds, UTC))
