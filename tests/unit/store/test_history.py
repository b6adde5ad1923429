"""remediate.store.history: the history page and a run's detail come back as typed, frozen rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from remediate.engine import Engine, IngestResult
from remediate.runs import AttemptOutcome, RunEnd, RunStatus, StepStatus
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
)

T0 = 1_767_225_600.0
PLAYBOOK = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
}


def _one_run(
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
) -> int:
    result = ingest(
        make_engine(PLAYBOOK),
        make_alert("GpuXidError", labels={"Hostname": "node-a"}),
        make_alert("Unmatched", labels={"Hostname": "node-b"}),
        at=T0,
    )
    (run_id,) = [d.run_id for d in result.decisions if d.run_id is not None]
    return run_id


def test_a_run_detail_is_typed_down_to_its_attempts(
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
) -> None:
    run_id = _one_run(store, make_engine, ingest, make_alert)
    claimed = store.claim_run("host:1", T0 + 1)
    assert claimed is not None and claimed.id == run_id
    first, second = store.steps_of(run_id)
    number = store.start_attempt(first.id, T0 + 2, plan={"would": "log"})
    store.finish_attempt(first.id, number, AttemptOutcome.FAILED, "flaky", T0 + 3)
    again = store.start_attempt(first.id, T0 + 4)
    store.finish_step(
        first.id,
        StepStatus.FAILED,
        now=T0 + 5,
        error="gave up",
        run_end=RunEnd(run_id, RunStatus.FAILED, "step 0 failed"),
        skip=[second.id],
        skip_reason="an earlier step failed",
    )

    detail = store.run_detail(run_id)

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
        AttemptDetail(number, T0 + 2, T0 + 3, "failed", "flaky"),
        AttemptDetail(again, T0 + 4, None, None, None),
    ]
    assert (skipped.index, skipped.status, skipped.error, skipped.attempts) == (
        1,
        "skipped",
        "an earlier step failed",
        [],
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        detail.status = "succeeded"  # type: ignore[misc]


def test_history_entries_are_typed_with_their_run_or_none(
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
) -> None:
    run_id = _one_run(store, make_engine, ingest, make_alert)

    entries, cursor = store.history(HistoryQuery())

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


def test_the_next_cursor_is_none_on_the_last_page_only(
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
) -> None:
    _one_run(store, make_engine, ingest, make_alert)

    (newest,), cursor = store.history(HistoryQuery(limit=1))
    (oldest,), end = store.history(HistoryQuery(limit=1, cursor=cursor))

    assert cursor is not None and end is None
    assert newest.id > oldest.id
