"""What remediate.engine does to make an ingest cheaper must not change what it answers: the webhook's response
bytes, the garbage collector paused only while a large notification is ingested (issue 14)."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask, jsonify

from remediate import engine as engine_module
from remediate.engine import GC_PAUSE_ALERTS, DecisionRecord, Engine, IngestResult
from remediate.runs import Decision

MakeEngine = Callable[..., Engine]
MakeAlert = Callable[..., dict[str, Any]]

PLAYBOOK = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "steps": [{"action": "log", "with": {"message": "GPU {{ labels.gpu }} on {{ labels.Hostname }}"}}],
}


@pytest.fixture
def gc_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _record(decision: Decision, run_id: int | None) -> DecisionRecord:
    return DecisionRecord("GpuXidError", "f", "xid", "node-a", decision, "why", run_id)


@pytest.mark.parametrize(
    "records",
    [
        [_record(Decision.ACCEPTED, 7)],
        [_record(Decision.ACCEPTED, 7), _record(Decision.DUPLICATE, None), _record(Decision.UNMATCHED, None)],
        [_record(Decision.ACCEPTED, n) for n in range(1, 150)],  # the runs listed are cut at 100
    ],
)
def test_the_summary_json_is_what_flask_jsonify_answered(records: list[DecisionRecord]) -> None:
    result = IngestResult(12, "firing", len(records), {"firing": len(records)}, records)
    with Flask("t").app_context():
        assert result.summary_json() == jsonify(result.summary()).get_data()
    assert json.loads(result.summary_json()) == result.summary()


def test_a_large_notification_is_ingested_with_the_collector_paused_then_on_again(
    make_engine: MakeEngine, make_alert: MakeAlert, make_notification: Callable[..., dict], gc_on: None
) -> None:
    engine = make_engine(PLAYBOOK)
    seen: list[bool] = []
    real_ingest = engine.ingest

    def ingest(*args: Any, **kwargs: Any) -> IngestResult:
        seen.append(gc.isenabled())
        return real_ingest(*args, **kwargs)

    engine.ingest = ingest  # type: ignore[method-assign]
    alert = {"labels": {"Hostname": "node-a", "gpu": "1", "severity": "critical"}}
    small = make_notification(make_alert("GpuXidError", fingerprint="f-small", **alert))
    large = make_notification(
        *(make_alert("GpuXidError", fingerprint=f"f{i:05d}", **alert) for i in range(GC_PAUSE_ALERTS))
    )
    engine.ingest_body(json.dumps(small).encode(), received_at=1.0)
    result = engine.ingest_body(json.dumps(large).encode(), received_at=2.0)
    assert seen == [True, False]
    assert gc.isenabled()
    assert result.alerts == result.runs_queued == GC_PAUSE_ALERTS


def test_a_refused_large_notification_turns_the_collector_on_again(
    make_engine: MakeEngine, make_alert: MakeAlert, make_notification: Callable[..., dict], gc_on: None
) -> None:
    engine = make_engine(PLAYBOOK)
    alerts = [make_alert("GpuXidError", fingerprint=f"f{i:05d}") for i in range(GC_PAUSE_ALERTS)]
    alerts[-1]["startsAt"] = "yesterday"
    with pytest.raises(engine_module.PayloadError, match="startsAt"):
        engine.ingest_body(json.dumps(make_notification(*alerts)).encode(), received_at=1.0)
    assert gc.isenabled()


def test_the_collector_stays_paused_until_the_last_large_ingest_ends(gc_on: None) -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    during: list[bool] = []

    def first() -> None:
        with engine_module._gc_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(5)
    with engine_module._gc_paused():
        second_in.set()
        first_out.wait(5)
        during.append(gc.isenabled())  # the first ended: still paused for this one
    thread.join(5)
    assert during == [False]
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off(gc_on: None) -> None:
    gc.disable()
    with engine_module._gc_paused():
        pass
    assert not gc.isenabled()
