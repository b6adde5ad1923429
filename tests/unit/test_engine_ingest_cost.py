"""What remediate.judging.engine does to make an ingest cheaper must not change what it answers: the webhook's
response bytes; each alert's steps rendered from its own context."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask, jsonify

from remediate.intake.alerts import parse_notification
from remediate.judging.engine import DecisionRecord, Engine, IngestResult
from remediate.runs import Decision
from tests.conftest import alert_payload, notification_payload

MakeEngine = Callable[..., Engine]

PLAYBOOK = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "steps": [{"action": "log", "with": {"message": "GPU {{ labels.gpu }} on {{ labels.Hostname }}"}}],
}


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


# --------------------------------------------------------------------------- one render per alert


def _evaluate(engine: Engine, *alerts: dict[str, Any]) -> list[Any]:
    return engine.evaluate_all(parse_notification(notification_payload(*alerts)).alerts)


def _messages(evaluations: list[Any]) -> list[Any]:
    return [
        [(s.params["message"], s.params.get("level")) for s in evs[0].steps] or evs[0].error
        for _, _, evs in evaluations
    ]


def test_a_render_error_is_the_alerts_own(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine(PLAYBOOK)
    without_gpu = alert_payload("GpuXidError", fingerprint="f1", labels={"Hostname": "node-a"})
    with_gpu = alert_payload("GpuXidError", fingerprint="f2", labels={"Hostname": "node-a", "gpu": "2"})
    again_without = alert_payload("GpuXidError", fingerprint="f3", labels={"Hostname": "node-a"})
    messages = _messages(_evaluate(engine, without_gpu, with_gpu, again_without))
    assert "gpu" in messages[0] and messages[2] == messages[0]
    assert messages[1] == [("GPU 2 on node-a", "info")]
