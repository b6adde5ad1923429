"""The alert parser's fast path (a map of plain ASCII strings checked at once, label names remembered as valid)
refuses what the field-by-field checks refuse, with the same field named (remediate.intake.alerts._string_map)."""

from __future__ import annotations

import pytest

from remediate.errors import PayloadError
from remediate.intake.alerts import MAX_LABEL_LENGTH, MAX_LABELS, parse_notification
from tests.conftest import alert_payload, notification_payload

NAMES = {"Hostname": "node-a", "gpu": "1", "severity": "critical"}


def _error(labels: dict[str, object], annotations: dict[str, object] | None = None) -> PayloadError:
    payload = notification_payload(alert_payload(fingerprint="f1"))
    payload["alerts"][0]["labels"] = {"alertname": "GpuXidError", **labels}
    if annotations is not None:
        payload["alerts"][0]["annotations"] = annotations
    with pytest.raises(PayloadError) as raised:
        parse_notification(payload)
    return raised.value


def test_names_seen_valid_still_have_their_values_checked() -> None:
    parse_notification(notification_payload(alert_payload(labels=NAMES)))  # these names are now remembered
    assert _error({**NAMES, "gpu": 1}).field == "alerts[0].labels.gpu"
    assert _error({**NAMES, "gpu": "x" * (MAX_LABEL_LENGTH + 1)}).field == "alerts[0].labels.gpu"
    assert _error({**NAMES, "gpu": "\ud800"}).field == "alerts[0].labels.gpu"


def test_what_the_fast_path_does_not_take_is_refused_by_name() -> None:
    assert _error({**NAMES, "bad-name": "v"}).field == 'alerts[0].labels["bad-name"]'
    assert _error({**NAMES, "n" * (MAX_LABEL_LENGTH + 1): "v"}).field.startswith("alerts[0].labels")
    assert "at most" in _error({f"l{i}": "v" for i in range(MAX_LABELS + 1)}).detail
    assert _error(NAMES, {"summary": None}).field == "alerts[0].annotations.summary"
    assert _error(NAMES, {"summary": "\udc00"}).field == "alerts[0].annotations.summary"


def test_non_ascii_text_passes_the_slow_way_unchanged() -> None:
    payload = notification_payload(alert_payload(labels={"Hostname": "nœud-é"}, annotations={"summary": "GPU ☃"}))
    alert = parse_notification(payload).alerts[0]
    assert alert.labels["Hostname"] == "nœud-é" and alert.annotations["summary"] == "GPU ☃"


def test_an_object_with_a_key_that_is_not_a_string_is_refused_where_it_is() -> None:
    payload = notification_payload(alert_payload(fingerprint="f1"))
    payload["alerts"][0][7] = "seven"
    with pytest.raises(PayloadError, match="object keys must be strings, got number") as raised:
        parse_notification(payload)
    assert raised.value.field == "alerts[0]"
    assert _error({**NAMES, 3: "three"}).field == "alerts[0].labels"  # type: ignore[dict-item]
