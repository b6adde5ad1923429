"""AlertRef, the alert as a step sees it (StepContext.alert), and `alert_ref`, its one builder."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediate.agentwire.protocol import StepRequest
from remediate.intake.alertref import AlertRef
from remediate.intake.alerts import alert_ref, parse_notification

PAYLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "payloads"


@pytest.fixture
def resolved() -> AlertRef:
    (alert,) = parse_notification(json.loads((PAYLOADS / "am-0.25-resolved.json").read_text("utf-8"))).alerts
    return alert_ref(alert.template_context())


def test_an_alerts_ref_carries_what_actions_read_with_startsat_parsed_once(resolved: AlertRef) -> None:
    assert resolved == AlertRef(
        alertname="GpuXidError",
        status="resolved",
        fingerprint="c5801e9cde93e74f",
        labels={"alertname": "GpuXidError", "gpu": "3", "namespace": "ml", "pod": "trainer-0", "severity": "critical"},
        annotations={"runbook": "restart-pod", "summary": "GPU 3 Xid error"},
        starts_at=datetime(2026, 11, 21, 5, 39, 18, 649981, tzinfo=UTC).timestamp(),
        starts_at_text="2026-11-21T05:39:18.649981Z",
        ends_at_text="2026-11-21T05:40:18.649981Z",
        generator_url="http://example/graph",
    )


def test_the_mapping_shape_is_the_template_context(resolved: AlertRef) -> None:
    (alert,) = parse_notification(json.loads((PAYLOADS / "am-0.25-resolved.json").read_text("utf-8"))).alerts

    assert resolved.as_mapping() == alert.template_context()


def test_the_agent_request_carries_the_alert_unchanged_on_the_wire(resolved: AlertRef) -> None:
    sent = StepRequest("test.echo", {}, 3, 1, "pb", "node-a", resolved.as_mapping(), 30.0)

    received = StepRequest.parse(json.loads(sent.encode()))

    assert received.alert == {
        "labels": dict(resolved.labels),
        "annotations": dict(resolved.annotations),
        "status": "resolved",
        "alertname": "GpuXidError",
        "fingerprint": "c5801e9cde93e74f",
        "startsAt": "2026-11-21T05:39:18.649981Z",
        "endsAt": "2026-11-21T05:40:18.649981Z",
        "generatorURL": "http://example/graph",
    }
    assert alert_ref(received.alert) == resolved


def test_nanoseconds_stay_in_the_text_the_occurrence_is_keyed_by() -> None:
    ref = alert_ref({"fingerprint": "f", "startsAt": "2026-01-01T00:00:00.123456789Z"})

    assert ref.starts_at_text == "2026-01-01T00:00:00.123456789Z"
    assert ref.starts_at == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("context", "starts_at"),
    [
        ({}, None),
        ({"startsAt": ""}, None),
        ({"startsAt": "yesterday"}, None),
        ({"startsAt": 12}, None),
        ({"startsAt": "0001-01-01T00:00:00Z"}, datetime(1, 1, 1, tzinfo=UTC).timestamp()),  # Go's zero time
    ],
)
def test_a_missing_or_unreadable_start_is_none_and_never_raises(context: dict, starts_at: float | None) -> None:
    assert alert_ref(context).starts_at == starts_at


def test_a_malformed_request_alert_gives_empty_fields_not_an_error() -> None:
    ref = alert_ref({"labels": ["Hostname", "node-a"], "annotations": None, "fingerprint": None, "status": 1})

    assert (dict(ref.labels), dict(ref.annotations), ref.fingerprint, ref.status) == ({}, {}, "", "1")


def test_an_action_cannot_change_the_alert_another_step_sees() -> None:
    labels = {"Hostname": "node-a"}
    ref = alert_ref({"labels": labels})

    labels["Hostname"] = "node-b"  # the caller's dict is copied
    with pytest.raises(TypeError):
        ref.labels["Hostname"] = "node-c"  # type: ignore[index]
    with pytest.raises(AttributeError):
        ref.fingerprint = "other"  # type: ignore[misc]
    assert ref.labels == {"Hostname": "node-a"}
    assert AlertRef().as_mapping()["labels"] == {}
