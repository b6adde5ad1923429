"""`remediate replay` on a history the real engine recorded (SQLite and PostgreSQL): a playbook change (a cooldown
shortened, a new playbook, a match narrowed) lists exactly the decisions, runs and cordons that would differ;
the breaker is simulated over time; the database is left as it was."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from remediate.judging.engine import Engine
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import alert_payload, ingest_alerts, notification_payload
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.stores import EVERY_DATABASE

pytestmark = [pytest.mark.usefixtures("clean_environment")]

T0 = 1_795_000_000.0  # 2026-11-18; the tests give the window (--since/--until), not a duration back from now
WINDOW = ("--since", str(T0 - 60), "--until", str(T0 + 86_400))

XID = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "cooldown": "1h",
    "mode": "enforce",
    "steps": [{"name": "cordon", "action": "k8s.cordon"}],
}


def xid_alert(host: str, starts_at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return alert_payload(labels={"Hostname": host}, starts_at=starts_at)


def record(engine: Engine) -> None:
    """node-a fires, fires again (a new occurrence) 10 minutes later (cooldown), node-b fires 20 minutes after it."""
    ingest_alerts(engine, xid_alert("node-a"), at=T0)
    ingest_alerts(engine, xid_alert("node-a", "2026-01-01T00:10:00Z"), at=T0 + 600)
    ingest_alerts(engine, xid_alert("node-b"), at=T0 + 1200)


def playbook_dir(root: Path, *playbooks: dict[str, Any]) -> Path:
    directory = root / "changed"
    directory.mkdir()
    for playbook in playbooks:
        (directory / f"{playbook['name']}.yaml").write_text(yaml.safe_dump(playbook), encoding="utf-8")
    return directory


def checksum(url: str) -> str:
    """Every row of every table, in id order: equal sums mean nothing was written."""
    store = Store.open(url, upgrade=False)
    digest = hashlib.sha256()
    try:
        with store.read() as conn:
            for table in t.metadata.sorted_tables:
                order = list(table.primary_key.columns)
                for row in conn.execute(sa.select(table).order_by(*order)):
                    digest.update(repr(tuple(row)).encode())
    finally:
        store.close()
    return digest.hexdigest()


def replay(db_url: str, playbooks: Path, *extra: str) -> dict[str, Any]:
    result = cli("replay", "--database-url", db_url, "--playbooks", playbooks, *WINDOW, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@EVERY_DATABASE
def test_a_shortened_cooldown_adds_the_run_it_refused(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    record(make_engine(XID))
    before = checksum(db_url)
    report = replay(db_url, playbook_dir(tmp_path, {**XID, "cooldown": "5m"}))
    assert report["runs"] == [
        {"playbook": "xid", "target": "node-a", "recorded": 1, "replayed": 2, "added": 1, "removed": 0}
    ]
    assert [(c["notification_id"], c["target"], c["recorded"], c["replayed"]) for c in report["changes"]] == [
        (2, "node-a", "cooldown", "accepted")
    ]
    assert report["decisions"] == {
        "accepted": {"recorded": 2, "replayed": 3},
        "cooldown": {"recorded": 1, "replayed": 0},
    }
    assert report["cordoned"] == {
        "recorded": ["node-a", "node-b"],
        "replayed": ["node-a", "node-b"],
        "added": [],
        "removed": [],
    }
    assert report["differs"] is True
    assert checksum(db_url) == before


@EVERY_DATABASE
def test_the_same_playbooks_change_nothing(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    record(make_engine(XID))
    report = replay(db_url, playbook_dir(tmp_path, XID))
    assert (report["notifications"], report["alerts"]) == (3, 3)
    assert report["differs"] is False
    assert (report["runs"], report["changes"], report["changed_decisions"]) == ([], [], 0)


def test_a_notification_alertmanager_cut_short_replays_as_the_alerts_it_carried(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """The `truncated` decision is the notification's, not a pair's: the replay judges the delivered alerts
    and neither counts it nor calls it a change."""
    body = notification_payload(xid_alert("node-a"), xid_alert("node-b"))
    body["truncatedAlerts"] = 7
    result = make_engine(XID).ingest_body(json.dumps(body).encode(), received_at=T0)
    assert result.decision_counts() == {"accepted": 2, "truncated": 1}

    report = replay(db_url, playbook_dir(tmp_path, XID))

    assert (report["notifications"], report["alerts"]) == (1, 2)
    assert report["decisions"] == {"accepted": {"recorded": 2, "replayed": 2}}
    assert report["differs"] is False


def test_a_new_playbook_adds_its_runs(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    record(make_engine(XID))
    note = {
        "name": "note",
        "match": {"alertname": "GpuXidError"},
        "cooldown": "0s",
        "steps": [{"name": "log", "action": "log", "with": {"message": "xid"}}],
    }
    report = replay(db_url, playbook_dir(tmp_path, XID, note))
    assert report["runs"] == [
        {"playbook": "note", "target": "node-a", "recorded": 0, "replayed": 2, "added": 2, "removed": 0},
        {"playbook": "note", "target": "node-b", "recorded": 0, "replayed": 1, "added": 1, "removed": 0},
    ]
    assert [(c["playbook"], c["recorded"], c["replayed"]) for c in report["changes"]] == [
        ("note", None, "accepted")
    ] * 3
    assert report["cordoned"]["added"] == [] and report["cordoned"]["removed"] == []


def test_a_narrowed_match_removes_a_run_and_a_cordon(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    record(make_engine(XID))
    narrowed = {**XID, "match": {"alertname": "GpuXidError", "labels": ['Hostname="node-a"']}}
    report = replay(db_url, playbook_dir(tmp_path, narrowed))
    assert report["runs"] == [
        {"playbook": "xid", "target": "node-b", "recorded": 1, "replayed": 0, "added": 0, "removed": 1}
    ]
    assert report["cordoned"] == {
        "recorded": ["node-a", "node-b"],
        "replayed": ["node-a"],
        "added": [],
        "removed": ["node-b"],
    }
    assert report["decisions"]["unmatched"] == {"recorded": 0, "replayed": 1}


def test_the_breaker_is_simulated_over_time(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """10 nodes: a cap of 1 node per 10 minutes. node-b, a minute after node-a, trips the breaker (its cordon
    fails); node-c, later, is refused by the breaker guard. Recorded without an executor, nothing tripped."""
    engine = make_engine(XID)
    for at, host in ((T0, "node-a"), (T0 + 60, "node-b"), (T0 + 3600, "node-c")):
        ingest_alerts(engine, xid_alert(host), at=at)
    report = replay(db_url, playbook_dir(tmp_path, XID), "--cluster-nodes", "10")
    trips = report["breaker"]["trips"]
    assert [(trip["node"], trip["run"], trip["action"]) for trip in trips] == [("node-b", 2, "k8s.cordon")]
    assert "cap is 1" in trips[0]["reason"]
    assert [(c["target"], c["recorded"], c["replayed"]) for c in report["changes"]] == [
        ("node-c", "accepted", "breaker_open")
    ]
    assert report["cordoned"]["replayed"] == ["node-a"]
    assert report["cordoned"]["removed"] == ["node-b", "node-c"]
    # Without the cluster's size (none stored, none given) the breaker is not simulated, and says so.
    unsimulated = replay(db_url, tmp_path / "changed")
    assert "not simulated" in unsimulated["breaker"]["note"] and unsimulated["breaker"]["trips"] == []


def test_the_text_report_and_bad_input(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    record(make_engine(XID))
    changed = playbook_dir(tmp_path, {**XID, "cooldown": "5m"})
    result = cli("replay", "--database-url", db_url, "--playbooks", changed, *WINDOW)
    assert result.exit_code == 0, result.output
    assert "xid       node-a  1         2         +1     -0" in result.stdout
    assert "1 decisions, 0 ladder rungs and 0 steps differ" in result.stdout
    bad = cli("replay", "--database-url", db_url, "--playbooks", changed, "--since", "soon")
    assert_one_line_error(bad, "since")
    missing = cli("replay", "--database-url", f"sqlite:///{tmp_path / 'none.db'}", "--playbooks", changed)
    assert_one_line_error(missing, "no database at")


LADDER = {
    "name": "xid-ladder",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "cooldown": "0s",
    "mode": "enforce",
    "escalate": [
        {"name": "note", "holds_for": "1h", "steps": [{"name": "log", "action": "log", "with": {"message": "one"}}]},
        {"name": "cordon", "holds_for": "1h", "steps": [{"name": "cordon", "action": "k8s.cordon"}]},
    ],
}


@EVERY_DATABASE
def test_a_repeat_offender_rule_sends_the_second_occurrence_straight_to_its_rung(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """Recorded without `repeat_offender`: node-a's XID, resolved, and a new one 8 hours later, back on rung 1
    (reset_after 6h). Replayed with `repeat_offender: {count: 2, within: 7d, then: cordon}`: the first run, which
    the executor would have finished, makes the second occurrence go straight to rung 2 and its cordon."""
    ladder = {**LADDER, "reset_after": "6h"}
    engine = make_engine(ladder)
    ingest_alerts(engine, xid_alert("node-a"), at=T0)
    ingest_alerts(engine, alert_payload(status="resolved", labels={"Hostname": "node-a"}), at=T0 + 600)
    ingest_alerts(engine, xid_alert("node-a", "2026-01-01T08:00:00Z"), at=T0 + 8 * 3600)
    before = checksum(db_url)
    repeat = {"count": 2, "within": "7d", "then": "cordon"}
    report = replay(db_url, playbook_dir(tmp_path, {**ladder, "repeat_offender": repeat}))
    assert report["differs"] and report["changed_decisions"] == 0  # the same decisions, another rung
    assert report["rungs"] == [
        {"playbook": "xid-ladder", "target": "node-a", "rung": 1, "recorded": 2, "replayed": 1},
        {"playbook": "xid-ladder", "target": "node-a", "rung": 2, "recorded": 0, "replayed": 1},
    ]
    assert report["cordoned"]["added"] == ["node-a"]
    assert checksum(db_url) == before


@EVERY_DATABASE
def test_a_shorter_holds_for_reaches_the_next_rung(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """The same occurrence re-sent 10 minutes later: a duplicate under holds_for 1h; with holds_for 5m it
    climbs to rung 2, whose cordon the report lists."""
    engine = make_engine(LADDER)
    ingest_alerts(engine, xid_alert("node-a"), at=T0)
    ingest_alerts(engine, xid_alert("node-a"), at=T0 + 600)
    before = checksum(db_url)
    rungs = [{**rung, "holds_for": "5m"} for rung in LADDER["escalate"]]
    report = replay(db_url, playbook_dir(tmp_path, {**LADDER, "escalate": rungs}))
    assert report["rungs"] == [{"playbook": "xid-ladder", "target": "node-a", "rung": 2, "recorded": 0, "replayed": 1}]
    assert report["runs"] == [
        {"playbook": "xid-ladder", "target": "node-a", "recorded": 1, "replayed": 2, "added": 1, "removed": 0}
    ]
    assert [(c["recorded"], c["replayed"]) for c in report["changes"]] == [("duplicate", "accepted")]
    assert report["cordoned"]["added"] == ["node-a"]
    assert checksum(db_url) == before


def test_a_staged_rollout_reads_the_nodes_waves_as_the_server_does(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path, kube_api: FakeKubeAPI
) -> None:
    """Recorded in enforce mode; replayed under a rollout whose wave 2 only plans: node-b's label (read on the test
    API server, as the server and dry-run read it) makes its run a plan, so its cordon is gone from the report."""
    kube_api.add_node("node-a", labels={"remediate.io/wave": "1"})
    kube_api.add_node("node-b", labels={"remediate.io/wave": "2"})
    record(make_engine(XID))
    config = tmp_path / "remediate.yaml"
    rollout = {"label": "remediate.io/wave", "waves": {"1": "enforce", "2": "dry-run"}}
    config.write_text(
        yaml.safe_dump({"kubeconfig": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")), "rollout": rollout}),
        encoding="utf-8",
    )
    report = replay(db_url, playbook_dir(tmp_path, XID), "--config", config)
    assert report["cordoned"]["removed"] == ["node-b"] and report["cordoned"]["added"] == []


def test_the_replayed_runs_of_a_notification_end_as_the_executor_would_leave_them(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    """Each notification's queued runs are finished on the scratch store at its time, in one statement per end:
    enforced ones succeed (or fail where the breaker refused them), dry-run ones are planned, others stay."""
    from remediate.rehearsal import replay as replaying

    engine = make_engine(XID, {**XID, "name": "xid-dry", "match": {"alertname": "GpuXidDry"}, "mode": "dry-run"})
    result = ingest_alerts(
        engine,
        xid_alert("node-a"),
        xid_alert("node-b"),
        alert_payload(labels={"alertname": "GpuXidDry", "Hostname": "node-c"}),
        at=T0,
    )
    run_ids = sorted(d.run_id for d in result.decisions if d.run_id is not None)
    runs = replaying._scratch_runs(store, engine.registry, run_ids)
    by_target = {run.target: run.id for run in runs.values()}
    assert sorted(by_target) == ["node-a", "node-b", "node-c"]
    replaying._finish(store, runs, {by_target["node-b"]}, T0 + 5)
    with store.read() as conn:
        rows = conn.execute(
            sa.select(t.runs.c.target, t.runs.c.status, t.runs.c.started_at, t.runs.c.finished_at).order_by(
                t.runs.c.target
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        ("node-a", "succeeded", T0 + 5, T0 + 5),
        ("node-b", "failed", T0 + 5, T0 + 5),
        ("node-c", "planned", T0 + 5, T0 + 5),
    ]
    # A run that is no longer queued is left as it is.
    replaying._finish(store, replaying._scratch_runs(store, engine.registry, run_ids), set(), T0 + 60)
    with store.read() as conn:
        assert conn.execute(sa.select(sa.func.max(t.runs.c.finished_at))).scalar_one() == T0 + 5


def test_slurm_drains_count_as_cordons_and_claim_the_simulated_breaker(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """A slurm.drain takes a node out of service as a cordon does: listed, and capped by the same breaker."""
    drain = {**XID, "name": "xid-slurm", "steps": [{"name": "drain", "action": "slurm.drain"}],
             "on_resolved": [{"name": "resume", "action": "slurm.resume"}]}  # fmt: skip
    engine = make_engine(drain)
    for at, host in ((T0, "node-a"), (T0 + 60, "node-b")):
        ingest_alerts(engine, xid_alert(host), at=at)

    config = tmp_path / "remediate.yaml"
    config.write_text("schedulers: slurm\n", encoding="utf-8")  # a Slurm site: its slurm.* steps load
    report = replay(db_url, playbook_dir(tmp_path, drain), "--cluster-nodes", "10", "--config", str(config))

    assert report["cordoned"]["recorded"] == ["node-a", "node-b"]
    assert report["cordoned"]["replayed"] == ["node-a"]
    trips = report["breaker"]["trips"]
    assert [(trip["node"], trip["action"]) for trip in trips] == [("node-b", "slurm.drain")]
    assert "cap is 1" in trips[0]["reason"]


@EVERY_DATABASE
def test_replay_shows_when_a_wave_would_have_been_promoted_on_its_evidence(
    store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """Recorded without a rollout; replayed under one whose wave 2 (approve) promotes after 2 verified wave-1
    runs: the two wave-1 nodes' runs and their undos end as the executor would leave them, so node-c's run
    would have been enforced, and the report says from when and why."""
    logged = {**XID, "cooldown": "0s", "steps": [{"action": "log", "with": {"message": "x"}}]}
    logged["on_resolved"] = [{"action": "log", "with": {"message": "back"}}]
    engine = make_engine(logged)
    for at, host in ((T0, "node-a"), (T0 + 60, "node-b")):
        ingest_alerts(engine, xid_alert(host), at=at)
        ingest_alerts(engine, alert_payload(labels={"Hostname": host}, status="resolved"), at=at + 30)
    ingest_alerts(engine, xid_alert("node-c"), at=T0 + 600)
    rollout = {
        "label": "remediate.io/wave",
        "waves": {"1": "enforce", "2": "approve"},
        "promote": {"after": 2, "within": "1d"},
    }
    config = tmp_path / "remediate.yaml"
    nodes = {"node-a": "1", "node-b": "1", "node-c": "2"}
    config.write_text(yaml.safe_dump({"rollout": rollout, "rollout_nodes": nodes}), encoding="utf-8")

    report = replay(db_url, playbook_dir(tmp_path, logged), "--config", config)

    (promotion,) = report["promotions"]
    assert (promotion["at"], promotion["notification_id"], promotion["wave"]) == ("2026-11-18T11:16:40Z", 5, "2")
    assert promotion["note"].startswith("wave 2 enforcing: 2 of 2 wave-1 runs of version ")
    assert report["changes"] == []  # every decision is the same; node-c's run would have been enforced
    text = cli("replay", "--database-url", db_url, "--playbooks", tmp_path / "changed", *WINDOW, "--config", config)
    assert "wave 2 of xid promoted at 2026-11-18 11:16:40: wave 2 enforcing: 2 of 2" in text.stdout
