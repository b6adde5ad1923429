"""remediate.intake.alerts: AlertManager v4 payloads -> validated Notification/Alert objects."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.errors import PayloadError
from remediate.intake.alerts import (
    MAX_ALERTNAME_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_LABELS,
    Alert,
    Notification,
    format_timestamp,
    parse_notification,
    parse_timestamp,
)
from remediate.intake.reason import MAX_REASON_LENGTH
from tests.conftest import alert_payload, notification_payload

PAYLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "payloads"


def load(name: str) -> dict:
    return json.loads((PAYLOADS / name).read_text(encoding="utf-8"))


@pytest.fixture
def firing() -> dict:
    return load("am-0.25-firing.json")


@pytest.fixture
def resolved() -> dict:
    return load("am-0.25-resolved.json")


def error_for(payload: object) -> PayloadError:
    with pytest.raises(PayloadError) as info:
        parse_notification(payload)
    return info.value


# --- real payloads ---------------------------------------------------------------------------


def test_real_firing_payload_from_alertmanager_0_25_parses(firing: dict) -> None:
    notification = parse_notification(firing)

    assert isinstance(notification, Notification)
    assert notification.version == "4"
    assert notification.status == "firing"
    assert notification.receiver == "remediator"
    assert notification.group_key == '{}:{alertname="GpuXidError"}'
    assert notification.truncated_alerts == 0
    assert notification.external_url == "http://vm:19093"
    assert dict(notification.group_labels) == {"alertname": "GpuXidError"}
    assert notification.common_labels["severity"] == "critical"
    assert notification.common_annotations["runbook"] == "restart-pod"
    (alert,) = notification.alerts
    assert alert.name == "GpuXidError"
    assert alert.status == "firing"
    assert alert.labels["gpu"] == "3"
    assert alert.annotations["summary"] == "GPU 3 Xid error"
    assert alert.fingerprint == "c5801e9cde93e74f"
    assert alert.generator_url == "http://example/graph"


def test_nanosecond_starts_at_is_truncated_to_microseconds_and_kept_raw(firing: dict) -> None:
    (alert,) = parse_notification(firing).alerts

    assert alert.starts_at == datetime(2026, 11, 21, 5, 40, 14, 652668, tzinfo=UTC)
    assert alert.starts_at.utcoffset() == timedelta(0)
    assert alert.starts_at_raw == "2026-11-21T05:40:14.652668659Z"


def test_zero_ends_at_of_a_firing_alert_becomes_none(firing: dict) -> None:
    (alert,) = parse_notification(firing).alerts

    assert alert.ends_at is None
    assert alert.template_context()["endsAt"] == ""


def test_real_resolved_payload_has_an_end_time(resolved: dict) -> None:
    notification = parse_notification(resolved)

    (alert,) = notification.alerts
    assert notification.status == "resolved"
    assert alert.status == "resolved"
    assert alert.starts_at == datetime(2026, 11, 21, 5, 39, 18, 649981, tzinfo=UTC)
    assert alert.ends_at == datetime(2026, 11, 21, 5, 40, 18, 649981, tzinfo=UTC)


def test_template_context_shows_the_alert_as_alertmanager_names_it(resolved: dict) -> None:
    (alert,) = parse_notification(resolved).alerts

    assert alert.template_context() == {
        "labels": {
            "alertname": "GpuXidError",
            "gpu": "3",
            "namespace": "ml",
            "pod": "trainer-0",
            "severity": "critical",
        },
        "annotations": {"runbook": "restart-pod", "summary": "GPU 3 Xid error"},
        "status": "resolved",
        "fingerprint": "c5801e9cde93e74f",
        "startsAt": "2026-11-21T05:39:18.649981Z",
        "endsAt": "2026-11-21T05:40:18.649981Z",
        "generatorURL": "http://example/graph",
        "alertname": "GpuXidError",
    }


def test_template_context_is_a_copy_that_cannot_change_the_alert(firing: dict) -> None:
    (alert,) = parse_notification(firing).alerts

    context = alert.template_context()
    context["labels"]["gpu"] = "7"  # type: ignore[index]

    assert alert.labels["gpu"] == "3"


def test_alert_labels_are_read_only(firing: dict) -> None:
    (alert,) = parse_notification(firing).alerts

    with pytest.raises(TypeError):
        alert.labels["gpu"] = "7"  # type: ignore[index]


def test_parsed_alerts_do_not_share_the_input_dicts(firing: dict) -> None:
    (alert,) = parse_notification(firing).alerts

    firing["alerts"][0]["labels"]["gpu"] = "7"

    assert alert.labels["gpu"] == "3"


def test_the_same_payload_parses_to_equal_alerts(firing: dict) -> None:
    assert parse_notification(firing) == parse_notification(copy.deepcopy(firing))


def test_several_alerts_keep_their_order(firing: dict) -> None:
    second = copy.deepcopy(firing["alerts"][0])
    second["labels"]["gpu"] = "5"
    second["fingerprint"] = "0000000000000002"
    firing["alerts"].append(second)

    alerts = parse_notification(firing).alerts

    assert [alert.labels["gpu"] for alert in alerts] == ["3", "5"]


# --- leniency ------------------------------------------------------------------------------


def test_unknown_fields_anywhere_are_accepted_and_ignored(firing: dict) -> None:
    firing["notification_reason"] = "new_alerts"
    firing["routeLabels"] = {"team": "ml"}
    firing["somethingNested"] = [{"deep": [1, 2.5, None, True]}]
    firing["alerts"][0]["notification_reason"] = "firing"
    firing["alerts"][0]["extra"] = {"x": [1]}

    notification = parse_notification(firing)

    assert notification.alerts[0].name == "GpuXidError"


def test_optional_top_level_fields_default_to_empty_when_absent(firing: dict) -> None:
    for key in (
        "groupKey",
        "truncatedAlerts",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
    ):
        del firing[key]

    notification = parse_notification(firing)

    assert notification.group_key == ""
    assert notification.truncated_alerts == 0
    assert notification.receiver == ""
    assert dict(notification.group_labels) == {}
    assert dict(notification.common_labels) == {}
    assert dict(notification.common_annotations) == {}
    assert notification.external_url == ""


def test_null_counts_as_absent_for_optional_fields(firing: dict) -> None:
    firing["receiver"] = None
    firing["truncatedAlerts"] = None
    firing["alerts"][0]["annotations"] = None
    firing["alerts"][0]["generatorURL"] = None
    firing["alerts"][0]["endsAt"] = None

    notification = parse_notification(firing)

    (alert,) = notification.alerts
    assert notification.receiver == ""
    assert notification.truncated_alerts == 0
    assert dict(alert.annotations) == {}
    assert alert.generator_url == ""
    assert alert.ends_at is None


def test_optional_alert_fields_may_be_absent(firing: dict) -> None:
    for key in ("annotations", "endsAt", "generatorURL"):
        del firing["alerts"][0][key]

    (alert,) = parse_notification(firing).alerts

    assert dict(alert.annotations) == {}
    assert alert.ends_at is None
    assert alert.generator_url == ""


def test_truncated_alerts_count_is_kept(firing: dict) -> None:
    firing["truncatedAlerts"] = 12

    assert parse_notification(firing).truncated_alerts == 12


# AlertManager 0.32+ (shaped as its notify/webhook Message and template.Data encode): notification_reason
# in snake_case with the reason's words, routeLabels (0.34), max_alerts' truncatedAlerts.


def test_alertmanager_0_34_re_send_keeps_its_notification_reason() -> None:
    notification = parse_notification(load("am-0.34-repeat-interval.json"))

    assert notification.notification_reason == "repeat interval elapsed"
    assert notification.truncated_alerts == 0
    assert notification.alerts[0].name == "GPUTemperatureHigh"
    assert notification.group_key.startswith('{}/{alertname=~"GPUMemoryPressure|')


def test_alertmanager_0_34_truncated_notification_says_how_many_alerts_it_dropped() -> None:
    notification = parse_notification(load("am-0.34-truncated.json"))

    assert notification.truncated_alerts == 3
    assert len(notification.alerts) == 2
    assert notification.notification_reason == "first notification"


def test_alertmanager_0_25_sends_no_notification_reason(firing: dict) -> None:
    assert "notification_reason" not in firing
    assert parse_notification(firing).notification_reason == ""


def test_notification_reason_null_is_absent_and_a_long_one_is_cut(firing: dict) -> None:
    firing["notification_reason"] = None
    assert parse_notification(firing).notification_reason == ""

    firing["notification_reason"] = "x" * 500
    assert parse_notification(firing).notification_reason == "x" * MAX_REASON_LENGTH


def test_notification_reason_must_be_a_string(firing: dict) -> None:
    firing["notification_reason"] = 5

    assert error_for(firing).field == "notification_reason"


def test_camel_case_notification_reason_is_not_alertmanagers_and_is_ignored(firing: dict) -> None:
    # AlertManager's Go struct tag is `json:"notification_reason"`; a camelCase key is some other sender's.
    firing["notificationReason"] = "repeat interval elapsed"

    assert parse_notification(firing).notification_reason == ""


def test_label_values_may_be_any_string_up_to_the_limit(firing: dict) -> None:
    labels = firing["alerts"][0]["labels"]
    labels["empty"] = ""
    labels["unicode"] = "GPU-ünïcødé ✓ \n\t"
    labels["long"] = "x" * MAX_LABEL_LENGTH

    (alert,) = parse_notification(firing).alerts

    assert alert.labels["unicode"] == "GPU-ünïcødé ✓ \n\t"
    assert alert.labels["empty"] == ""


def test_annotation_names_and_long_values_are_not_restricted(firing: dict) -> None:
    firing["alerts"][0]["annotations"] = {"runbook.url": "y" * (MAX_LABEL_LENGTH * 2)}

    (alert,) = parse_notification(firing).alerts

    assert len(alert.annotations["runbook.url"]) == MAX_LABEL_LENGTH * 2


def test_exactly_the_maximum_number_of_labels_is_accepted(firing: dict) -> None:
    firing["alerts"][0]["labels"] = {"alertname": "A"} | {f"l{i}": "v" for i in range(MAX_LABELS - 1)}

    (alert,) = parse_notification(firing).alerts

    assert len(alert.labels) == MAX_LABELS


# --- validation errors name the field --------------------------------------------------------


@pytest.mark.parametrize("payload", [None, [], "text", 4, 4.5, True])
def test_a_payload_that_is_not_an_object_is_rejected(payload: object) -> None:
    error = error_for(payload)

    assert error.field == ""
    assert "JSON object" in str(error)


DELETE = object()
"""In INVALID: the field is removed instead of set."""

# fmt: off
INVALID = [
    # (where in the payload, the value put there or DELETE, the field the error names, words in its detail)
    (["version"], DELETE, "version", ""),
    (["version"], "3", "version", '"3"'),
    (["version"], "5", "version", '"5"'),
    (["version"], "", "version", '""'),
    (["version"], 4, "version", "number"),  # AlertManager sends a string
    *((["status"], status, "status", "") for status in (None, "pending", "FIRING", 1, True)),
    (["alerts"], DELETE, "alerts", ""),
    (["alerts"], [], "alerts", "at least one"),
    (["alerts"], {"0": {}}, "alerts", ""),
    *(([key], value, key, "") for key, value in (
        ("groupKey", 1), ("receiver", ["remediator"]), ("externalURL", False), ("groupLabels", "alertname"),
        ("commonLabels", []), ("commonAnnotations", 3), ("truncatedAlerts", "0"), ("truncatedAlerts", 1.0),
        ("truncatedAlerts", True), ("truncatedAlerts", -1),
    )),
    (["commonLabels", "gpu"], 3, "commonLabels.gpu", ""),
    (["alerts", 1], "not an alert", "alerts[1]", ""),
    (["alerts", 0, "status"], DELETE, "alerts[0].status", ""),
    (["alerts", 0, "status"], "pending", "alerts[0].status", ""),
    (["alerts", 0, "labels"], DELETE, "alerts[0].labels", ""),
    (["alerts", 0, "labels"], ["alertname"], "alerts[0].labels", ""),
    (["alerts", 0, "labels", "alertname"], DELETE, "alerts[0].labels.alertname", ""),
    (["alerts", 0, "labels", "alertname"], "", "alerts[0].labels.alertname", ""),
    (["alerts", 0, "labels", "alertname"], None, "alerts[0].labels.alertname", ""),
    (["alerts", 0, "labels", "gpu"], 3, "alerts[0].labels.gpu", ""),
    (["alerts", 0, "labels", "gpu"], True, "alerts[0].labels.gpu", ""),
    (["alerts", 0, "labels", "big"], "x" * (MAX_LABEL_LENGTH + 1), "alerts[0].labels.big", str(MAX_LABEL_LENGTH)),
    (["alerts", 0, "labels"], {"alertname": "A"} | {f"l{i}": "v" for i in range(MAX_LABELS)}, "alerts[0].labels",
     str(MAX_LABELS)),
    (["alerts", 0, "labels", "pod"], "trainer-\ud800", "alerts[0].labels.pod", ""),  # as json.loads allows
    (["alerts", 0, "labels", 3], "x", "alerts[0].labels", ""),  # a non-string key from a Python caller
    # U+0000 is valid JSON, but PostgreSQL stores no NUL in text: refused alike on every store (not a 503).
    (["alerts", 0, "labels", "pod"], "trainer\x00", "alerts[0].labels.pod", "NUL"),
    (["alerts", 0, "labels", "pod"], "träiner\x00", "alerts[0].labels.pod", "NUL"),
    (["alerts", 0, "annotations", "summary"], "hot\x00", "alerts[0].annotations.summary", "NUL"),
    (["receiver"], "remediate\x00", "receiver", "NUL"),
    (["notification_reason"], "repeat interval elapsed\x00", "notification_reason", "NUL"),
    (["alerts", 0, "generatorURL"], "http://prom/\x00", "alerts[0].generatorURL", "NUL"),
    # Label names Prometheus would not allow.
    *((["alerts", 0, "labels", name], "x", f"alerts[0].labels[{json.dumps(name)}]", "label name")
      for name in ("foo-bar", "1gpu", "", "a.b", "ünï", "a b")),
    (["alerts", 0, "annotations"], "summary", "alerts[0].annotations", ""),
    (["alerts", 0, "annotations", "summary"], ["x"], "alerts[0].annotations.summary", ""),
    (["alerts", 0, "startsAt"], DELETE, "alerts[0].startsAt", ""),
    (["alerts", 0, "startsAt"], 1700000000, "alerts[0].startsAt", ""),
    (["alerts", 0, "startsAt"], "yesterday", "alerts[0].startsAt", ""),
    (["alerts", 0, "endsAt"], "2026-11-21 05:40:14Z", "alerts[0].endsAt", ""),
    (["alerts", 0, "endsAt"], 0, "alerts[0].endsAt", ""),
    (["alerts", 0, "fingerprint"], DELETE, "alerts[0].fingerprint", ""),
    (["alerts", 0, "fingerprint"], "", "alerts[0].fingerprint", ""),
    (["alerts", 0, "fingerprint"], 12345, "alerts[0].fingerprint", ""),
    (["alerts", 0, "fingerprint"], "f" * 65, "alerts[0].fingerprint", ""),
    (["alerts", 0, "generatorURL"], 7, "alerts[0].generatorURL", ""),
]
# fmt: on


@pytest.mark.parametrize(("where", "value", "field", "detail"), INVALID, ids=[case[2] for case in INVALID])
def test_each_invalid_field_is_named(firing: dict, where: list, value: object, field: str, detail: str) -> None:
    *path, last = where
    parent = firing
    for key in path:
        parent = parent[key]
    if value is DELETE:
        del parent[last]
    elif isinstance(parent, list) and last == len(parent):
        parent.append(value)
    else:
        parent[last] = value

    error = error_for(firing)

    assert error.field == field
    assert detail in error.detail


def test_the_error_names_the_index_of_the_bad_alert(firing: dict) -> None:
    bad = copy.deepcopy(firing["alerts"][0])
    del bad["labels"]["alertname"]
    firing["alerts"] = [firing["alerts"][0], firing["alerts"][0], bad]

    error = error_for(firing)

    assert error.field == "alerts[2].labels.alertname"
    assert str(error).startswith("alerts[2].labels.alertname: ")


def test_error_messages_cut_long_received_values_short(firing: dict) -> None:
    firing["version"] = "9" * 100_000

    assert len(str(error_for(firing))) < 300


def test_a_non_string_key_from_a_python_caller_is_a_payload_error(firing: dict) -> None:
    firing["alerts"][0]["labels"][3] = "x"

    assert error_for(firing).field == "alerts[0].labels"


# --- timestamps ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T05:40:14Z", datetime(2026, 11, 21, 5, 40, 14, tzinfo=UTC)),
        ("2026-11-21T05:40:14.5Z", datetime(2026, 11, 21, 5, 40, 14, 500000, tzinfo=UTC)),
        ("2026-11-21T05:40:14.652668659Z", datetime(2026, 11, 21, 5, 40, 14, 652668, tzinfo=UTC)),
        ("2026-11-21T05:40:14.999999999Z", datetime(2026, 11, 21, 5, 40, 14, 999999, tzinfo=UTC)),
        ("2026-11-21T05:40:14.000000001Z", datetime(2026, 11, 21, 5, 40, 14, tzinfo=UTC)),
        ("2026-11-21t05:40:14z", datetime(2026, 11, 21, 5, 40, 14, tzinfo=UTC)),
        ("2026-11-21T07:40:14.25+02:00", datetime(2026, 11, 21, 5, 40, 14, 250000, tzinfo=UTC)),
        ("2026-11-20T23:10:14-06:30", datetime(2026, 11, 21, 5, 40, 14, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
    ],
)
def test_rfc3339_timestamps_parse_to_aware_utc(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text, "t")

    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-11-21",
        "2026-11-21T05:40:14",  # no offset
        "2026-11-21 05:40:14Z",
        "2026-11-21T05:40:14.Z",
        "2026-11-21T05:40:14.1234567890Z",  # 10 fractional digits
        "2026-11-21T05:40:14+0200",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-21T24:00:00Z",
        "2026-11-21T05:60:00Z",
        "2026-11-21T05:40:60Z",  # Go refuses leap seconds too
        "2026-11-21T05:40:14+24:00",
        "2026-11-21T05:40:14+01:60",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
        "\uff12\uff10\uff12\uff16-11-21T05:40:14Z",  # fullwidth digits: \d would take them
        " 2026-11-21T05:40:14Z",
        "2026-11-21T05:40:14Z\n",
    ],
)
def test_malformed_timestamps_raise_a_payload_error_naming_the_field(text: str) -> None:
    with pytest.raises(PayloadError) as info:
        parse_timestamp(text, "alerts[0].startsAt")

    assert info.value.field == "alerts[0].startsAt"


def test_a_non_string_timestamp_raises_a_payload_error() -> None:
    with pytest.raises(PayloadError):
        parse_timestamp(12, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 11, 21, 5, 40, 14, tzinfo=UTC), "2026-11-21T05:40:14Z"),
        (datetime(2026, 11, 21, 5, 40, 14, 652668, tzinfo=UTC), "2026-11-21T05:40:14.652668Z"),
        (datetime(2026, 11, 21, 5, 40, 14, 500000, tzinfo=UTC), "2026-11-21T05:40:14.5Z"),
        (datetime(2026, 11, 21, 7, 40, 14, tzinfo=timezone(timedelta(hours=2))), "2026-11-21T05:40:14Z"),
        (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00Z"),
    ],
)
def test_format_timestamp_writes_utc_with_a_z(moment: datetime, text: str) -> None:
    assert format_timestamp(moment) == text


def test_format_timestamp_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(datetime(2026, 11, 21))


@given(st.datetimes(timezones=st.just(UTC)))
def test_formatted_timestamps_parse_back_to_the_same_instant(moment: datetime) -> None:
    assert parse_timestamp(format_timestamp(moment), "t") == moment


@given(st.text(max_size=40))
def test_parse_timestamp_raises_only_payload_errors_on_any_text(text: str) -> None:
    try:
        parsed = parse_timestamp(text, "t")
    except PayloadError:
        return
    assert parsed.tzinfo is UTC


@given(
    st.from_regex(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
        fullmatch=True,
    )
)
def test_timestamps_of_the_right_shape_parse_or_raise_only_payload_errors(text: str) -> None:
    try:
        parse_timestamp(text, "t")
    except PayloadError as error:
        assert error.field == "t"


# --- robustness: whatever json.loads returns, only PayloadError comes out ---------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every place inside a decoded JSON value, as a tuple of keys/indices."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _parse_or_payload_error(payload: object) -> Notification | None:
    try:
        return parse_notification(payload)
    except PayloadError as error:
        assert isinstance(error.field, str)
        assert str(error)
        return None


@settings(max_examples=300)
@given(json_values)
def test_arbitrary_json_values_raise_nothing_but_payload_error(value: object) -> None:
    _parse_or_payload_error(value)


@settings(max_examples=300)
@given(json_values)
def test_arbitrary_json_in_place_of_one_alert_raises_nothing_but_payload_error(value: object) -> None:
    payload = load("am-0.25-firing.json")
    payload["alerts"] = [value]
    _parse_or_payload_error(payload)


@settings(max_examples=500)
@given(
    name=st.sampled_from(["am-0.25-firing.json", "am-0.25-resolved.json"]),
    data=st.data(),
)
def test_mutated_real_payloads_raise_nothing_but_payload_error(name: str, data: st.DataObject) -> None:
    payload = load(name)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="mutations")):
        paths = [path for path in _paths(payload) if path]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        if data.draw(st.booleans(), label="delete"):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(json_values, label="replacement")

    result = _parse_or_payload_error(payload)

    if result is not None:
        for alert in result.alerts:
            assert isinstance(alert, Alert)
            assert alert.name
            assert alert.starts_at.tzinfo is UTC
            json.dumps(alert.template_context())


@settings(max_examples=200)
@given(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=8))
def test_arbitrary_string_labels_either_parse_or_name_the_labels_field(labels: dict[str, str]) -> None:
    payload = load("am-0.25-firing.json")
    payload["alerts"][0]["labels"] = labels

    try:
        (alert,) = parse_notification(payload).alerts
    except PayloadError as error:
        assert error.field.startswith("alerts[0].labels")
    else:
        assert dict(alert.labels) == labels


def test_an_alertname_over_the_limit_is_a_payload_error_naming_the_field() -> None:
    payload = notification_payload(alert_payload("A" * (MAX_ALERTNAME_LENGTH + 1)))
    with pytest.raises(PayloadError) as caught:
        parse_notification(payload)
    assert caught.value.field == "alerts[0].labels.alertname"
