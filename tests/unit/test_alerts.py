"""remediate.alerts: AlertManager v4 payloads -> validated Notification/Alert objects."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediate.alerts import (
    MAX_ALERTNAME_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_LABELS,
    Alert,
    Notification,
    format_timestamp,
    parse_notification,
    parse_timestamp,
)
from remediate.errors import PayloadError
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


def test_a_missing_version_is_named(firing: dict) -> None:
    del firing["version"]

    assert error_for(firing).field == "version"


@pytest.mark.parametrize("version", ["3", "5", ""])
def test_an_unsupported_version_says_what_was_received(firing: dict, version: str) -> None:
    firing["version"] = version

    error = error_for(firing)

    assert error.field == "version"
    assert json.dumps(version) in error.detail


def test_version_as_a_number_is_rejected_because_alertmanager_sends_a_string(firing: dict) -> None:
    firing["version"] = 4

    error = error_for(firing)

    assert error.field == "version"
    assert "number" in error.detail


@pytest.mark.parametrize("status", [None, "pending", "FIRING", 1, True])
def test_a_bad_notification_status_is_named(firing: dict, status: object) -> None:
    firing["status"] = status

    assert error_for(firing).field == "status"


def test_a_missing_alerts_list_is_named(firing: dict) -> None:
    del firing["alerts"]

    assert error_for(firing).field == "alerts"


def test_an_empty_alerts_list_is_rejected(firing: dict) -> None:
    firing["alerts"] = []

    error = error_for(firing)

    assert error.field == "alerts"
    assert "at least one" in error.detail


def test_alerts_that_are_not_a_list_are_rejected(firing: dict) -> None:
    firing["alerts"] = {"0": firing["alerts"][0]}

    assert error_for(firing).field == "alerts"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("groupKey", 1),
        ("receiver", ["remediator"]),
        ("externalURL", False),
        ("groupLabels", "alertname"),
        ("commonLabels", []),
        ("commonAnnotations", 3),
        ("truncatedAlerts", "0"),
        ("truncatedAlerts", 1.0),
        ("truncatedAlerts", True),
        ("truncatedAlerts", -1),
    ],
)
def test_a_present_top_level_field_of_the_wrong_type_is_named(firing: dict, key: str, value: object) -> None:
    firing[key] = value

    assert error_for(firing).field == key


def test_a_non_string_value_in_common_labels_is_named(firing: dict) -> None:
    firing["commonLabels"]["gpu"] = 3

    assert error_for(firing).field == "commonLabels.gpu"


def test_an_alert_that_is_not_an_object_is_named_by_index(firing: dict) -> None:
    firing["alerts"].append("not an alert")

    assert error_for(firing).field == "alerts[1]"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda a: a.pop("status"), "alerts[0].status"),
        (lambda a: a.update(status="pending"), "alerts[0].status"),
        (lambda a: a.pop("labels"), "alerts[0].labels"),
        (lambda a: a.update(labels=["alertname"]), "alerts[0].labels"),
        (lambda a: a["labels"].pop("alertname"), "alerts[0].labels.alertname"),
        (lambda a: a["labels"].update(alertname=""), "alerts[0].labels.alertname"),
        (lambda a: a["labels"].update(alertname=None), "alerts[0].labels.alertname"),
        (lambda a: a["labels"].update(gpu=3), "alerts[0].labels.gpu"),
        (lambda a: a["labels"].update(gpu=True), "alerts[0].labels.gpu"),
        (lambda a: a.update(annotations="summary"), "alerts[0].annotations"),
        (lambda a: a["annotations"].update(summary=["x"]), "alerts[0].annotations.summary"),
        (lambda a: a.pop("startsAt"), "alerts[0].startsAt"),
        (lambda a: a.update(startsAt=1700000000), "alerts[0].startsAt"),
        (lambda a: a.update(startsAt="yesterday"), "alerts[0].startsAt"),
        (lambda a: a.update(endsAt="2026-11-21 05:40:14Z"), "alerts[0].endsAt"),
        (lambda a: a.update(endsAt=0), "alerts[0].endsAt"),
        (lambda a: a.pop("fingerprint"), "alerts[0].fingerprint"),
        (lambda a: a.update(fingerprint=""), "alerts[0].fingerprint"),
        (lambda a: a.update(fingerprint=12345), "alerts[0].fingerprint"),
        (lambda a: a.update(fingerprint="f" * 65), "alerts[0].fingerprint"),
        (lambda a: a.update(generatorURL=7), "alerts[0].generatorURL"),
    ],
)
def test_each_invalid_alert_field_is_named(firing: dict, mutate, field: str) -> None:
    mutate(firing["alerts"][0])

    assert error_for(firing).field == field


def test_the_error_names_the_index_of_the_bad_alert(firing: dict) -> None:
    bad = copy.deepcopy(firing["alerts"][0])
    del bad["labels"]["alertname"]
    firing["alerts"] = [firing["alerts"][0], firing["alerts"][0], bad]

    error = error_for(firing)

    assert error.field == "alerts[2].labels.alertname"
    assert str(error).startswith("alerts[2].labels.alertname: ")


@pytest.mark.parametrize("name", ["foo-bar", "1gpu", "", "a.b", "ünï", "a b"])
def test_a_label_name_that_prometheus_would_not_allow_is_rejected(firing: dict, name: str) -> None:
    firing["alerts"][0]["labels"][name] = "x"

    error = error_for(firing)

    assert error.field == f"alerts[0].labels[{json.dumps(name)}]"
    assert "label name" in error.detail


def test_a_label_value_over_the_limit_is_rejected(firing: dict) -> None:
    firing["alerts"][0]["labels"]["big"] = "x" * (MAX_LABEL_LENGTH + 1)

    error = error_for(firing)

    assert error.field == "alerts[0].labels.big"
    assert str(MAX_LABEL_LENGTH) in error.detail


def test_more_labels_than_the_limit_are_rejected(firing: dict) -> None:
    firing["alerts"][0]["labels"] = {"alertname": "A"} | {f"l{i}": "v" for i in range(MAX_LABELS)}

    error = error_for(firing)

    assert error.field == "alerts[0].labels"
    assert str(MAX_LABELS) in error.detail


def test_a_lone_surrogate_in_a_label_value_is_rejected(firing: dict) -> None:
    firing["alerts"][0]["labels"]["pod"] = json.loads('"trainer-\\ud800"')  # what json.loads allows

    assert error_for(firing).field == "alerts[0].labels.pod"


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
