"""What remediate.engine does to make an ingest cheaper must not change what it answers: the webhook's response
bytes (issue 14); no process-wide garbage collector pause, no render shared between alerts (issue 25)."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask, jsonify

from remediate import engine as engine_module
from remediate.alerts import parse_notification
from remediate.engine import DecisionRecord, Engine, IngestResult
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


def test_a_large_notification_is_ingested_with_the_collector_as_it_was(
    make_engine: MakeEngine, make_alert: MakeAlert, make_notification: Callable[..., dict], gc_on: None
) -> None:
    """Issue 25: no process-wide pause of the garbage collector (it was off for every thread of the worker while
    a notification of 100+ alerts was ingested)."""
    engine = make_engine(PLAYBOOK)
    seen: list[bool] = []
    real_ingest = engine.ingest

    def ingest(*args: Any, **kwargs: Any) -> IngestResult:
        seen.append(gc.isenabled())
        return real_ingest(*args, **kwargs)

    engine.ingest = ingest  # type: ignore[method-assign]
    alert = {"labels": {"Hostname": "node-a", "gpu": "1", "severity": "critical"}}
    large = make_notification(*(make_alert("GpuXidError", fingerprint=f"f{i:05d}", **alert) for i in range(500)))
    result = engine.ingest_body(json.dumps(large).encode(), received_at=2.0)
    assert seen == [True]
    assert gc.isenabled()
    assert result.alerts == result.runs_queued == 500


# --------------------------------------------------------------------------- one render per alert


def _evaluate(engine: Engine, make_notification: Callable[..., dict], *alerts: dict[str, Any]) -> list[Any]:
    return engine.evaluate_all(parse_notification(make_notification(*alerts)).alerts)


def _counting_renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fingerprints of the alerts whose step params the engine renders, in order."""
    rendered: list[str] = []
    real = engine_module.render_params

    def counting(params: Any, context: Any, **kwargs: Any) -> Any:
        rendered.append(context["fingerprint"])
        return real(params, context, **kwargs)

    monkeypatch.setattr(engine_module, "render_params", counting)
    return rendered


def _messages(evaluations: list[Any]) -> list[Any]:
    return [
        [(s.params["message"], s.params.get("level")) for s in evs[0].steps] or evs[0].error
        for _, _, evs in evaluations
    ]


def test_every_alert_renders_its_own_steps(
    make_engine: MakeEngine,
    make_alert: MakeAlert,
    make_notification: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 25: no render shared between alerts whose templates were judged to read the same values (only
    correct if every template's reads are judged right): each alert's steps come from its own context."""
    engine = make_engine(PLAYBOOK)
    rendered = _counting_renders(monkeypatch)
    a = make_alert("GpuXidError", fingerprint="fa", labels={"Hostname": "node-a", "gpu": "1", "pod": "p1"})
    b = make_alert("GpuXidError", fingerprint="fb", labels={"Hostname": "node-a", "gpu": "1", "pod": "p1"})
    c = make_alert("GpuXidError", fingerprint="fc", labels={"Hostname": "node-b", "gpu": "1", "pod": "p1"})
    evaluations = _evaluate(engine, make_notification, a, b, c)
    assert rendered == ["fa", "fb", "fc"]
    assert _messages(evaluations) == [
        [("GPU 1 on node-a", "info")],
        [("GPU 1 on node-a", "info")],
        [("GPU 1 on node-b", "info")],
    ]
    assert [evs[0].alert.fingerprint for _, _, evs in evaluations] == ["fa", "fb", "fc"]
    assert len({evs[0].dedupe_key for _, _, evs in evaluations}) == 3
    assert evaluations[0][2][0].steps[0].params is not evaluations[1][2][0].steps[0].params


def test_a_render_error_is_the_alerts_own(
    make_engine: MakeEngine,
    make_alert: MakeAlert,
    make_notification: Callable[..., dict],
) -> None:
    engine = make_engine(PLAYBOOK)
    without_gpu = make_alert("GpuXidError", fingerprint="f1", labels={"Hostname": "node-a"})
    with_gpu = make_alert("GpuXidError", fingerprint="f2", labels={"Hostname": "node-a", "gpu": "2"})
    again_without = make_alert("GpuXidError", fingerprint="f3", labels={"Hostname": "node-a"})
    messages = _messages(_evaluate(engine, make_notification, without_gpu, with_gpu, again_without))
    assert "gpu" in messages[0] and messages[2] == messages[0]
    assert messages[1] == [("GPU 2 on node-a", "info")]
