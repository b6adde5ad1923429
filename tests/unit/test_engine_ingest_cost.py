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
from remediate.alerts import parse_notification
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


# --------------------------------------------------------------------------- one render per distinct values read


def _evaluate(engine: Engine, make_notification: Callable[..., dict], *alerts: dict[str, Any]) -> list[Any]:
    return engine.evaluate_all(parse_notification(make_notification(*alerts)).alerts)


def _counting_renders(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    rendered: list[str] = []
    real = engine._render_steps

    def counting(specs: Any, prefix: str, context: Any) -> Any:
        rendered.append(context["fingerprint"])
        return real(specs, prefix, context)

    monkeypatch.setattr(engine, "_render_steps", counting)
    return rendered


def _messages(evaluations: list[Any]) -> list[Any]:
    return [
        [(s.params["message"], s.params.get("level")) for s in evs[0].steps] or evs[0].error
        for _, _, evs in evaluations
    ]


def test_alerts_whose_templates_read_the_same_values_share_one_render(
    make_engine: MakeEngine,
    make_alert: MakeAlert,
    make_notification: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine(PLAYBOOK)
    rendered = _counting_renders(engine, monkeypatch)
    a = make_alert("GpuXidError", fingerprint="fa", labels={"Hostname": "node-a", "gpu": "1", "pod": "p1"})
    b = make_alert("GpuXidError", fingerprint="fb", labels={"Hostname": "node-a", "gpu": "1", "pod": "p1"})
    c = make_alert("GpuXidError", fingerprint="fc", labels={"Hostname": "node-b", "gpu": "1", "pod": "p1"})
    evaluations = _evaluate(engine, make_notification, a, b, c)
    assert rendered == ["fa", "fc"]
    assert _messages(evaluations) == [
        [("GPU 1 on node-a", "info")],
        [("GPU 1 on node-a", "info")],
        [("GPU 1 on node-b", "info")],
    ]
    # Each alert keeps its own evaluation: its alert, dedupe key and target.
    assert [evs[0].alert.fingerprint for _, _, evs in evaluations] == ["fa", "fb", "fc"]
    assert len({evs[0].dedupe_key for _, _, evs in evaluations}) == 3
    # Another notification renders again (the renders are the notification's own).
    _evaluate(engine, make_notification, a)
    assert rendered == ["fa", "fc", "fa"]


def test_a_render_error_is_shared_only_by_alerts_that_read_the_same_values(
    make_engine: MakeEngine,
    make_alert: MakeAlert,
    make_notification: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine(PLAYBOOK)
    without_gpu = make_alert("GpuXidError", fingerprint="f1", labels={"Hostname": "node-a"})
    with_gpu = make_alert("GpuXidError", fingerprint="f2", labels={"Hostname": "node-a", "gpu": "2"})
    again_without = make_alert("GpuXidError", fingerprint="f3", labels={"Hostname": "node-a"})
    messages = _messages(_evaluate(engine, make_notification, without_gpu, with_gpu, again_without))
    assert "gpu" in messages[0] and messages[2] == messages[0]
    assert messages[1] == [("GPU 2 on node-a", "info")]


@pytest.mark.parametrize(
    "template",
    ["{{ [1, 2, 3, 4, 5, 6, 7, 8, 9] | random }} on {{ labels.Hostname }}", "{{ lipsum(1) }}", "{{ fingerprint }}"],
)
def test_templates_that_may_differ_for_the_same_labels_render_per_alert(
    template: str,
    make_engine: MakeEngine,
    make_alert: MakeAlert,
    make_notification: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine({**PLAYBOOK, "steps": [{"action": "log", "with": {"message": template}}]})
    rendered = _counting_renders(engine, monkeypatch)
    alerts = [make_alert("GpuXidError", fingerprint=f"f{i}", labels={"Hostname": "node-a"}) for i in range(4)]
    _evaluate(engine, make_notification, *alerts)
    assert rendered == ["f0", "f1", "f2", "f3"]
