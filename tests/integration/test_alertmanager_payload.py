"""AlertManager's newer webhook payload through the Flask app (SQLite and PostgreSQL): a notification its
receiver's `max_alerts` cut short (`truncatedAlerts`) is a `truncated` decision in /history, a metric and a
WARNING line; `notification_reason` (0.32+) is stored with the notification and shown with its decisions.
The payloads are shaped as AlertManager 0.34's notify/webhook Message encodes them (tests/fixtures/payloads)."""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import ON_EVERY_DATABASE, READ_TOKEN, Server, real_firing

PAYLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "payloads"

WATCH_TEMPERATURE = """\
name: watch-temperature
match: {alertname: GPUTemperatureHigh}
target: node
steps: [{action: log, with: {message: "GPU {{ labels.gpu }} is hot"}}]
"""


def payload(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / name).read_text(encoding="utf-8"))


def truncated_total(server: Server) -> float:
    body = server.get("/metrics", token=None).get_data(as_text=True)
    (family,) = [f for f in text_string_to_metric_families(body) if f.name == "remediate_alerts_truncated"]
    return sum(s.value for s in family.samples if s.name == "remediate_alerts_truncated_total")


def notification_row(server: Server, notification_id: int) -> tuple[Any, ...]:
    engine = sa.create_engine(server.database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT notification_reason, truncated_alerts FROM notifications WHERE id = :id"),
                {"id": notification_id},
            ).one()
    finally:
        engine.dispose()
    return tuple(row)


@ON_EVERY_DATABASE
def test_a_truncated_notification_is_a_decision_a_metric_and_a_warning(
    make_server: Callable[..., Server], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(playbooks={"watch.yaml": WATCH_TEMPERATURE})
    assert truncated_total(server) == 0

    with caplog.at_level(logging.WARNING, logger="remediate.engine"):
        response = server.webhook(payload("am-0.34-truncated.json"))

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    # The two alerts AlertManager sent run; the three it dropped are one `truncated` decision.
    assert body["decisions"] == {"accepted": 2, "truncated": 1}
    assert len(body["runs"]) == 2
    assert truncated_total(server) == 3
    (line,) = [r for r in caplog.records if r.name == "remediate.engine" and r.levelno == logging.WARNING]
    assert line.getMessage() == (
        f"notification {body['notification_id']}: AlertManager dropped 3 alerts of group "
        '{Hostname="gpu-node-07", alertname="GPUTemperatureHigh"} because of the receiver\'s max_alerts '
        "(this firing notification carried 2 of 5): no playbook ran for them and none will undo for them; "
        "set max_alerts: 0 on the receiver"
    )
    entries = server.history(status="truncated")["entries"]
    (entry,) = entries
    assert (entry["decision"], entry["alertname"], entry["playbook"], entry["target"]) == (
        "truncated", "GPUTemperatureHigh", None, None,
    )  # fmt: skip
    assert entry["reason"] == line.getMessage().split(": ", 1)[1]
    assert entry["notification_reason"] == "first notification"
    assert notification_row(server, body["notification_id"]) == ("first notification", 3)


def test_a_whole_notification_makes_no_truncated_decision_and_counts_nothing(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"watch.yaml": WATCH_TEMPERATURE})
    whole = payload("am-0.34-truncated.json")
    whole["truncatedAlerts"] = 0

    body = server.webhook(whole).get_json()

    assert body["decisions"] == {"accepted": 2}
    assert truncated_total(server) == 0
    assert server.history(status="truncated")["entries"] == []


@ON_EVERY_DATABASE
def test_a_repeat_interval_re_send_is_a_duplicate_that_says_so_in_the_history(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"watch.yaml": WATCH_TEMPERATURE})
    resend = payload("am-0.34-repeat-interval.json")
    first = copy.deepcopy(resend)
    first["notification_reason"] = "first notification"

    accepted = server.webhook(first).get_json()
    again = server.webhook(resend).get_json()

    assert accepted["decisions"] == {"accepted": 1}
    assert again["decisions"] == {"duplicate": 1}
    newest, oldest = server.history()["entries"]
    assert (newest["decision"], newest["notification_reason"]) == ("duplicate", "repeat interval elapsed")
    assert (oldest["decision"], oldest["notification_reason"]) == ("accepted", "first notification")
    assert notification_row(server, again["notification_id"]) == ("repeat interval elapsed", 0)


def test_alertmanager_0_25_notifications_say_no_reason(server: Server) -> None:
    body = server.webhook(real_firing()).get_json()

    (entry,) = server.history()["entries"]
    assert entry["notification_reason"] is None
    assert notification_row(server, body["notification_id"]) == (None, 0)


def test_the_history_page_shows_alertmanagers_reason_and_the_truncation(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"watch.yaml": WATCH_TEMPERATURE})
    resend = payload("am-0.34-repeat-interval.json")
    first = copy.deepcopy(resend)
    first["notification_reason"] = "first notification"
    for body in (first, resend, resend, payload("am-0.34-truncated.json")):
        assert server.webhook(body).status_code == 200
    form = server.client.get("/ui/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.get_data(as_text=True))
    assert token is not None
    server.client.post("/ui/login", data={"token": READ_TOKEN, "csrf_token": token.group(1)})

    page = server.client.get("/ui/").get_data(as_text=True)

    assert "(AlertManager: first notification)" in page
    # The two re-sends fold into the run they repeat, each saying why AlertManager sent it.
    assert "+2 duplicates" in page
    assert page.count(", repeat interval elapsed</span>") == 2
    assert "AlertManager dropped 3 alerts of group" in page
