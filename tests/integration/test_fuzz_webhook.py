"""Property tests of POST /webhook: whatever arrives, the answer is never a 5xx, and the store holds
either the whole notification (200) or nothing of it (400, with a JSON error naming the field).

AlertManager re-sends a 4xx'd notification every group_interval and retries 5xx forever, so a
crash on some odd payload would turn into an endless stream of failing requests.

One app and one SQLite store per test function (not per example): store counts are compared
before and after each example.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.http import LOG_DISK, LOG_XID, Server, alert, notification, real_firing, real_resolved
from tests.support.stores import table_counts

FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

PLAYBOOKS = {"xid.yaml": LOG_XID, "disk.yaml": LOG_DISK}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
huge_strings = st.builds(
    lambda char, n: char * n, st.sampled_from(["x", "é", "\u2603", "\U0001f525", "\\"]), st.integers(4_000, 120_000)
)
label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,15}", fullmatch=True) | st.text(max_size=12)
label_values = st.text(max_size=40) | huge_strings | json_scalars
label_dicts = st.dictionaries(label_names, label_values, max_size=6).flatmap(
    lambda labels: st.sampled_from(
        [
            labels,
            {**labels, "alertname": "GpuXidError", "severity": "critical"},
            {**labels, "alertname": "NodeFilesystemAlmostOutOfSpace"},
        ]
    )
)


def base_payloads() -> list[dict[str, Any]]:
    """Real notifications to start from: as AlertManager sent them, and a bigger group."""
    group = notification(
        alert("aaaa0001", Hostname="node-a"),
        alert("aaaa0002", alertname="NodeFilesystemAlmostOutOfSpace", instance="node-b:9100"),
        alert("aaaa0003", status="resolved", Hostname="node-c"),
    )
    return [real_firing(), real_resolved(), group]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (keys and list indexes), the root excluded."""
    found: list[tuple[Any, ...]] = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


def retyped(value: Any) -> list[Any]:
    """The same value as other JSON types."""
    return [None, 0, -1, 1.5, True, "", str(value)[:50], [value], {"value": value}, [], {}]


@st.composite
def mutated_payloads(draw: st.DrawFn) -> dict[str, Any]:
    payload = copy.deepcopy(draw(st.sampled_from(base_payloads())))
    for _ in range(draw(st.integers(1, 3))):
        candidates = paths(payload)
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        *parents, key = path
        container: Any = payload
        for step in parents:
            container = container[step]
        operation = draw(st.sampled_from(["drop", "replace", "retype", "huge", "labels"]))
        if operation == "drop":
            del container[key]
        elif operation == "replace":
            container[key] = draw(json_values)
        elif operation == "retype":
            container[key] = draw(st.sampled_from(retyped(container[key])))
        elif operation == "huge":
            container[key] = draw(huge_strings)
        elif isinstance(payload.get("alerts"), list) and payload["alerts"]:
            index = draw(st.integers(0, len(payload["alerts"]) - 1))
            if isinstance(payload["alerts"][index], dict):
                payload["alerts"][index]["labels"] = draw(label_dicts)
    return payload


def check_one(server: Server, body: bytes) -> int:
    """POST one body and check the all-or-nothing contract; returns the status."""
    before = table_counts(server.store)

    response = server.webhook(body)

    after = table_counts(server.store)
    assert response.status_code < 500, response.get_data(as_text=True)[:500]
    assert response.status_code in (200, 400), response.status_code
    answer = response.get_json()
    if response.status_code == 400:
        assert answer["error"] == "invalid_payload"
        assert isinstance(answer["field"], str)
        assert isinstance(answer["message"], str) and answer["message"]
        assert after == before
    else:
        sent = json.loads(body)
        alerts = len(sent["alerts"])
        assert answer["alerts"] == alerts
        assert after["notifications"] == before["notifications"] + 1
        assert after["alerts"] == before["alerts"] + alerts
        # Every alert gets at least one decision; every decision that made a run is in the summary.
        assert after["decisions"] - before["decisions"] == sum(answer["decisions"].values()) >= alerts
        assert after["runs"] - before["runs"] == len(answer["runs"])
    return response.status_code


def test_random_json_values_never_get_a_5xx_and_refusals_store_nothing(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks=PLAYBOOKS)

    @FUZZ
    @given(value=json_values)
    def post(value: Any) -> None:
        assert check_one(server, json.dumps(value).encode()) == 400

    post()


def test_notification_shaped_objects_with_random_fields_never_get_a_5xx(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks=PLAYBOOKS)
    fields = ["version", "status", "alerts", "receiver", "groupKey", "truncatedAlerts", "commonLabels", "externalURL"]
    fields += ["notification_reason", "groupLabels"]  # AlertManager 0.32+'s reason; the group a truncation names
    alert_fields = ["status", "labels", "annotations", "startsAt", "endsAt", "fingerprint", "generatorURL"]
    alert_shaped = st.dictionaries(st.sampled_from(alert_fields), json_values | label_dicts, max_size=7)
    shaped = st.dictionaries(
        st.sampled_from(fields), json_values | st.lists(alert_shaped, max_size=3) | st.just("4"), max_size=8
    )

    @FUZZ
    @given(value=shaped)
    def post(value: dict[str, Any]) -> None:
        check_one(server, json.dumps(value).encode())

    post()


def test_mutated_real_payloads_are_stored_whole_or_refused_with_nothing_stored(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks=PLAYBOOKS)
    statuses: list[int] = []

    @FUZZ
    @given(payload=mutated_payloads())
    def post(payload: dict[str, Any]) -> None:
        statuses.append(check_one(server, json.dumps(payload).encode()))

    post()

    # The mutations must exercise both outcomes, or the property says little.
    assert 200 in statuses
    assert 400 in statuses


def test_real_payloads_with_random_label_sets_are_stored_whole_or_refused_with_nothing_stored(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks=PLAYBOOKS)

    @FUZZ
    @given(
        labels=st.lists(label_dicts, min_size=1, max_size=4),
        fingerprints=st.lists(st.text(min_size=0, max_size=70), min_size=4, max_size=4),
    )
    def post(labels: list[dict[str, Any]], fingerprints: list[str]) -> None:
        payload = real_firing()
        template = payload["alerts"][0]
        payload["alerts"] = [
            {**template, "labels": one, "fingerprint": fingerprints[index]} for index, one in enumerate(labels)
        ]
        check_one(server, json.dumps(payload).encode())

    post()


def test_arbitrary_bytes_never_get_a_5xx(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks=PLAYBOOKS)
    valid = json.dumps(real_firing()).encode()
    bodies = (
        st.binary(max_size=300)
        | st.builds(lambda cut, tail: valid[:cut] + tail, st.integers(0, len(valid)), st.binary(max_size=20))
        | st.builds(
            lambda text, codec: text.encode(codec), st.just(valid.decode()), st.sampled_from(["utf-16", "utf-32"])
        )
    )

    @FUZZ
    @given(body=bodies)
    def post(body: bytes) -> None:
        check_one(server, body)

    post()
