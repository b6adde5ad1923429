"""`remediate replay`: the stored notifications of a window judged again with other playbooks, compared with
what was really decided. Nothing is executed and the database is not written.

Who calls it: the CLI (cli/replay.py) and bench/replay.py. The recorded database is opened read-only the way
`db copy` opens its source (SQLite `mode=ro`, PostgreSQL a read-only transaction) and read in batches of
notifications, in the order the store took them. Each notification is rebuilt from its stored alerts and
ingested by the real engine into a scratch store in memory (the same schema): the guards, cooldowns, attempt
caps, dedupe and ladders then see what the earlier replayed notifications left, exactly as the server's do,
with the notification's received time as the clock. Nothing runs, so the runs stay queued; what an executor
would have done to the circuit breaker is done here to the scratch store's breaker (a cordon, taint or drain of
an enforced run claims its node at the notification's time; an uncordon or untaint releases it), which the
breaker guard of the later notifications reads. A trip stays open for the rest of the replay: no person resets it.
A rollout wave that promotes on evidence (remediate.config.promotion) reads the scratch store's runs, finished as
above (an enforced run succeeds unless the breaker refused it): the report's `promotions` lists when each wave
would have been promoted, and demoted, with the note its decision took.

The recorded side counts only what really happened: a cordon or drain step that succeeded (or belongs to a run
not ended yet), never one the breaker refused. A decision taken the same way on both sides is compared step by
step (rehearsal.replay_steps): the rendered params that differ and, where the action can tell from its recorded
plan, the change it would make instead (a power cap of 60% instead of 80%: `700 W -> 420 W instead of 560 W`).

What the replay cannot know: the history before `since` (the scratch store starts empty, so the first cooldown
of each target may differ), approvals (approve-mode runs wait until their alert resolves), runs that failed
for another reason than the breaker, a pause, a person's breaker reset.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remediate.actions.base import ActionRegistry
from remediate.breaker import BreakerOpen, CircuitBreaker, StaleAlert, iso_utc, limits_from_settings
from remediate.config.promotion import Promotion
from remediate.config.settings import Settings
from remediate.intake.alerts import Notification, parse_notification
from remediate.judging.engine import Engine
from remediate.playbooks.model import PlaybookSet
from remediate.rehearsal.replay_steps import StepRecord, step_changes
from remediate.runs import Decision, RunStatus
from remediate.services import engine_for
from remediate.store import Store
from remediate.store import schema as t
from remediate.store.copy import _check_source, _open_source, _snapshot
from remediate.store.source_guard import QUERY_TIME_LIMIT_S, json_column, time_limited

if TYPE_CHECKING:
    from remediate.kube.client import KubeClient
    from remediate.slurm import SlurmNodeCache

BATCH = 1000
"""Notifications read per query (with their alerts, decisions and cordon steps): memory stays bounded by one batch."""

CORDONS = ("k8s.cordon", "k8s.drain", "slurm.drain")
"""The actions that take a node out of service: the nodes the report lists as cordoned (on Slurm: drained)."""
RELEASES = ("k8s.uncordon", "k8s.untaint", "slurm.resume")
"""The actions that give a node back to the breaker (KubeAction.release, SlurmAction.release)."""
SHOWN_CHANGES = 200
"""Changed decisions listed one by one in the report (all are counted)."""

_NOT_FIRING_YET = "0001-01-01T00:00:00Z"


@dataclass(frozen=True)
class Window:
    since: float
    until: float


@dataclass
class Side:
    """What one side (recorded or replayed) decided over the window."""

    decisions: Counter[str] = field(default_factory=Counter)
    runs: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(playbook, target) -> accepted runs."""
    rungs: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    """(playbook, target, rung) -> accepted firing runs on that rung of a ladder."""
    cordoned: set[str] = field(default_factory=set)
    """Nodes an accepted enforced firing run planned to cordon or drain."""


@dataclass
class Replay:
    """The comparison, built notification by notification."""

    window: Window
    recorded: Side = field(default_factory=Side)
    replayed: Side = field(default_factory=Side)
    added: Counter[tuple[str, str]] = field(default_factory=Counter)
    removed: Counter[tuple[str, str]] = field(default_factory=Counter)
    changes: list[dict[str, Any]] = field(default_factory=list)
    changed: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    """The runs decided the same way whose steps would do something else (remediate.rehearsal.replay_steps)."""
    changed_steps: int = 0
    trips: list[dict[str, Any]] = field(default_factory=list)
    notifications: int = 0
    alerts: int = 0
    breaker_note: str = ""
    promotions: list[dict[str, Any]] = field(default_factory=list)
    """Each time a replayed wave's promotion changed (rehearsal: `promotions`, docs/playbooks.md)."""
    _promoted: dict[tuple[str, str], bool] = field(default_factory=dict)

    def saw_promotion(self, at: float, notification_id: int, playbook: str, promotion: Promotion) -> None:
        """A replayed decision's wave promotion: recorded when the wave's state changed (first: once promoted)."""
        key = (playbook, promotion.wave)
        before = self._promoted.get(key)
        self._promoted[key] = promotion.promoted
        if before == promotion.promoted or (before is None and not promotion.promoted):
            return
        if len(self.promotions) < SHOWN_CHANGES:
            self.promotions.append(
                {
                    "at": at,
                    "notification_id": notification_id,
                    "playbook": playbook,
                    "wave": promotion.wave,
                    "promoted": promotion.promoted,
                    "note": promotion.note,
                }
            )

    def as_json(self) -> dict[str, Any]:
        keys = sorted(set(self.recorded.runs) | set(self.replayed.runs) | set(self.added) | set(self.removed))
        runs = [
            {
                "playbook": playbook,
                "target": target,
                "recorded": self.recorded.runs[(playbook, target)],
                "replayed": self.replayed.runs[(playbook, target)],
                "added": self.added[(playbook, target)],
                "removed": self.removed[(playbook, target)],
            }
            for playbook, target in keys
            if self.added[(playbook, target)] or self.removed[(playbook, target)]
        ]
        rung_keys = sorted(set(self.recorded.rungs) | set(self.replayed.rungs))
        rungs = [
            {
                "playbook": p,
                "target": n,
                "rung": r,
                "recorded": self.recorded.rungs[k],
                "replayed": self.replayed.rungs[k],
            }
            for k in rung_keys
            for p, n, r in [k]
            if self.recorded.rungs[k] != self.replayed.rungs[k]
        ]
        decisions = {
            name: {"recorded": self.recorded.decisions[name], "replayed": self.replayed.decisions[name]}
            for name in sorted(set(self.recorded.decisions) | set(self.replayed.decisions))
        }
        return {
            "since": iso_utc(self.window.since),
            "until": iso_utc(self.window.until),
            "notifications": self.notifications,
            "alerts": self.alerts,
            "differs": bool(
                self.changed
                or self.changed_steps
                or rungs
                or self.trips
                or self.recorded.cordoned != self.replayed.cordoned
            ),
            "decisions": decisions,
            "runs": runs,
            "rungs": rungs,
            "breaker": {"trips": self.trips, "note": self.breaker_note},
            "promotions": self.promotions,
            "cordoned": {
                "recorded": sorted(self.recorded.cordoned),
                "replayed": sorted(self.replayed.cordoned),
                "added": sorted(self.replayed.cordoned - self.recorded.cordoned),
                "removed": sorted(self.recorded.cordoned - self.replayed.cordoned),
            },
            "changed_decisions": self.changed,
            "changes": self.changes,
            "changed_steps": self.changed_steps,
            "steps": self.steps,
        }


def replay(
    settings: Settings,
    source_url: str,
    playbooks: PlaybookSet,
    registry: ActionRegistry,
    window: Window,
    *,
    cluster_nodes: int | None = None,
    kube: KubeClient | None = None,
    slurm: SlurmNodeCache | None = None,
) -> dict[str, Any]:
    """Judge the notifications stored in `source_url` within `window` again with `playbooks`; the report.
    `kube`, `slurm`: the Kubernetes client and Slurm node cache `registry`'s actions use, for the staged
    rollouts' waves to share (one node cache of each)."""
    report = Replay(window)
    source = _open_source(source_url)
    scratch = Store.open("sqlite://")  # in memory, the schema Store.open creates
    try:
        engine = engine_for(settings, scratch, playbooks, registry, kube=kube, slurm=slurm)  # as the server judges
        with _snapshot(source) as conn, time_limited(QUERY_TIME_LIMIT_S):
            _check_source(conn)
            nodes = cluster_nodes if cluster_nodes is not None else _stored_cluster_nodes(conn)
            simulated = _Breaker(scratch, settings, nodes, report) if nodes else None
            if simulated is None:
                report.breaker_note = (
                    "not simulated: the cluster's size is unknown (no breaker state stored); give --cluster-nodes"
                )
            for batch in _batches(conn, window):
                for notification_row, alert_rows in batch.notifications:
                    _replay_one(engine, scratch, simulated, report, notification_row, alert_rows, batch)
    finally:
        scratch.close()
        source.dispose()
    return report.as_json()


# ------------------------------------------------------------------ reading the recorded history


@dataclass
class _Batch:
    notifications: list[tuple[Any, list[Any]]]
    decisions: dict[int, list[Any]]
    """notification id -> its recorded decisions (with their run's rung, mode, phase and status)."""
    steps: dict[int, list[StepRecord]]
    """run id -> its recorded steps, in order."""


def _stored_cluster_nodes(conn: sa.Connection) -> int | None:
    row = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "breaker")).scalar_one_or_none()
    return json_column(row, "meta", "value", "breaker").get("cluster_nodes") if row else None


def _batches(conn: sa.Connection, window: Window) -> Iterator[_Batch]:
    """The window's notifications in the order the store took them (its ids), BATCH at a time."""
    n, a, d, r, s = t.notifications.c, t.alerts.c, t.decisions.c, t.runs.c, t.steps.c
    last = 0
    while True:
        rows = conn.execute(
            sa.select(n.id, n.received_at, n.receiver, n.status, n.group_key)
            .where(n.id > last, n.received_at >= window.since, n.received_at < window.until)
            .order_by(n.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        last = rows[-1].id
        ids = [row.id for row in rows]
        alerts: dict[int, list[Any]] = {}
        for row in conn.execute(sa.select(t.alerts).where(a.notification_id.in_(ids)).order_by(a.id)):
            alerts.setdefault(row.notification_id, []).append(row)
        decisions: dict[int, list[Any]] = {}
        run_ids = []
        query = (
            sa.select(d.notification_id, d.fingerprint, d.alert_status, d.alertname, d.playbook, d.target)
            .add_columns(d.decision, d.run_id, r.rung, r.mode, r.phase, r.status.label("run_status"))
            .outerjoin(t.runs, r.id == d.run_id)
            .where(d.notification_id.in_(ids))
            .order_by(d.id)
        )
        for row in conn.execute(query):
            decisions.setdefault(row.notification_id, []).append(row)
            if row.run_id is not None:
                run_ids.append(row.run_id)
        steps: dict[int, list[StepRecord]] = {}
        for start in range(0, len(run_ids), 500):
            query = (
                sa.select(s.run_id, s.name, s.action, s.params, s.plan, s.status)
                .where(s.run_id.in_(run_ids[start : start + 500]))
                .order_by(s.run_id, s.idx)
            )
            for run_id, *step in conn.execute(query):
                record = StepRecord(*step)
                json_column(record.params, "steps", "params", f"of run {run_id}")
                steps.setdefault(run_id, []).append(record)
        yield _Batch([(row, alerts.get(row.id, [])) for row in rows], decisions, steps)


def _notification(row: Any, alert_rows: Sequence[Any]) -> Notification:
    """The stored notification as the webhook delivered it (its alerts as stored), through the webhook's parser."""
    return parse_notification(
        {
            "version": "4",
            "status": row.status,
            "receiver": row.receiver,
            "groupKey": row.group_key,
            "truncatedAlerts": 0,
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "",
            "alerts": [
                {
                    "status": a.status,
                    "labels": json_column(a.labels, "alerts", "labels", a.id),
                    "annotations": json_column(a.annotations, "alerts", "annotations", a.id),
                    "startsAt": a.starts_at,
                    "endsAt": a.ends_at or _NOT_FIRING_YET,
                    "generatorURL": a.generator_url or "",
                    "fingerprint": a.fingerprint,
                }
                for a in alert_rows
            ],
        }
    )


# ------------------------------------------------------------------ judging again, comparing


def _replay_one(
    engine: Engine,
    scratch: Store,
    breaker: _Breaker | None,
    report: Replay,
    row: Any,
    alert_rows: Sequence[Any],
    batch: _Batch,
) -> None:
    report.notifications += 1
    report.alerts += len(alert_rows)
    recorded: dict[tuple[str, str, str], str] = {}
    recorded_runs: dict[tuple[str, str, str], int] = {}
    for d in batch.decisions.get(row.id, []):
        if d.decision == Decision.TRUNCATED:
            continue  # the notification's, not a pair's: the replay judges the alerts that were delivered
        key = (d.fingerprint, d.alert_status, d.playbook or "")
        recorded[key] = d.decision
        if d.run_id is not None:
            recorded_runs[key] = d.run_id
        _count(report.recorded, d.decision, d.playbook, d.target, d.rung, d.mode, d.phase)
        if d.decision == Decision.ACCEPTED and d.mode == "enforce" and d.phase == "firing":
            # Only what really happened: a cordon the breaker refused (a failed step) changed nothing.
            happened = [
                step for step in batch.steps.get(d.run_id, []) if step.action in CORDONS and step.happened(d.run_status)
            ]
            report.recorded.cordoned.update(step.node() or d.target for step in happened)
    if not alert_rows:
        return
    notification = _notification(row, alert_rows)
    result = engine.ingest(notification, raw="", received_at=row.received_at)
    runs = _scratch_runs(scratch, engine.registry, [d.run_id for d in result.decisions if d.run_id is not None])
    refused = breaker.after(runs, row.received_at) if breaker is not None else set()
    _finish(scratch, runs, refused, row.received_at)
    replayed: dict[tuple[str, str, str], str] = {}
    replayed_runs: dict[tuple[str, str, str], _Run] = {}
    statuses = {alert.fingerprint: alert.status for alert in notification.alerts}
    for d in result.decisions:
        if d.promotion is not None and d.playbook is not None:
            report.saw_promotion(row.received_at, row.id, d.playbook, d.promotion)
        run = runs.get(d.run_id) if d.run_id is not None else None
        decision = d.decision.value
        replayed[(d.fingerprint, statuses[d.fingerprint], d.playbook or "")] = decision
        if run is not None:
            replayed_runs[(d.fingerprint, statuses[d.fingerprint], d.playbook or "")] = run
        rung, mode, phase = (run.rung, run.mode, run.phase) if run is not None else (None, None, None)
        _count(report.replayed, decision, d.playbook, d.target, rung, mode, phase)
        if (
            run is not None
            and decision == Decision.ACCEPTED
            and mode == "enforce"
            and phase == "firing"
            and run.id not in refused
        ):
            report.replayed.cordoned.update(node or d.target or "" for node in run.cordons)
    names = {a.fingerprint: a.labels.get("alertname", "") for a in notification.alerts}
    for key in sorted(set(recorded) | set(replayed)):
        before, after = recorded.get(key), replayed.get(key)
        if before == after:
            if key in recorded_runs and key in replayed_runs:
                _compare_steps(engine.registry, report, row, names, key, recorded_runs[key], replayed_runs[key], batch)
            continue
        fingerprint, status, playbook = key
        target = _target_of(batch.decisions.get(row.id, []), result.decisions, key)
        if before == Decision.ACCEPTED:
            report.removed[(playbook, target)] += 1
        if after == Decision.ACCEPTED:
            report.added[(playbook, target)] += 1
        report.changed += 1
        if len(report.changes) < SHOWN_CHANGES:
            report.changes.append(
                {
                    "notification_id": row.id,
                    "received_at": row.received_at,
                    "alertname": names.get(fingerprint, ""),
                    "fingerprint": fingerprint,
                    "alert_status": status,
                    "playbook": playbook or None,
                    "target": target or None,
                    "recorded": before,
                    "replayed": after,
                }
            )


def _compare_steps(
    registry: ActionRegistry,
    report: Replay,
    row: Any,
    names: Mapping[str, str],
    key: tuple[str, str, str],
    recorded_run: int,
    run: _Run,
    batch: _Batch,
) -> None:
    """A decision taken the same way on both sides: what its run's steps would do differently, if anything."""
    changes = step_changes(registry, batch.steps.get(recorded_run, []), run.steps)
    if not changes:
        return
    report.changed_steps += len(changes)
    if len(report.steps) < SHOWN_CHANGES:
        report.steps.append(
            {
                "notification_id": row.id,
                "received_at": row.received_at,
                "alertname": names.get(key[0], ""),
                "fingerprint": key[0],
                "alert_status": key[1],
                "playbook": key[2] or None,
                "target": run.target or None,
                "recorded_run": recorded_run,
                "steps": changes,
            }
        )


def _count(
    side: Side, decision: str, playbook: str | None, target: str | None, rung: Any, mode: Any, phase: Any
) -> None:
    side.decisions[decision] += 1
    if decision != Decision.ACCEPTED or playbook is None:
        return
    side.runs[(playbook, target or "")] += 1
    if rung is not None and phase == "firing":
        side.rungs[(playbook, target or "", int(rung))] += 1


def _target_of(recorded: Sequence[Any], replayed: Sequence[Any], key: tuple[str, str, str]) -> str:
    for d in replayed:
        if (d.fingerprint, d.playbook or "") == (key[0], key[2]) and d.target:
            return str(d.target)
    for d in recorded:
        if (d.fingerprint, d.alert_status, d.playbook or "") == key and d.target:
            return str(d.target)
    return ""


@dataclass(frozen=True)
class _Run:
    id: int
    target: str
    mode: str
    phase: str
    rung: int | None
    status: str
    cordons: tuple[str, ...]
    """The nodes (param `node`, "" for the run's target) of its cordon/drain steps."""
    gated: tuple[tuple[str, str], ...]
    """(action, node) of its breaker-gated steps, in order."""
    releases: tuple[str, ...]
    """The nodes its uncordon/untaint steps give back."""
    steps: tuple[StepRecord, ...] = ()
    """Its steps as rendered (compared with the recorded run's: remediate.rehearsal.replay_steps)."""


# Built once: building a statement costs more than running it on the scratch store (as store/ingest.py's).
_SCRATCH_RUNS = sa.select(
    t.runs.c.id, t.runs.c.target, t.runs.c.mode, t.runs.c.phase, t.runs.c.rung, t.runs.c.status
).where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)))
_SCRATCH_STEPS = (
    sa.select(t.steps.c.run_id, t.steps.c.name, t.steps.c.action, t.steps.c.params)
    .where(t.steps.c.run_id.in_(sa.bindparam("p_ids", expanding=True)))
    .order_by(t.steps.c.run_id, t.steps.c.idx)
)

_FINISH_RUNS = (
    sa.update(t.runs)
    .where(t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)))
    .values(status=sa.bindparam("p_status"), started_at=sa.bindparam("p_now"), finished_at=sa.bindparam("p_now"))
)


def _scratch_runs(scratch: Store, registry: ActionRegistry, run_ids: Sequence[int]) -> dict[int, _Run]:
    """The replayed runs of one notification with the steps the report and the breaker need."""
    if not run_ids:
        return {}
    with scratch.read() as conn:
        runs = conn.execute(_SCRATCH_RUNS, {"p_ids": run_ids}).all()
        steps = conn.execute(_SCRATCH_STEPS, {"p_ids": run_ids}).all()
    by_run: dict[int, list[tuple[str, str]]] = {}
    records: dict[int, list[StepRecord]] = {}
    for run_id, name, action, params in steps:
        by_run.setdefault(run_id, []).append((action, json.loads(params).get("node") or ""))
        records.setdefault(run_id, []).append(StepRecord(name, action, params))
    found = {}
    for run in runs:
        own = by_run.get(run.id, [])
        found[run.id] = _Run(
            run.id,
            run.target,
            run.mode,
            run.phase,
            run.rung,
            run.status,
            tuple(name for action, name in own if action in CORDONS),
            # A step that names no node acts on the run's target.
            tuple((action, name or run.target) for action, name in own if _gated(registry, action)),
            tuple(name or run.target for action, name in own if action in RELEASES),
            tuple(records.get(run.id, [])),
        )
    return found


class _Breaker:
    """The circuit breaker as the executor would have driven it, on the scratch store, at replayed times."""

    def __init__(self, scratch: Store, settings: Settings, cluster_nodes: int, report: Replay) -> None:
        self.now = 0.0
        self.nodes = cluster_nodes
        self.report = report
        self.breaker = CircuitBreaker(
            scratch.breaker.ledger, limits=limits_from_settings(settings.kube.breaker), clock=lambda: self.now
        )
        report.breaker_note = f"simulated for {cluster_nodes} nodes: {self.breaker.limits.describe_cap(cluster_nodes)}"

    def after(self, runs: Mapping[int, _Run], now: float) -> set[int]:
        """Claims and releases of the notification's accepted enforced runs, at its time; the runs refused."""
        self.now = now
        refused: set[int] = set()
        for run in sorted(runs.values(), key=lambda item: item.id):
            if run.mode != "enforce" or run.status != RunStatus.QUEUED:
                continue  # a shadow run, one waiting for a person, or one refused: the executor starts none
            for node in run.releases:
                self.breaker.release(node, run_id=run.id)
            for action, node in run.gated:
                try:
                    self.breaker.acquire(node, kind=action.rpartition(".")[2], run_id=run.id, cluster_nodes=self.nodes)
                except BreakerOpen:
                    state = self.breaker.state()
                    if state.tripped_by_run == run.id and state.tripped_at == now:
                        self.report.trips.append(
                            {"at": now, "node": node, "run": run.id, "action": action, "reason": state.reason}
                        )
                    refused.add(run.id)
                    break  # the step fails: the run stops there
                except StaleAlert:
                    refused.add(run.id)
                    break
        return refused


def _finish(scratch: Store, runs: Mapping[int, _Run], refused: set[int], now: float) -> None:
    """The notification's queued runs as the executor would have left them (each started at once; none fails but
    one the breaker refused; a dry-run one planned): what later judgements read of them, such as a repeat
    offender's count of the runs that acted."""
    ends: dict[RunStatus, list[int]] = {}
    for run in runs.values():
        if run.status != RunStatus.QUEUED:
            continue  # awaiting approval (never approved here) or already finished
        if run.id in refused:
            end = RunStatus.FAILED
        else:
            end = RunStatus.SUCCEEDED if run.mode == "enforce" else RunStatus.PLANNED
        ends.setdefault(end, []).append(run.id)
    if not ends:
        return
    with scratch.write() as conn:
        for end, ids in ends.items():
            conn.execute(_FINISH_RUNS, {"p_ids": ids, "p_status": end.value, "p_now": now})


def _gated(registry: ActionRegistry, action: str) -> bool:
    return action in registry and registry.get(action).breaker_gated
