"""Values from labels that become indexed keys stay bounded, so no database rejects them."""

from __future__ import annotations

import pytest

from remediate.alerts import MAX_ALERTNAME_LENGTH, parse_notification
from remediate.errors import PayloadError
from remediate.playbooks import MAX_TARGET_LENGTH, TargetSpec
from tests.conftest import alert_payload, notification_payload


def test_a_node_label_longer_than_the_target_limit_is_cut_and_made_unique_by_a_hash() -> None:
    spec = TargetSpec()
    first = parse_notification(notification_payload(alert_payload(labels={"node": "n" * 300 + "a"}))).alerts[0]
    second = parse_notification(notification_payload(alert_payload(labels={"node": "n" * 300 + "b"}))).alerts[0]
    assert len(spec.resolve(first)) == MAX_TARGET_LENGTH
    assert spec.resolve(first) != spec.resolve(second)
    assert spec.resolve(first).startswith("n" * 100)


def test_a_short_node_label_is_the_target_unchanged() -> None:
    alert = parse_notification(notification_payload(alert_payload(labels={"node": "gpu-node-7"}))).alerts[0]
    assert TargetSpec().resolve(alert) == "gpu-node-7"


def test_an_alertname_over_the_limit_is_a_payload_error_naming_the_field() -> None:
    payload = notification_payload(alert_payload("A" * (MAX_ALERTNAME_LENGTH + 1)))
    with pytest.raises(PayloadError) as caught:
        parse_notification(payload)
    assert caught.value.field == "alerts[0].labels.alertname"
