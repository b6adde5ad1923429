"""AlertManager's newer payload in the engine: `truncatedAlerts` (remediate.judging.truncation) and
`notification_reason` (remediate.intake.reason), which is recorded and never changes a verdict: a re-send of
an alert still firing climbs a ladder after `holds_for` as it always did, and is a duplicate before."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from remediate.intake.alerts import parse_notification
from remediate.intake.reason import REPEAT_INTERVAL_ELAPSED
from remediate.judging.engine import Engine, IngestResult
from remediate.judging.truncation import MAX_ALERTNAME, MAX_GROUP, truncation
from remediate.runs import Decision
from remediate.store import ReportQuery, Store
from remediate.store import schema as t
from tests.conftest import alert_payload, notification_payload
from tests.support.stores import EVERY_DATABASE
from tests.support.stores import rows as table_rows

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MINUTE = 60.0

HOT_LADDER = {
    "name": "hot",
    "match": {"alertname": "GPUTemperatureHigh"},
    "target": "node",
    "reset_after": "2h",
    "escalate": [
        {"name": "cap-power", "holds_for": "30m", "steps": [{"action": "log", "with": {"message": "cap"}}]},
        {"name": "lock-clocks", "holds_for": "30m", "steps": [{"action": "log", "with": {"message": "lock"}}]},
    ],
}


def hot(host: str = "node-a") -> dict[str, Any]:
    return alert_payload("GPUTemperatureHigh", labels={"Hostname": host})


def body(*alerts: dict[str, Any], reason: str | None = None, truncated: int = 0, **fields: Any) -> dict[str, Any]:
    data = notification_payload(*alerts)
    data["truncatedAlerts"] = truncated
    if reason is not None:
        data["notification_reason"] = reason
    data.update(fields)
    return data


def ingest(engine: Engine, data: dict[str, Any], at: float) -> IngestResult:
    return engine.ingest_body(json.dumps(data).encode(), received_at=at)


# --------------------------------------------------------------------------- the truncation, pure


def test_a_whole_notification_is_no_truncation() -> None:
    assert truncation(parse_notification(body(hot()))) is None


def test_a_truncation_names_the_group_by_its_labels_and_counts_what_was_sent() -> None:
    cut = truncation(
        parse_notification(body(hot("a"), hot("b"), truncated=3, groupLabels={"alertname": "X", "B": "y"}))
    )

    assert cut is not None
    assert (cut.dropped, cut.sent, cut.status, cut.alertname) == (3, 2, "firing", "GPUTemperatureHigh")
    assert cut.group == '{B="y", alertname="X"}'  # sorted, as AlertManager's own group key prints them
    assert cut.fingerprint == hot("a")["fingerprint"]
    assert "dropped 3 alerts" in cut.note and "carried 2 of 5" in cut.note and "max_alerts: 0" in cut.note


def test_without_group_labels_the_group_is_its_key_and_several_alertnames_are_listed() -> None:
    other = alert_payload("GpuXidError", labels={"Hostname": "a"})
    cut = truncation(parse_notification(body(hot(), other, truncated=1, groupKey='{}:{job="dcgm"}')))

    assert cut is not None
    assert cut.group == '{}:{job="dcgm"}'
    assert cut.alertname == "GPUTemperatureHigh,GpuXidError"


def test_a_truncation_stays_within_its_columns() -> None:
    names = [alert_payload("A" * 200 + str(i), labels={"Hostname": "a"}) for i in range(3)]
    cut = truncation(parse_notification(body(*names, truncated=1, groupLabels={"alertname": "v" * 4000})))

    assert cut is not None
    assert len(cut.alertname) == MAX_ALERTNAME
    assert len(cut.group) == MAX_GROUP + len("...")


# --------------------------------------------------------------------------- through the engine


@EVERY_DATABASE
def test_a_truncated_notification_records_one_decision_with_its_first_alert(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    engine = make_engine(HOT_LADDER)

    result = ingest(engine, body(hot("node-a"), hot("node-b"), truncated=4, reason="first notification"), T0)

    assert result.decision_counts() == {"accepted": 2, "truncated": 1}
    assert (result.truncated_alerts, result.notification_reason) == (4, "first notification")
    (row,) = table_rows(store, t.decisions.name, decision="truncated")
    first_alert, _ = table_rows(store, t.alerts.name)
    assert (row.alert_id, row.fingerprint, row.playbook, row.target, row.run_id) == (
        first_alert.id, first_alert.fingerprint, None, None, None,
    )  # fmt: skip
    assert row.status == "truncated" and row.reason.startswith("AlertManager dropped 4 alerts of group")
    (notification,) = table_rows(store, t.notifications.name)
    assert (notification.truncated_alerts, notification.notification_reason) == (4, "first notification")


def test_the_truncated_decision_leaves_the_reliability_report_alone(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    """It is recorded with its first alert's occurrence: no incident of its own in /report."""
    engine = make_engine(HOT_LADDER)
    ingest(engine, body(hot("node-a"), truncated=9), T0)
    ingest(make_engine(HOT_LADDER), body(hot("node-b")), T0 + 1)

    report = store.history.report(ReportQuery(since=T0 - MINUTE, until=T0 + 10 * MINUTE))

    assert report.totals["incidents"] == 2


@pytest.mark.parametrize("reason", [None, REPEAT_INTERVAL_ELAPSED])
def test_a_re_send_is_a_duplicate_before_holds_for_and_climbs_after_it_whatever_the_reason(
    make_engine: Callable[..., Engine], reason: str | None
) -> None:
    engine = make_engine(HOT_LADDER)
    first = ingest(engine, body(hot(), reason=None if reason is None else "first notification"), T0)

    early = ingest(engine, body(hot(), reason=reason), T0 + 10 * MINUTE)
    late = ingest(engine, body(hot(), reason=reason), T0 + 31 * MINUTE)

    assert [d.decision for d in first.decisions] == [Decision.ACCEPTED]
    assert [d.decision for d in early.decisions] == [Decision.DUPLICATE]
    (climbed,) = late.decisions
    assert climbed.decision is Decision.ACCEPTED
    assert "; rung 2 of 2 (lock-clocks): still firing 31m after rung 1 ran" in climbed.reason
    assert late.notification_reason == (reason or "")
