"""POST /webhook: what AlertManager sees, and what lands in the store (or, on refusal, does not)."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from remediate.config.settings import Settings
from remediate.errors import ConfigError
from remediate.server import build_services, create_app
from tests.support.http import (
    LOG_XID,
    TOKEN,
    Server,
    alert,
    drop_table,
    notification,
    notify_playbook,
    real_firing,
    real_resolved,
)
from tests.support.realsystems import WebhookRecorder

# --------------------------------------------------------------------------- accepted


def test_a_real_alertmanager_payload_is_answered_200_with_a_summary(server: Server) -> None:
    response = server.webhook(real_firing())

    assert response.status_code == 200
    assert response.is_json
    body = response.get_json()
    assert body["alerts"] == 1
    assert body["decisions"] == {"accepted": 1}
    assert len(body["runs"]) == 1
    assert isinstance(body["notification_id"], int)


def test_runs_are_committed_before_the_response_and_stay_queued_without_an_executor(server: Server) -> None:
    before = server.counts()

    body = server.webhook(real_firing()).get_json()

    # Read the store right after the response, through another connection: it is all there.
    after = server.counts()
    assert after == {
        "notifications": before["notifications"] + 1,
        "alerts": before["alerts"] + 1,
        "decisions": before["decisions"] + 1,
        "runs": before["runs"] + 1,
        "steps": before["steps"] + 1,
    }
    detail = server.get(f"/runs/{body['runs'][0]}").get_json()
    assert detail["status"] == "queued"
    assert detail["started_at"] is None
    assert [step["status"] for step in detail["steps"]] == ["pending"]
    assert detail["steps"][0]["attempts"] == []


def test_the_webhook_never_executes_a_step_inside_the_request(make_server: Callable[..., Server]) -> None:
    with WebhookRecorder(path="/hook") as receiver:
        server = make_server(playbooks={"notify.yaml": notify_playbook(receiver.url)})

        body = server.webhook(real_firing()).get_json()

        assert body["decisions"] == {"accepted": 1}
        assert receiver.requests == []
        assert server.get(f"/runs/{body['runs'][0]}").get_json()["status"] == "queued"

        assert server.drain() == 1
        posted = receiver.wait_for(timeout=5)
        assert posted.json["run_id"] == body["runs"][0]
        assert server.get(f"/runs/{body['runs'][0]}").get_json()["status"] == "succeeded"


def test_the_raw_body_is_kept_exactly_as_received(server: Server) -> None:
    text = json.dumps(real_firing(), indent=3)

    notification_id = server.webhook(text).get_json()["notification_id"]

    with sqlite3.connect(server.db_path) as conn:
        row = conn.execute("SELECT raw, alert_count, receiver FROM notifications WHERE id = ?", (notification_id,))
        raw, alert_count, receiver = row.fetchone()
    conn.close()
    assert raw == text
    assert alert_count == 1
    assert receiver == "remediator"


def test_the_same_notification_sent_again_is_recorded_as_a_duplicate_without_a_second_run(server: Server) -> None:
    first = server.webhook(real_firing()).get_json()

    again = server.webhook(real_firing())

    assert again.status_code == 200
    assert again.get_json()["decisions"] == {"duplicate": 1}
    assert again.get_json()["runs"] == []
    assert server.counts()["runs"] == 1
    newest = server.history(limit=1)["entries"][0]
    assert newest["decision"] == "duplicate"
    assert f"run {first['runs'][0]}" in newest["reason"]


def test_a_resolved_payload_after_its_firing_one_queues_the_on_resolved_steps(server: Server) -> None:
    firing = real_resolved()
    firing["status"] = firing["alerts"][0]["status"] = "firing"
    firing["alerts"][0]["endsAt"] = "0001-01-01T00:00:00Z"
    first_run = server.webhook(firing).get_json()["runs"][0]

    body = server.webhook(real_resolved()).get_json()

    assert body["decisions"] == {"accepted": 1}
    detail = server.get(f"/runs/{body['runs'][0]}").get_json()
    assert detail["phase"] == "resolved"
    assert detail["steps"][0]["params"]["message"] == "GpuXidError resolved"
    assert detail["status"] == "queued"
    # The executor runs the firing run first, then the on_resolved one.
    assert server.drain() == 2
    assert (
        server.get(f"/runs/{first_run}").get_json()["finished_at"]
        <= (server.get(f"/runs/{body['runs'][0]}").get_json()["started_at"])
    )


def test_nanosecond_timestamps_are_accepted_and_reach_templates_unrounded(server: Server) -> None:
    payload = notification(alert("aa01", starts_at="2026-11-21T05:40:14.123456789Z"))

    response = server.webhook(payload)

    assert response.status_code == 200
    detail = server.get(f"/runs/{response.get_json()['runs'][0]}").get_json()
    assert detail["alert"]["startsAt"].startswith("2026-11-21T05:40:14.123456")
    assert detail["steps"][0]["params"]["message"] == "XID on GPU 3 since 2026-11-21T05:40:14.123456789Z"


def test_unknown_fields_from_newer_alertmanagers_are_accepted(server: Server) -> None:
    payload = real_firing()
    payload["notification_reason"] = "new_alerts_in_group"
    payload["routeLabels"] = {"team": "ml-platform"}
    payload["alerts"][0]["silencedBy"] = []
    payload["alerts"][0]["inhibitedBy"] = None

    response = server.webhook(payload)

    assert response.status_code == 200
    assert response.get_json()["decisions"] == {"accepted": 1}


def test_a_charset_parameter_on_the_json_content_type_is_accepted(server: Server) -> None:
    response = server.webhook(real_firing(), content_type="application/json; charset=utf-8")

    assert response.status_code == 200


# --------------------------------------------------------------------------- 401


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-authorization-header"),
        pytest.param({"Authorization": "Bearer not-the-token"}, id="wrong-token"),
        pytest.param({"Authorization": f"Basic {TOKEN}"}, id="wrong-scheme"),
        pytest.param({"Authorization": "Bearer"}, id="scheme-without-token"),
        pytest.param({"Authorization": TOKEN}, id="token-without-scheme"),
        pytest.param({"Authorization": f"Bearer {TOKEN}x"}, id="token-with-extra-character"),
    ],
)
def test_a_request_without_the_right_bearer_token_gets_401_and_records_nothing(
    server: Server, headers: dict[str, str]
) -> None:
    before = server.counts()

    response = server.client.post(
        "/webhook", data=json.dumps(real_firing()), content_type="application/json", headers=headers
    )

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.get_json()["error"] == "unauthorized"
    assert server.counts() == before


def test_the_bearer_scheme_is_case_insensitive(server: Server) -> None:
    response = server.client.post(
        "/webhook",
        data=json.dumps(real_firing()),
        content_type="application/json",
        headers={"Authorization": f"bearer {TOKEN}"},
    )

    assert response.status_code == 200


def test_the_token_is_checked_before_the_body_is_looked_at(server: Server) -> None:
    response = server.webhook(b"not json at all", token=None, content_type="text/plain")

    assert response.status_code == 401


# --------------------------------------------------------------------------- 415, 413


@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        pytest.param("text/plain", json.dumps(real_firing()), id="text-plain"),
        pytest.param("application/x-www-form-urlencoded", "version=4&status=firing", id="form"),
        pytest.param("multipart/form-data; boundary=xyz", "--xyz--\r\n", id="multipart"),
        pytest.param("application/xml", "<alerts/>", id="xml"),
    ],
)
def test_a_body_that_is_not_json_gets_415_with_a_json_error_and_records_nothing(
    server: Server, content_type: str, data: str
) -> None:
    before = server.counts()

    response = server.webhook(data, content_type=content_type)

    assert response.status_code == 415
    assert response.is_json
    assert response.get_json()["error"] == "unsupported_media_type"
    assert server.counts() == before


def test_a_form_encoded_post_gets_415(server: Server) -> None:
    response = server.client.post("/webhook", data={"version": "4"}, headers={"Authorization": f"Bearer {TOKEN}"})

    assert response.status_code == 415
    assert response.get_json()["error"] == "unsupported_media_type"


def test_a_body_over_max_body_bytes_gets_413_with_a_json_error_and_records_nothing(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(max_body_bytes=2048)
    payload = real_firing()
    payload["alerts"][0]["annotations"]["description"] = "x" * 4096
    before = server.counts()

    response = server.webhook(payload)

    assert response.status_code == 413
    assert response.is_json
    assert response.get_json()["error"] == "payload_too_large"
    assert "2048" in response.get_json()["message"]
    assert server.counts() == before
    # The same notification, small enough, goes through.
    assert server.webhook(real_firing()).status_code == 200


def _post_chunked(server: Server, body: bytes) -> Any:
    """POST without Content-Length, as a chunked request arrives from gunicorn (input_terminated)."""
    environ = EnvironBuilder(
        path="/webhook",
        method="POST",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {TOKEN}", "Transfer-Encoding": "chunked"},
    ).get_environ()
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True
    return server.client.open(Request(environ))


def test_a_chunked_body_over_max_body_bytes_gets_413_too(make_server: Callable[..., Server]) -> None:
    server = make_server(max_body_bytes=2048)
    payload = real_firing()
    payload["alerts"][0]["annotations"]["description"] = "x" * 4096
    before = server.counts()

    response = _post_chunked(server, json.dumps(payload).encode())

    assert response.status_code == 413
    assert response.get_json()["error"] == "payload_too_large"
    assert server.counts() == before


def test_a_chunked_body_of_exactly_max_body_bytes_is_accepted(make_server: Callable[..., Server]) -> None:
    body = json.dumps(real_firing()).encode()
    server = make_server(max_body_bytes=len(body) + 100)

    exact = _post_chunked(server, body + b" " * 100)
    over = _post_chunked(server, body + b" " * 101)

    assert exact.status_code == 200
    assert over.status_code == 413


# --------------------------------------------------------------------------- 400


def _two_alerts() -> dict[str, Any]:
    return notification(alert("aa01", Hostname="node-a"), alert("aa02", Hostname="node-b"))


def _mutated(change: Callable[[dict[str, Any]], None]) -> bytes:
    payload = _two_alerts()
    change(payload)
    return json.dumps(payload).encode()


BAD_BODIES = [
    pytest.param(b'{"version": "4", "status": "firing", "alerts": [', "", "JSON", id="truncated-json"),
    pytest.param(b"", "", "JSON", id="empty-body"),
    pytest.param(b"[]", "", "object", id="json-array"),
    pytest.param(_mutated(lambda p: p.update(version="3")), "version", "4", id="version-3"),
    pytest.param(_mutated(lambda p: p.update(version=4)), "version", "string", id="version-number"),
    pytest.param(_mutated(lambda p: p.pop("alerts")), "alerts", "required", id="alerts-missing"),
    pytest.param(_mutated(lambda p: p.update(alerts=[])), "alerts", "at least one", id="alerts-empty"),
    pytest.param(_mutated(lambda p: p.update(status="pending")), "status", "firing", id="status-unknown"),
    pytest.param(
        _mutated(lambda p: p["alerts"][1].update(startsAt="yesterday at noon")),
        "alerts[1].startsAt",
        "RFC 3339",
        id="starts-at-garbage",
    ),
    pytest.param(
        _mutated(lambda p: p["alerts"][1].update(startsAt="2026-02-30T00:00:00Z")),
        "alerts[1].startsAt",
        "not a valid timestamp",
        id="starts-at-impossible-date",
    ),
    pytest.param(
        _mutated(lambda p: p["alerts"][0]["labels"].pop("alertname")),
        "alerts[0].labels.alertname",
        "required",
        id="labels-without-alertname",
    ),
    pytest.param(
        _mutated(lambda p: p["alerts"][1]["labels"].update(gpu=3)),
        "alerts[1].labels.gpu",
        "string",
        id="label-value-not-a-string",
    ),
    pytest.param(
        _mutated(lambda p: p["alerts"][0]["labels"].update({"bad-name": "x"})),
        'alerts[0].labels["bad-name"]',
        "label name",
        id="label-name-invalid",
    ),
    pytest.param(
        _mutated(lambda p: p["alerts"][1].pop("fingerprint")),
        "alerts[1].fingerprint",
        "required",
        id="fingerprint-missing",
    ),
    pytest.param(_mutated(lambda p: p["alerts"].append("x")), "alerts[2]", "object", id="alert-not-an-object"),
    # Bodies json.loads(bytes) would take but that are not UTF-8 JSON, or that json cannot finish.
    pytest.param(json.dumps(real_firing()).encode("utf-16"), "", "UTF-8", id="utf-16-body"),
    pytest.param(
        json.dumps(real_firing())[:-1].encode() + b', "x": "\xed\xa0\x80"}', "", "UTF-8", id="encoded-lone-surrogate"
    ),
    pytest.param(b'{"version": "4", "x": ' + b"7" * 5000 + b"}", "", "JSON", id="integer-with-5000-digits"),
    # A JSON escape of a lone surrogate: orjson refuses the body, json reads it, and the field is named.
    pytest.param(
        json.dumps(real_firing()).replace('"alertname"', '"container": "trainer-\\ud800", "alertname"', 1).encode(),
        "alerts[0].labels.container",
        "surrogate",
        id="escaped-lone-surrogate-in-a-label",
    ),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "", "JSON", id="nested-100000-deep"),
]


@pytest.mark.parametrize(("body", "field", "words"), BAD_BODIES)
def test_a_malformed_notification_gets_400_naming_the_field_and_records_nothing(
    server: Server, body: bytes, field: str, words: str
) -> None:
    before = server.counts()

    response = server.webhook(body)

    assert response.status_code == 400
    error = response.get_json()
    assert error["error"] == "invalid_payload"
    assert error["field"] == field
    assert words in error["message"]
    assert server.counts() == before


def test_a_bad_second_alert_does_not_let_the_good_first_one_through(server: Server) -> None:
    payload = _two_alerts()
    payload["alerts"][1]["labels"]["gpu"] = ["3"]
    before = server.counts()

    response = server.webhook(payload)

    assert response.status_code == 400
    assert response.get_json()["field"] == "alerts[1].labels.gpu"
    assert server.counts() == before
    assert server.history()["entries"] == []


# --------------------------------------------------------------------------- 503


def test_a_store_that_cannot_be_written_gets_503_and_nothing_is_half_recorded(server: Server) -> None:
    server.webhook(notification(alert("aa00")))
    before = server.counts()
    drop_table(server.db_path, "runs")

    response = server.webhook(_two_alerts())

    assert response.status_code == 503
    assert response.is_json
    assert response.get_json()["error"] == "store_unavailable"
    after = server.counts()
    assert "runs" not in after
    for table in ("notifications", "alerts", "decisions", "steps"):
        assert after[table] == before[table], table


# --------------------------------------------------------------------------- auth configuration


def test_a_server_started_with_insecure_no_auth_accepts_webhooks_without_a_token(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(token=None, operator_token=None, read_token=None, insecure_no_auth=True)

    response = server.webhook(real_firing(), token=None)

    assert response.status_code == 200
    assert server.counts()["runs"] == 1


def test_a_configured_token_still_applies_when_insecure_no_auth_is_also_set(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(insecure_no_auth=True)

    assert server.webhook(real_firing(), token=None).status_code == 401
    assert server.webhook(real_firing()).status_code == 200


def test_without_a_token_and_without_insecure_no_auth_build_services_refuses(tmp_path: Any) -> None:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "log-xid.yaml").write_text(LOG_XID, encoding="utf-8")
    settings = Settings.of(playbooks=tmp_path / "playbooks", database_url=f"sqlite:///{tmp_path / 'r.db'}")

    with pytest.raises(ConfigError, match="no token configured"):
        build_services(settings)

    assert not (tmp_path / "r.db").exists()


def test_the_token_can_come_from_a_token_file(tmp_path: Any) -> None:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "log-xid.yaml").write_text(LOG_XID, encoding="utf-8")
    (tmp_path / "token").write_text("from-a-token-file-0123\n", encoding="utf-8")
    settings = Settings.of(
        token_file=tmp_path / "token",
        playbooks=tmp_path / "playbooks",
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        executor_threads=0,
    )
    services = build_services(settings)
    try:
        client = create_app(settings, services=services).test_client()
        body = json.dumps(real_firing())

        wrong = client.post(
            "/webhook", data=body, content_type="application/json", headers={"Authorization": "Bearer x"}
        )
        right = client.post(
            "/webhook",
            data=body,
            content_type="application/json",
            headers={"Authorization": "Bearer from-a-token-file-0123"},
        )

        assert wrong.status_code == 401
        assert right.status_code == 200
    finally:
        services.store.close()
