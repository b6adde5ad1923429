"""remediate.store on a real SQLite file: schema, history, claiming, recovery, heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from remediate import schema as t
from remediate.actions import default_registry
from remediate.engine import Engine, IngestResult
from remediate.errors import ConfigError, UnknownRunError
from remediate.playbooks import PlaybookSet, parse_playbook
from remediate.store import HistoryQuery, Store, decode_cursor, encode_cursor
from tests.store_json import history_json_of, run_json_of

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]
Ingest = Callable[..., IngestResult]
MakeAlert = Callable[..., dict[str, Any]]

PLAYBOOK = {
    "name": "xid",
    "match": {"alertname": ["GpuXidError", "GPUTemperatureHigh"]},
    "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
    "on_resolved": [{"action": "log", "with": {"message": "resolved"}}],
}
OTHER = {
    "name": "disk",
    "match": {"alertname": "DiskFull"},
    "steps": [{"action": "log", "with": {"message": "disk"}}],
}


@pytest.fixture
def engine(make_engine: MakeEngine) -> Engine:
    return make_engine(PLAYBOOK, OTHER)


def one(store: Store, table: sa.Table, *where: Any) -> Any:
    with store.read() as conn:
        return conn.execute(sa.select(table).where(*where)).one()


def all_rows(store: Store, table: sa.Table, *where: Any) -> list[Any]:
    with store.read() as conn:
        return conn.execute(sa.select(table).where(*where).order_by(table.c.id)).all()


def queue_runs(engine: Engine, ingest: Ingest, make_alert: MakeAlert, count: int, at: float = T0) -> list[int]:
    alerts = [make_alert("GpuXidError", labels={"Hostname": f"node-{i}"}) for i in range(count)]
    result = ingest(engine, *alerts, at=at)
    return [d.run_id for d in result.decisions if d.run_id is not None]


# --------------------------------------------------------------------------- schema


def test_a_fresh_database_gets_the_current_schema_version(store: Store, db_url: str) -> None:
    assert store.schema_version() == t.SCHEMA_VERSION
    with store.read() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    assert tables >= {"meta", "notifications", "alerts", "runs", "steps", "attempts", "decisions"}
    assert store.counts() == {"notifications": 0, "alerts": 0, "decisions": 0, "runs": 0, "steps": 0}


def test_opening_an_existing_database_keeps_its_data(
    store: Store, db_url: str, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    ingest(engine, make_alert("GpuXidError"), at=T0)
    before = store.counts()

    again = Store.open(db_url)
    try:
        assert again.upgrade() == t.SCHEMA_VERSION  # the version it found: nothing to create
        assert again.counts() == before
        assert again.schema_version() == t.SCHEMA_VERSION
    finally:
        again.close()


def test_a_database_with_a_newer_schema_is_refused(store: Store, db_url: str) -> None:
    with store.write() as conn:
        conn.execute(sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION + 1)))

    with pytest.raises(ConfigError, match=rf"schema version {t.SCHEMA_VERSION + 1}, newer than this remediate"):
        Store.open(db_url)


def test_a_database_url_that_cannot_work_is_a_config_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="cannot use database URL"):
        Store.open("nosuchdialect://x")
    with pytest.raises(ConfigError, match="cannot open database"):
        Store.open(f"sqlite:///{tmp_path}/missing-dir/r.db")


def test_sqlite_runs_in_wal_mode(store: Store) -> None:
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"


def test_ping_reaches_the_database(store: Store) -> None:
    store.ping()


# --------------------------------------------------------------------------- pause


def test_pause_state_is_off_until_set_and_remembers_who_and_why(store: Store) -> None:
    assert not store.pause_state().paused

    store.set_paused(True, by="alice", reason="maintenance", now=T0)
    state = store.pause_state()
    assert (state.paused, state.by, state.reason, state.since) == (True, "alice", "maintenance", T0)

    store.set_paused(False, by="bob", reason="", now=T0 + 5)
    state = store.pause_state()
    assert (state.paused, state.by, state.since) == (False, "bob", T0 + 5)


# --------------------------------------------------------------------------- history


def fill_history(engine: Engine, ingest: Ingest, make_alert: MakeAlert) -> None:
    """Twelve decisions over three hours: playbooks xid/disk, several alertnames, targets and statuses."""
    for hour in range(3):
        ingest(
            engine,
            make_alert("GpuXidError", labels={"Hostname": "node-a", "h": str(hour)}),
            make_alert("GPUTemperatureHigh", labels={"Hostname": "node-b", "h": str(hour)}),
            make_alert("DiskFull", labels={"Hostname": "node-a", "h": str(hour)}),
            make_alert("Unmatched", labels={"Hostname": "node-c", "h": str(hour)}),
            at=T0 + hour * 3600,
        )


@pytest.fixture(scope="module")
def history_store(tmp_path_factory: pytest.TempPathFactory, ingest: Ingest, make_alert: MakeAlert) -> Iterator[Store]:
    """fill_history in one database shared by this module's read-only history tests."""
    store = Store.open(f"sqlite:///{tmp_path_factory.mktemp('history') / 'remediate.db'}")
    registry = default_registry()
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, registry), parse_playbook(OTHER, registry)])
    fill_history(Engine(store=store, playbooks=playbooks, registry=registry), ingest, make_alert)
    yield store
    store.close()


def history(store: Store, **filters: Any) -> list[dict[str, Any]]:
    entries, cursor = history_json_of(store, HistoryQuery(limit=1000, **filters))
    assert cursor is None
    return entries


def test_history_lists_every_decision_newest_first(history_store: Store) -> None:
    entries = history(history_store)

    assert len(entries) == 12
    assert [e["id"] for e in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert [e["time"] for e in entries] == sorted((e["time"] for e in entries), reverse=True)
    newest = entries[0]
    assert (newest["alertname"], newest["decision"], newest["status"], newest["run"]) == (
        "Unmatched",
        "unmatched",
        "unmatched",
        None,
    )
    accepted = next(e for e in entries if e["decision"] == "accepted")
    assert accepted["run"]["id"] == accepted["run_id"]
    assert (accepted["run"]["phase"], accepted["run"]["mode"], accepted["run"]["status"]) == (
        "firing",
        "enforce",
        "queued",
    )


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"playbook": "xid"}, 6),
        ({"playbook": "disk"}, 3),
        ({"alertname": "GPUTemperatureHigh"}, 3),
        ({"target": "node-a"}, 6),
        ({"target": "node-a", "playbook": "disk"}, 3),
        ({"status": "unmatched"}, 3),
        ({"status": "queued"}, 9),
        ({"since": T0 + 3600}, 8),
        ({"until": T0 + 3600}, 4),
        ({"since": T0 + 3600, "until": T0 + 7200}, 4),
        ({"since": T0 + 3 * 3600}, 0),
        ({"playbook": "nope"}, 0),
    ],
)
def test_history_filters_combine(history_store: Store, filters: dict[str, Any], expected: int) -> None:
    entries = history(history_store, **filters)

    assert len(entries) == expected
    for key, value in filters.items():
        if key == "since":
            assert all(e["time"] >= value for e in entries)
        elif key == "until":
            assert all(e["time"] < value for e in entries)
        else:
            assert all(e[key] == value for e in entries)


def test_history_status_follows_the_run(store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert) -> None:
    fill_history(engine, ingest, make_alert)
    claimed = store.claim_run("w", T0)
    assert claimed is not None
    store.finish_run(claimed.id, "failed", now=T0 + 1, error="boom")

    (entry,) = history(store, status="failed")

    assert entry["run_id"] == claimed.id
    assert entry["run"]["error"] == "boom"
    assert entry["run"]["finished_at"] == T0 + 1


@pytest.mark.parametrize("limit", [1, 5, 11, 12])
def test_cursor_pagination_visits_every_entry_exactly_once(history_store: Store, limit: int) -> None:
    everything = [e["id"] for e in history(history_store)]
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        entries, cursor = history_json_of(history_store, HistoryQuery(limit=limit, cursor=cursor))
        pages += 1
        assert len(entries) <= limit
        seen.extend(e["id"] for e in entries)
        if cursor is None:
            break

    assert seen == everything
    assert pages == -(-12 // limit)


def test_cursor_pagination_keeps_the_filters(history_store: Store) -> None:
    first, cursor = history_json_of(history_store, HistoryQuery(playbook="xid", limit=4))
    second, end = history_json_of(history_store, HistoryQuery(playbook="xid", limit=4, cursor=cursor))

    assert end is None
    assert len(first) + len(second) == 6
    assert {e["playbook"] for e in first + second} == {"xid"}


@pytest.mark.parametrize("cursor", ["garbage!", "eDox", encode_cursor(5)[:-1] + "*", "ZDp4", "ZDotMQ"])
def test_a_bad_cursor_is_a_value_error(history_store: Store, cursor: str) -> None:
    with pytest.raises(ValueError, match="invalid cursor"):
        history_json_of(history_store, HistoryQuery(cursor=cursor))


def test_cursors_round_trip() -> None:
    assert decode_cursor(encode_cursor(12345)) == 12345


# --------------------------------------------------------------------------- run detail


def test_run_detail_shows_alert_decision_and_steps(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    (run_id,) = queue_runs(engine, ingest, make_alert, 1)

    detail = run_json_of(store, run_id)

    assert (detail["id"], detail["playbook"], detail["target"], detail["status"]) == (run_id, "xid", "node-0", "queued")
    assert detail["decision"]["decision"] == "accepted"
    assert detail["alert"]["labels"]["Hostname"] == "node-0"
    assert detail["alert"]["startsAt"] == "2026-01-01T00:00:00Z"
    assert [(s["index"], s["params"]["message"], s["status"], s["attempts"]) for s in detail["steps"]] == [
        (0, "one", "pending", []),
        (1, "two", "pending", []),
    ]
    with pytest.raises(UnknownRunError):
        run_json_of(store, run_id + 1000)


# --------------------------------------------------------------------------- claiming


def test_claim_run_takes_the_oldest_queued_run_with_its_alert(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    run_ids = queue_runs(engine, ingest, make_alert, 3)

    claimed = store.claim_run("host:1", T0 + 5)

    assert claimed is not None
    assert claimed.id == run_ids[0]
    assert (claimed.playbook, claimed.target, claimed.phase, claimed.mode) == ("xid", "node-0", "firing", "enforce")
    assert claimed.alert_context["labels"] == {"alertname": "GpuXidError", "Hostname": "node-0"}
    assert claimed.alert_context["status"] == "firing"
    assert claimed.alert_context["startsAt"] == "2026-01-01T00:00:00Z"
    run = one(store, t.runs, t.runs.c.id == claimed.id)
    assert (run.status, run.claimed_by, run.heartbeat_at, run.started_at) == ("running", "host:1", T0 + 5, T0 + 5)
    assert one(store, t.decisions, t.decisions.c.run_id == claimed.id).status == "running"
    assert store.queue_depth() == {"queued": 2, "running": 1, "awaiting_approval": 0}


def test_claim_run_returns_none_when_nothing_is_queued(store: Store) -> None:
    assert store.claim_run("w", T0) is None


def test_claim_run_is_exclusive_across_stores_and_threads(
    store: Store, db_url: str, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    run_ids = queue_runs(engine, ingest, make_alert, 60)
    other = Store.open(db_url)
    claims: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(name: str, mine: Store) -> None:
        got: list[int] = []
        try:
            start.wait()
            while (claimed := mine.claim_run(name, T0)) is not None:
                got.append(claimed.id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        claims[name] = got

    threads = [threading.Thread(target=worker, args=(f"worker-{i}", store if i % 2 else other)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        other.close()

    assert errors == []
    everything = [run_id for got in claims.values() for run_id in got]
    assert sorted(everything) == sorted(run_ids)  # every run once, none twice
    for name, got in claims.items():
        for run_id in got:
            assert one(store, t.runs, t.runs.c.id == run_id).claimed_by == name


def test_a_resolved_run_waits_until_its_firing_run_is_final(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    alert = make_alert("GpuXidError", labels={"Hostname": "node-a"})
    (firing_id,) = [d.run_id for d in ingest(engine, alert, at=T0).decisions]
    firing = store.claim_run("w", T0 + 1)
    assert firing is not None
    assert firing.id == firing_id
    resolved = make_alert("GpuXidError", labels={"Hostname": "node-a"}, status="resolved")
    (resolved_id,) = [d.run_id for d in ingest(engine, resolved, at=T0 + 2).decisions]

    assert store.claim_run("w", T0 + 3) is None  # firing run still running

    store.finish_run(firing_id, "succeeded", now=T0 + 4)
    claimed = store.claim_run("w", T0 + 5)
    assert claimed is not None
    assert (claimed.id, claimed.phase) == (resolved_id, "resolved")
    assert claimed.alert_context["status"] == "resolved"


def test_a_resolved_run_waits_for_a_firing_run_that_is_still_queued(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    ingest(engine, make_alert("GpuXidError", labels={"Hostname": "node-a"}), at=T0)
    ingest(engine, make_alert("GpuXidError", labels={"Hostname": "node-a"}, status="resolved"), at=T0 + 1)

    first = store.claim_run("w", T0 + 2)
    assert first is not None
    assert first.phase == "firing"
    assert store.claim_run("w", T0 + 3) is None


def test_finish_run_records_the_outcome_and_releases_the_claim(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    queue_runs(engine, ingest, make_alert, 1)
    claimed = store.claim_run("w", T0)
    assert claimed is not None

    store.finish_run(claimed.id, "succeeded", now=T0 + 9)

    run = one(store, t.runs, t.runs.c.id == claimed.id)
    assert (run.status, run.finished_at, run.claimed_by, run.error) == ("succeeded", T0 + 9, None, None)
    assert one(store, t.decisions, t.decisions.c.run_id == claimed.id).status == "succeeded"


# --------------------------------------------------------------------------- steps, attempts, recovery


def test_attempts_are_numbered_and_counted_on_the_step(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    queue_runs(engine, ingest, make_alert, 1)
    claimed = store.claim_run("w", T0)
    assert claimed is not None
    step = store.steps_of(claimed.id)[0]

    first = store.start_attempt(step.id, T0 + 1)
    store.finish_attempt(step.id, first, "retryable_error", "busy", T0 + 2)
    second = store.start_attempt(step.id, T0 + 3)
    store.finish_attempt(step.id, second, "succeeded", None, T0 + 4)
    store.finish_step(step.id, "succeeded", now=T0 + 4, result={"ok": True})

    assert (first, second) == (1, 2)
    (detail_step, _) = run_json_of(store, claimed.id)["steps"]
    assert detail_step["status"] == "succeeded"
    assert detail_step["result"] == {"ok": True}
    assert detail_step["started_at"] == T0 + 1
    assert [(a["number"], a["outcome"], a["error"]) for a in detail_step["attempts"]] == [
        (1, "retryable_error", "busy"),
        (2, "succeeded", None),
    ]
    assert store.steps_of(claimed.id)[0].attempts == 2


def test_recover_stale_interrupts_the_running_step_and_requeues_the_run(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    queue_runs(engine, ingest, make_alert, 2)
    claimed = store.claim_run("deadhost:123", T0)
    assert claimed is not None
    first, second = store.steps_of(claimed.id)
    store.finish_step(first.id, "succeeded", now=T0 + 1, result={})
    store.start_attempt(second.id, T0 + 2)

    recovered = store.recover_stale(now=T0 + 3, stale_after=60, is_dead=lambda owner: owner == "deadhost:123")

    assert recovered == [claimed.id]
    run = one(store, t.runs, t.runs.c.id == claimed.id)
    assert (run.status, run.claimed_by) == ("queued", None)
    assert one(store, t.decisions, t.decisions.c.run_id == claimed.id).status == "queued"
    steps = store.steps_of(claimed.id)
    assert [s.status for s in steps] == ["succeeded", "interrupted"]
    assert one(store, t.steps, t.steps.c.id == second.id).error == "the executor stopped while this step was running"
    (attempt,) = all_rows(store, t.attempts, t.attempts.c.step_id == second.id)
    assert (attempt.outcome, attempt.finished_at) == ("interrupted", T0 + 3)
    again = store.claim_run("new:1", T0 + 4)
    assert again is not None
    assert again.id == claimed.id


def test_recover_stale_leaves_live_runs_alone_and_takes_silent_ones(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    queue_runs(engine, ingest, make_alert, 2)
    quiet = store.claim_run("a:1", T0)
    lively = store.claim_run("b:2", T0)
    assert quiet is not None
    assert lively is not None
    store.heartbeat([lively.id], "b:2", T0 + 100)

    assert store.recover_stale(now=T0 + 30, stale_after=60, is_dead=lambda owner: False) == []
    assert store.recover_stale(now=T0 + 120, stale_after=60, is_dead=lambda owner: False) == [quiet.id]
    assert one(store, t.runs, t.runs.c.id == lively.id).status == "running"


def test_heartbeat_only_touches_the_claimers_own_runs(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    queue_runs(engine, ingest, make_alert, 2)
    mine = store.claim_run("me:1", T0)
    theirs = store.claim_run("them:2", T0)
    assert mine is not None
    assert theirs is not None

    store.heartbeat([mine.id, theirs.id], "me:1", T0 + 50)
    store.heartbeat([], "me:1", T0 + 60)

    assert one(store, t.runs, t.runs.c.id == mine.id).heartbeat_at == T0 + 50
    assert one(store, t.runs, t.runs.c.id == theirs.id).heartbeat_at == T0
