"""remediate.store.history: filters, cursors, the status that follows the run, one run in detail, typed rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.errors import UnknownRunError
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import AttemptOutcome, RunEnd, RunStatus, RunWrite, StepEnd, StepStatus
from remediate.store import (
    AlertDetail,
    AttemptDetail,
    DecisionSummary,
    HistoryEntry,
    HistoryQuery,
    RunDetail,
    RunSummary,
    StepDetail,
    Store,
    decode_cursor,
    encode_cursor,
)
from tests.conftest import alert_payload, ingest_alerts
from tests.support.postgres import PostgresCluster
from tests.support.store_json import history_json_of
from tests.support.stores import DATABASES, EVERY_DATABASE, start_attempt
from tests.unit.store.support import OTHER, PLAYBOOK, T0


def fill_history(engine: Engine) -> None:
    """Twelve decisions over three hours: playbooks xid/disk, several alertnames, targets and statuses."""
    for hour in range(3):
        ingest_alerts(
            engine,
            alert_payload("GpuXidError", labels={"Hostname": "node-a", "h": str(hour)}),
            alert_payload("GPUTemperatureHigh", labels={"Hostname": "node-b", "h": str(hour)}),
            alert_payload("DiskFull", labels={"Hostname": "node-a", "h": str(hour)}),
            alert_payload("Unmatched", labels={"Hostname": "node-c", "h": str(hour)}),
            at=T0 + hour * 3600,
        )


@pytest.fixture(scope="module", params=DATABASES)
def history_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """fill_history in one database (of each kind) shared by this module's read-only history tests."""
    if request.param == "postgresql":
        postgres: PostgresCluster = request.getfixturevalue("postgres")
        url = postgres.database(template=postgres.schema_template())
        request.addfinalizer(lambda: postgres.drop(url))
    else:
        url = f"sqlite:///{tmp_path_factory.mktemp('history') / 'remediate.db'}"
    store = Store.open(url)
    registry = default_registry()
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, registry), parse_playbook(OTHER, registry)])
    fill_history(Engine(store=store, playbooks=playbooks, registry=registry))
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


@EVERY_DATABASE
def test_history_status_follows_the_run(store: Store, engine: Engine) -> None:
    fill_history(engine)
    claimed = store.queue.claim("w", T0)
    assert claimed is not None
    store.queue.record(RunWrite(claimed.lease, run_end=RunEnd(claimed.id, RunStatus.FAILED, "boom")), T0 + 1)

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


# --------------------------------------------------------------------------- typed rows


def _one_run(engine: Engine) -> int:
    result = ingest_alerts(
        engine,
        alert_payload("GpuXidError", labels={"Hostname": "node-a"}),
        alert_payload("Unmatched", labels={"Hostname": "node-b"}),
        at=T0,
    )
    (run_id,) = [d.run_id for d in result.decisions if d.run_id is not None]
    return run_id


@EVERY_DATABASE
def test_a_run_detail_is_typed_down_to_its_attempts(store: Store, engine: Engine) -> None:
    run_id = _one_run(engine)
    claimed = store.queue.claim("host:1", T0 + 1)
    assert claimed is not None and claimed.id == run_id
    first, second = store.queue.steps_of(run_id)
    lease = claimed.lease
    start_attempt(store, lease, first.id, 1, T0 + 2, plan={"would": "log"})
    store.queue.finish_attempt(first.id, 1, AttemptOutcome.FAILED, "flaky", T0 + 3, lease=lease)
    start_attempt(store, lease, first.id, 2, T0 + 4)
    gave_up = StepEnd(first.id, StepStatus.FAILED, error="gave up")
    store.queue.record(
        RunWrite(lease, ends=(gave_up,), skip=(second.id,), skip_reason="an earlier step failed",
                 run_end=RunEnd(run_id, RunStatus.FAILED, "step 0 failed")),
        T0 + 5,
    )  # fmt: skip

    detail = store.history.run_detail(run_id)

    assert isinstance(detail, RunDetail)
    assert (detail.id, detail.playbook, detail.target, detail.status, detail.error) == (
        run_id,
        "xid",
        "node-a",
        "failed",
        "step 0 failed",
    )
    assert (detail.created_at, detail.started_at, detail.finished_at, detail.rerunnable) == (T0, T0 + 1, T0 + 5, False)
    assert isinstance(detail.decision, DecisionSummary)
    assert detail.decision.decision == "accepted"
    assert isinstance(detail.alert, AlertDetail)
    assert detail.alert.labels == {"alertname": "GpuXidError", "Hostname": "node-a"}
    assert (detail.alert.status, detail.alert.starts_at) == ("firing", "2026-01-01T00:00:00Z")
    assert all(isinstance(s, StepDetail) for s in detail.steps)
    step, skipped = detail.steps
    assert (step.index, step.status, step.plan, step.error, step.params["message"]) == (
        0,
        "failed",
        {"would": "log"},
        "gave up",
        "one",
    )
    assert step.attempts == [
        AttemptDetail(1, T0 + 2, T0 + 3, "failed", "flaky", "host:1"),
        AttemptDetail(2, T0 + 4, None, None, None, "host:1"),
    ]
    assert (skipped.index, skipped.status, skipped.error, skipped.attempts) == (
        1,
        "skipped",
        "an earlier step failed",
        [],
    )
    with pytest.raises(AttributeError):  # rows are immutable NamedTuples
        detail.status = "succeeded"  # type: ignore[misc]
    with pytest.raises(UnknownRunError):
        store.history.run_detail(run_id + 1000)


@EVERY_DATABASE
def test_history_entries_are_typed_with_their_run_or_none(store: Store, engine: Engine) -> None:
    run_id = _one_run(engine)

    entries, cursor = store.history.page(HistoryQuery())

    assert cursor is None
    assert all(isinstance(e, HistoryEntry) for e in entries)
    by_alert = {e.alertname: e for e in entries}
    accepted, unmatched = by_alert["GpuXidError"], by_alert["Unmatched"]
    assert (accepted.decision, accepted.status, accepted.run_id, accepted.target) == (
        "accepted",
        "queued",
        run_id,
        "node-a",
    )
    assert accepted.run == RunSummary(run_id, "firing", "enforce", "queued", None, None, None)
    assert (unmatched.decision, unmatched.run_id, unmatched.run, unmatched.playbook) == ("unmatched", None, None, None)
    assert accepted.time == T0


# --------------------------------------------------------------------------- the undo linked both ways


@EVERY_DATABASE
def test_run_links_join_a_firing_run_and_its_resolved_run_of_the_same_occurrence(store: Store, engine: Engine) -> None:
    (firing_id,) = [
        d.run_id for d in ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "a"}), at=T0).decisions
    ]
    other = alert_payload("GpuXidError", labels={"Hostname": "b"})  # another alert: no link
    (other_id,) = [d.run_id for d in ingest_alerts(engine, other, at=T0 + 1).decisions]
    resolved = alert_payload("GpuXidError", labels={"Hostname": "a"}, status="resolved")
    (resolved_id,) = [d.run_id for d in ingest_alerts(engine, resolved, at=T0 + 2).decisions]

    assert store.history.run_links(firing_id) == (None, [resolved_id])
    assert store.history.run_links(resolved_id) == (firing_id, [])
    assert store.history.run_links(other_id) == (None, [])
    with pytest.raises(UnknownRunError):
        store.history.run_links(resolved_id + 1000)


@pytest.mark.parametrize(
    ("search", "filters", "expected"),
    [
        ("gpu", {}, {("GpuXidError", "node-a", "xid"), ("GPUTemperatureHigh", "node-b", "xid")}),
        ("XID", {}, {("GpuXidError", "node-a", "xid"), ("GPUTemperatureHigh", "node-b", "xid")}),
        ("node-a", {}, {("GpuXidError", "node-a", "xid"), ("DiskFull", "node-a", "disk")}),
        ("isk", {}, {("DiskFull", "node-a", "disk")}),
        ("node-a", {"playbook": "disk"}, {("DiskFull", "node-a", "disk")}),
        ("%", {}, set()),  # a LIKE wildcard is a character to find, not a pattern
        ("_", {}, set()),
        ("nothing-like-it", {}, set()),
    ],
)
def test_history_search_finds_text_in_the_alertname_target_or_playbook(
    history_store: Store, search: str, filters: dict[str, Any], expected: set[tuple[str, str, str]]
) -> None:
    """The pages' search box; the filters match a whole value only."""
    entries = history(history_store, search=search, **filters)

    assert {(e["alertname"], e["target"], e["playbook"]) for e in entries} == expected
    assert len(entries) == 3 * len(expected)  # each hour's decision
