"""The reliability report (remediate.store.report) on both databases: SQLite and PostgreSQL.

One scenario goes through the engine and the executor (real runs, steps and decisions), `runs.rung`
is set by SQL as a ladder would set it, and the figures must be exactly the same on both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from remediate.breaker import Claim
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.store import ReportQuery, Store
from remediate.store import schema as t
from remediate.store.report import FiringRow, build_report
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86400.0
MakeEngine = Callable[..., Engine]

XID = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
}
# check.prometheus without the prometheus_url setting: a step that fails, as a fix that did not work.
DISK = {
    "name": "disk",
    "match": {"alertname": "DiskFull"},
    "target": "node",
    "steps": [{"action": "check.prometheus", "with": {"query": "up == 1"}}],
}


def set_rung(store: Store, run_id: int, rung: int) -> None:
    """What the ladder does when it runs a rung (nothing on this branch writes runs.rung yet)."""
    with store.write() as conn:
        conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(rung=rung))


def fire(engine: Engine, alert: dict[str, Any], at: float) -> int | None:
    (decision,) = ingest_alerts(engine, alert, at=at).decisions
    return decision.run_id


def drain(store: Store, engine: Engine, at: float) -> None:
    Executor(store=store, registry=engine.registry, retry_wait_max=0.01, clock=lambda: at).drain()


@EVERY_DATABASE
def test_the_report_counts_incidents_remediations_by_rung_mttr_mtbi_and_held_nodes(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(XID, DISK)
    llama = {"Hostname": "node-a", "training_job": "llama-70b"}
    # Before the window: not counted.
    old = fire(engine, alert_payload("GpuXidError", labels=llama, starts_at="2025-12-20T00:00:00Z"), T0 - 12 * DAY)
    drain(store, engine, T0 - 12 * DAY + 10)
    # node-a: two occurrences, fixed 5 min and 2 min after they started, on rungs 1 then 2.
    first = fire(engine, alert_payload("GpuXidError", labels=llama, starts_at="2026-01-01T00:00:00Z"), T0 + 60)
    drain(store, engine, T0 + 300)
    assert fire(engine, alert_payload("GpuXidError", labels=llama), T0 + 90) is None  # a re-send: duplicate
    second = fire(
        engine, alert_payload("GpuXidError", labels=llama, starts_at="2026-01-01T06:00:00Z"), T0 + 6 * 3600 + 30
    )
    drain(store, engine, T0 + 6 * 3600 + 120)
    # node-b: a disk alert whose fix failed (job from the `job` label).
    failed = fire(engine, alert_payload("DiskFull", labels={"Hostname": "node-b", "job": "bert"}), T0 + 100)
    drain(store, engine, T0 + 200)
    # No playbook: an incident without a node.
    assert fire(engine, alert_payload("FanSpeedLow", labels={"Hostname": "node-c"}), T0 + 110) is None
    assert None not in (old, first, second, failed)
    set_rung(store, first, 1)
    set_rung(store, second, 2)
    with store.breaker.ledger() as ledger:
        ledger.add_claim(Claim("node-b", "cordon", failed, T0 + 150, None))
        ledger.add_claim(Claim("node-a", "cordon", first, T0 + 100, None))
        ledger.release("node-a", now=T0 + 250, reason="uncordoned")

    report = store.history.report(ReportQuery(since=T0, until=T0 + 7 * DAY, job_labels=("training_job", "job")))

    assert report.as_json() == {
        "since": "2026-01-01T00:00:00Z",
        "until": "2026-01-08T00:00:00Z",
        "window_seconds": 7 * DAY,
        "totals": {
            "incidents": 4,
            "remediations": 3,
            "succeeded": 2,
            "failed": 1,
            "mttr_seconds": 210.0,  # (300 + 120) / 2
            "nodes_held": 1,
        },
        "by_rung": [
            {"rung": 1, "remediations": 1, "succeeded": 1, "failed": 0},
            {"rung": 2, "remediations": 1, "succeeded": 1, "failed": 0},
            {"rung": None, "remediations": 1, "succeeded": 0, "failed": 1},
        ],
        "nodes": [
            {
                "node": "node-a",
                "incidents": 2,
                "remediations": 2,
                "succeeded": 2,
                "failed": 0,
                "mttr_seconds": 210.0,
                "mtbi_seconds": 6 * 3600.0,
                "held": False,
                "held_since": None,
            },
            {
                "node": "-",
                "incidents": 1,
                "remediations": 0,
                "succeeded": 0,
                "failed": 0,
                "mttr_seconds": None,
                "mtbi_seconds": None,
                "held": False,
                "held_since": None,
            },
            {
                "node": "node-b",
                "incidents": 1,
                "remediations": 1,
                "succeeded": 0,
                "failed": 1,
                "mttr_seconds": None,
                "mtbi_seconds": None,
                "held": True,
                "held_since": "2026-01-01T00:02:30Z",
            },
        ],
        "jobs": [
            {"job": "llama-70b", "incidents": 2, "remediations": 2, "succeeded": 2, "failed": 0, "mttr_seconds": 210.0},
            {"job": "bert", "incidents": 1, "remediations": 1, "succeeded": 0, "failed": 1, "mttr_seconds": None},
        ],
        "held": [{"node": "node-b", "kind": "cordon", "run_id": failed, "since": "2026-01-01T00:02:30Z"}],
        "repeat_offenders": [],  # no playbook with repeat_offender (tests/unit/test_repeat_offenders.py)
    }


@EVERY_DATABASE
def test_an_empty_window_reports_zeros_and_the_nodes_held_now(store: Store) -> None:
    with store.breaker.ledger() as ledger:
        ledger.add_claim(Claim("node-z", "drain", 9, T0 - DAY, None))

    report = store.history.report(ReportQuery(since=T0, until=T0 + DAY)).as_json()

    assert report["totals"] == {
        "incidents": 0,
        "remediations": 0,
        "succeeded": 0,
        "failed": 0,
        "mttr_seconds": None,
        "nodes_held": 1,
    }
    assert report["by_rung"] == [] and report["jobs"] == []
    assert [(n["node"], n["incidents"], n["held"]) for n in report["nodes"]] == [("node-z", 0, True)]


def test_runs_that_did_not_act_are_no_remediation_and_a_bad_starts_at_no_mttr() -> None:
    def row(status: str | None, starts_at: str = "2026-01-01T00:00:00Z", run_id: int | None = 1) -> FiringRow:
        return FiringRow("f1", starts_at, "{}", "node-a", run_id, status, None, T0 + 60, T0 + 60)

    rows = [row("rejected"), row("cancelled", run_id=2), row("planned", run_id=3), row("running", run_id=4)]
    rows.append(row("succeeded", starts_at="not a time", run_id=5))

    report = build_report(rows, [], ReportQuery(since=T0, until=T0 + DAY)).as_json()

    assert report["totals"]["incidents"] == 2
    assert report["totals"]["remediations"] == 1
    assert report["totals"]["mttr_seconds"] is None
