"""The read and control API: health, metrics, /history, /runs, approval, pause/resume, errors."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import (
    APPROVE_XID,
    LOG_DISK,
    LOG_XID,
    ON_EVERY_DATABASE,
    READ_TOKEN,
    TOKEN,
    Server,
    alert,
    drop_table,
    notification,
    notify_playbook,
    real_firing,
)
from tests.support.realsystems import WebhookRecorder


def metric_samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = server.get("/metrics", token=None)
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- health, readiness, metrics


def test_healthz_answers_200_without_a_token(server: Server) -> None:
    response = server.get("/healthz", token=None)

    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


@ON_EVERY_DATABASE
def test_readyz_answers_200_with_the_number_of_playbooks_when_the_store_is_reachable(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"a.yaml": LOG_XID, "b.yaml": LOG_DISK})

    response = server.get("/readyz", token=None)

    assert response.status_code == 200
    assert response.get_json() == {"status": "ready", "playbooks": 2}


def test_readyz_answers_503_with_a_json_error_when_the_store_is_broken(server: Server) -> None:
    drop_table(server.db_path, "meta")

    response = server.get("/readyz", token=None)

    assert response.status_code == 503
    assert response.get_json()["error"] == "store_unreachable"
    assert server.get("/healthz", token=None).status_code == 200


def test_metrics_count_notifications_alerts_and_decisions_by_decision(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"a.yaml": LOG_XID})
    server.webhook(notification(alert("f1"), alert("f2", alertname="Watchdog")))
    server.webhook(notification(alert("f1")))

    samples = metric_samples(server)

    assert samples[("remediate_notifications_received_total", (("status", "firing"),))] == 2
    assert samples[("remediate_alerts_received_total", (("status", "firing"),))] == 3
    assert samples[("remediate_decisions_total", (("decision", "accepted"),))] == 1
    assert samples[("remediate_decisions_total", (("decision", "unmatched"),))] == 1
    assert samples[("remediate_decisions_total", (("decision", "duplicate"),))] == 1


def test_metrics_count_refused_webhooks_by_status_code(server: Server) -> None:
    server.webhook(real_firing(), token=None)
    server.webhook("{", content_type="application/json")
    server.webhook("{}", content_type="text/plain")

    samples = metric_samples(server)

    assert samples[("remediate_webhook_rejected_total", (("code", "401"),))] == 1
    assert samples[("remediate_webhook_rejected_total", (("code", "400"),))] == 1
    assert samples[("remediate_webhook_rejected_total", (("code", "415"),))] == 1


def test_only_refused_webhooks_count_as_webhook_rejections(server: Server) -> None:
    server.webhook(real_firing(), token=READ_TOKEN)  # 403: a read token may not send alerts
    server.get("/history", token=None)  # 401, not a webhook
    server.post("/pause", token=READ_TOKEN)  # 403, not a webhook

    samples = metric_samples(server)

    assert samples[("remediate_webhook_rejected_total", (("code", "403"),))] == 1
    assert ("remediate_webhook_rejected_total", (("code", "401"),)) not in samples


# --------------------------------------------------------------------------- routes by resource


def test_every_route_comes_from_the_blueprint_of_its_resource(server: Server) -> None:
    """No route is registered on the app itself; each resource (webhook, runs, control,
    agents, health, the pages) is a blueprint of its own module, built from the services the app holds."""
    app = server.app
    routes = [rule for rule in app.url_map.iter_rules() if rule.endpoint != "static"]
    assert routes
    for rule in routes:
        blueprint, _, _ = rule.endpoint.rpartition(".")
        assert blueprint in app.blueprints, f"{rule.rule} is registered on the app, not by a resource's blueprint"
        assert app.blueprints[blueprint].import_name.startswith(("remediate.server.", "remediate.server.ui.")), (
            rule.rule
        )
    assert len({bp.import_name for bp in app.blueprints.values()}) == len(app.blueprints)


@ON_EVERY_DATABASE
def test_metrics_show_the_queue_depth_and_step_durations_after_the_executor_drains(server: Server) -> None:
    server.webhook(notification(alert("f1"), alert("f2")))

    queued = metric_samples(server)
    assert queued[("remediate_queue_depth", (("status", "queued"),))] == 2
    assert 0 < queued[("remediate_queue_oldest_age_seconds", ())] < 60
    assert ("remediate_step_duration_seconds_count", (("action", "log"),)) not in queued

    assert server.drain() == 2
    drained = metric_samples(server)

    assert drained[("remediate_queue_depth", (("status", "queued"),))] == 0
    assert drained[("remediate_queue_depth", (("status", "running"),))] == 0
    assert drained[("remediate_step_duration_seconds_count", (("action", "log"),))] == 2
    assert drained[("remediate_step_duration_seconds_bucket", (("action", "log"), ("le", "+Inf")))] == 2
    assert drained[("remediate_steps_total", (("action", "log"), ("outcome", "succeeded")))] == 2
    assert drained[("remediate_runs_finished_total", (("playbook", "log-xid"), ("status", "succeeded")))] == 2
    assert drained[("remediate_queue_oldest_age_seconds", ())] == 0
    assert drained[("remediate_paused", ())] == 0


@ON_EVERY_DATABASE
def test_metrics_show_runs_awaiting_approval_and_the_pause_state(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"a.yaml": APPROVE_XID})
    server.webhook(real_firing())
    server.post("/pause", json={"reason": "maintenance"})

    samples = metric_samples(server)

    assert samples[("remediate_queue_depth", (("status", "awaiting_approval"),))] == 1
    assert samples[("remediate_paused", ())] == 1


# --------------------------------------------------------------------------- /history


@pytest.fixture
def busy(make_server: Callable[..., Server]) -> Server:
    """A server with some history: two playbooks, two nodes, an unmatched alert, a finished run."""
    server = make_server(playbooks={"xid.yaml": LOG_XID, "disk.yaml": LOG_DISK})
    server.webhook(notification(alert("x-a", Hostname="node-a"), alert("x-b", Hostname="node-b")))
    server.drain()  # both xid runs succeed
    server.webhook(
        notification(
            alert("d-a", alertname="NodeFilesystemAlmostOutOfSpace", instance="node-a:9100"),
            alert("w-1", alertname="Watchdog"),
        )
    )
    return server


def summarize(entries: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None, str]]:
    return [(e["alertname"], e["playbook"], e["target"], e["status"]) for e in entries]


@ON_EVERY_DATABASE
def test_history_lists_decisions_and_runs_newest_first(busy: Server) -> None:
    page = busy.history()

    assert summarize(page["entries"]) == [
        ("Watchdog", None, None, "unmatched"),
        ("NodeFilesystemAlmostOutOfSpace", "log-disk", "node-a", "queued"),
        ("GpuXidError", "log-xid", "node-b", "succeeded"),
        ("GpuXidError", "log-xid", "node-a", "succeeded"),
    ]
    assert page["next_cursor"] is None
    ids = [e["id"] for e in page["entries"]]
    assert ids == sorted(ids, reverse=True)
    finished = page["entries"][-1]
    assert finished["decision"] == "accepted"
    assert finished["run"]["status"] == "succeeded"
    assert finished["run"]["finished_at"] >= finished["run"]["started_at"]
    assert page["entries"][0]["run"] is None


@ON_EVERY_DATABASE
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"playbook": "log-xid"}, [("GpuXidError", "node-b"), ("GpuXidError", "node-a")]),
        ({"alertname": "NodeFilesystemAlmostOutOfSpace"}, [("NodeFilesystemAlmostOutOfSpace", "node-a")]),
        ({"target": "node-a"}, [("NodeFilesystemAlmostOutOfSpace", "node-a"), ("GpuXidError", "node-a")]),
        ({"node": "node-b"}, [("GpuXidError", "node-b")]),
        ({"status": "unmatched"}, [("Watchdog", None)]),
        ({"status": "succeeded", "target": "node-a"}, [("GpuXidError", "node-a")]),
        ({"playbook": "log-xid", "status": "queued"}, []),
        ({"alertname": "NoSuchAlert"}, []),
    ],
)
def test_history_filters_by_playbook_alertname_target_node_and_status(
    busy: Server, params: dict[str, str], expected: list[tuple[str, str | None]]
) -> None:
    entries = busy.history(**params)["entries"]

    assert [(e["alertname"], e["target"]) for e in entries] == expected


@ON_EVERY_DATABASE
def test_history_filters_by_since_and_until_as_rfc3339_and_as_epoch_seconds(server: Server) -> None:
    server.webhook(notification(alert("early")))
    time.sleep(0.02)
    server.webhook(notification(alert("late")))
    late, early = server.history()["entries"]
    middle = (early["time"] + late["time"]) / 2

    for since in (str(middle), rfc3339(middle)):
        assert [e["fingerprint"] for e in server.history(since=since)["entries"]] == ["late"], since
    for until in (str(middle), rfc3339(middle)):
        assert [e["fingerprint"] for e in server.history(until=until)["entries"]] == ["early"], until
    window = server.history(since=str(early["time"]), until=str(late["time"]))["entries"]
    assert [e["fingerprint"] for e in window] == ["early"]  # since inclusive, until exclusive


def test_history_accepts_rfc3339_times_with_an_offset(server: Server) -> None:
    server.webhook(real_firing())
    recorded = server.history()["entries"][0]["time"]

    def at(offset_hours: int, seconds_from_entry: float) -> str:
        zone = timezone(timedelta(hours=offset_hours))
        return datetime.fromtimestamp(recorded + seconds_from_entry, zone).isoformat(timespec="seconds")

    assert at(2, -3600).endswith("+02:00")
    assert len(server.history(since=at(2, -3600), until=at(-5, 3600))["entries"]) == 1
    assert server.history(since=at(2, 3600))["entries"] == []
    assert server.history(until=at(-5, -3600))["entries"] == []


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "-5"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"since": "last tuesday"}, "since"),
        ({"until": "2026-13-01T00:00:00Z"}, "until"),
        ({"nodes": "node-a"}, "nodes"),
        ({"order": "asc"}, "order"),
    ],
)
def test_history_refuses_bad_query_parameters_with_400_naming_them(
    busy: Server, query: dict[str, str], words: str
) -> None:
    response = busy.get("/history", query_string=query)

    assert response.status_code == 400
    error = response.get_json()
    assert error["error"] == "invalid_query"
    assert words in error["message"]


@pytest.mark.parametrize("limit", [1, 1000])
def test_history_accepts_limits_from_1_to_1000(busy: Server, limit: int) -> None:
    page = busy.history(limit=limit)

    assert len(page["entries"]) == min(limit, 4)
    assert (page["next_cursor"] is not None) == (limit < 4)


@ON_EVERY_DATABASE
def test_history_cursor_pagination_returns_each_entry_exactly_once_newest_first(server: Server) -> None:
    server.webhook(notification(*[alert(f"fp-{n:03d}", Hostname=f"node-{n:03d}") for n in range(120)]))
    everything = [e["id"] for e in server.history(limit=1000)["entries"]]
    assert len(everything) == 120

    seen: list[int] = []
    page = server.history(limit=25)
    pages = 1
    while True:
        seen.extend(e["id"] for e in page["entries"])
        if page["next_cursor"] is None:
            break
        if pages == 2:
            # New entries arriving mid-way are newer than the cursor: they do not shift later pages.
            server.webhook(notification(alert("late-arrival", Hostname="node-late")))
        page = server.history(limit=25, cursor=page["next_cursor"])
        pages += 1

    assert pages == 5
    assert seen == everything
    assert len(set(seen)) == 120


@ON_EVERY_DATABASE
def test_history_cursor_pagination_keeps_filters_across_pages(busy: Server) -> None:
    first = busy.history(playbook="log-xid", limit=1)
    second = busy.history(playbook="log-xid", limit=1, cursor=first["next_cursor"])

    assert [e["target"] for e in first["entries"] + second["entries"]] == ["node-b", "node-a"]
    assert second["next_cursor"] is None


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor!",
        base64.urlsafe_b64encode(b"x:12").decode(),
        base64.urlsafe_b64encode(b"d:twelve").decode(),
        base64.urlsafe_b64encode(b"d:-1").decode(),
        base64.urlsafe_b64encode(b"d:99999999999999999999999").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_history_refuses_a_bad_cursor_with_400(busy: Server, cursor: str) -> None:
    response = busy.get("/history", query_string={"cursor": cursor})

    assert response.status_code == 400
    assert "cursor" in response.get_json()["message"]


def test_the_read_token_can_read_history_runs_and_the_pause_state(busy: Server) -> None:
    run_id = busy.history(status="succeeded")["entries"][0]["run_id"]

    assert busy.get("/history", token=READ_TOKEN).status_code == 200
    assert busy.get(f"/runs/{run_id}", token=READ_TOKEN).status_code == 200
    assert busy.get("/pause", token=READ_TOKEN).status_code == 200


@pytest.mark.parametrize("path", ["/history", "/runs/1", "/pause"])
def test_reading_endpoints_need_a_token(busy: Server, path: str) -> None:
    response = busy.get(path, token=None)

    assert response.status_code == 401
    assert "WWW-Authenticate" in response.headers


# --------------------------------------------------------------------------- /runs/<id>


@ON_EVERY_DATABASE
def test_run_detail_after_the_executor_drains_shows_alert_decision_steps_plan_result_and_attempts(
    make_server: Callable[..., Server],
) -> None:
    with WebhookRecorder(path="/hook") as receiver:
        playbook = notify_playbook(receiver.url).replace(
            "steps:\n", 'steps:\n  - action: log\n    with: {message: "GPU {{ labels.gpu }} reported"}\n', 1
        )
        server = make_server(playbooks={"notify.yaml": playbook})
        run_id = server.webhook(real_firing()).get_json()["runs"][0]
        server.drain()

        detail = server.get(f"/runs/{run_id}").get_json()

    assert detail["id"] == run_id
    assert detail["playbook"] == "notify-xid"
    assert detail["status"] == "succeeded"
    assert detail["phase"] == "firing"
    assert detail["mode"] == "enforce"
    assert detail["target"] == "alert/c5801e9cde93e74f"
    assert detail["created_at"] <= detail["started_at"] <= detail["finished_at"]
    assert detail["decision"]["decision"] == "accepted"
    assert "notify-xid" in detail["decision"]["reason"]
    assert detail["alert"]["fingerprint"] == "c5801e9cde93e74f"
    assert detail["alert"]["labels"]["gpu"] == "3"
    assert detail["alert"]["annotations"]["summary"] == "GPU 3 Xid error"
    assert detail["alert"]["generatorURL"] == "http://example/graph"

    log_step, notify_step = detail["steps"]
    assert log_step["action"] == "log"
    assert log_step["params"] == {"message": "GPU 3 reported", "level": "info"}
    assert log_step["plan"] == {"would_log": "GPU 3 reported", "level": "info"}
    assert log_step["result"] == {"logged": "GPU 3 reported", "level": "info"}
    assert notify_step["action"] == "notify.webhook"
    assert notify_step["params"]["url"] == receiver.url
    # The message is rendered when its step runs: its params keep the template, its
    # result says what was sent.
    assert notify_step["params"]["message"] == "GPU {{ labels.gpu }} reported XID errors"
    assert notify_step["plan"]["would_post_to"] == receiver.url
    assert notify_step["result"] == {
        "posted_to": receiver.url,
        "status_code": 200,
        "message": "GPU 3 reported XID errors",
    }
    assert notify_step["retries"] == 0
    assert notify_step["timeout"] == 10
    for step in (log_step, notify_step):
        assert step["status"] == "succeeded"
        assert step["error"] is None
        assert [a["number"] for a in step["attempts"]] == [1]
        assert step["attempts"][0]["outcome"] == "succeeded"
        assert step["attempts"][0]["finished_at"] >= step["attempts"][0]["started_at"]
    posted = receiver.requests[0].json
    assert posted["run_id"] == run_id
    assert posted["alert"]["labels"]["gpu"] == "3"


@ON_EVERY_DATABASE
def test_a_step_that_fails_is_shown_with_its_error_and_every_attempt(make_server: Callable[..., Server]) -> None:
    with WebhookRecorder(status=404, path="/hook") as receiver:
        server = make_server(playbooks={"notify.yaml": notify_playbook(receiver.url)})
        run_id = server.webhook(real_firing()).get_json()["runs"][0]
        server.drain()

        detail = server.get(f"/runs/{run_id}").get_json()

    assert detail["status"] == "failed"
    assert "404" in detail["error"]
    step = detail["steps"][0]
    assert step["status"] == "failed"
    assert "answered 404" in step["error"]
    assert [(a["number"], a["outcome"]) for a in step["attempts"]] == [(1, "failed")]


@pytest.mark.parametrize("run_id", ["424242", "0", "99999999999999999999999"])
def test_an_unknown_run_is_a_json_404(busy: Server, run_id: str) -> None:
    response = busy.get(f"/runs/{run_id}")

    assert response.status_code == 404
    assert response.get_json()["error"] == "not_found"


def test_a_run_id_that_is_not_a_number_is_a_json_404(busy: Server) -> None:
    response = busy.get("/runs/abc")

    assert response.status_code == 404
    assert response.is_json


# --------------------------------------------------------------------------- approval


@pytest.fixture
def approval(make_server: Callable[..., Server]) -> tuple[Server, int]:
    server = make_server(playbooks={"approve.yaml": APPROVE_XID})
    body = server.webhook(real_firing()).get_json()
    assert body["decisions"] == {"accepted": 1}
    return server, body["runs"][0]


@ON_EVERY_DATABASE
def test_a_playbook_in_approve_mode_leaves_its_run_awaiting_approval(approval: tuple[Server, int]) -> None:
    server, run_id = approval

    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    assert server.drain() == 0
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    assert server.history()["entries"][0]["status"] == "awaiting_approval"


@ON_EVERY_DATABASE
def test_approving_a_run_queues_it_records_who_approved_and_the_executor_then_runs_it(
    approval: tuple[Server, int],
) -> None:
    server, run_id = approval

    response = server.post(f"/runs/{run_id}/approve", json={"by": "alice"})

    assert response.status_code == 200
    approved = response.get_json()
    assert approved["status"] == "queued"
    # The principal is the token's name; the body's "by" is only a note beside it.
    assert approved["approved_by"] == "operator (note: alice)"
    assert approved["approved_at"] is not None
    assert server.drain() == 1
    done = server.get(f"/runs/{run_id}").get_json()
    assert done["status"] == "succeeded"
    assert done["approved_by"] == "operator (note: alice)"
    assert done["steps"][0]["result"] == {"logged": "approved fix for GPU 3", "level": "info"}
    assert server.history()["entries"][0]["status"] == "succeeded"


@ON_EVERY_DATABASE
def test_approving_without_a_name_records_the_authenticated_principal(approval: tuple[Server, int]) -> None:
    server, run_id = approval

    approved = server.post(f"/runs/{run_id}/approve").get_json()

    assert approved["approved_by"] == "operator"


@ON_EVERY_DATABASE
def test_approving_a_run_twice_is_a_409_conflict(approval: tuple[Server, int]) -> None:
    server, run_id = approval
    server.post(f"/runs/{run_id}/approve", json={"by": "alice"})

    again = server.post(f"/runs/{run_id}/approve", json={"by": "bob"})

    assert again.status_code == 409
    assert again.get_json()["error"] == "conflict"
    assert "queued" in again.get_json()["message"]
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "operator (note: alice)"


@ON_EVERY_DATABASE
def test_approving_an_unknown_run_is_a_404(approval: tuple[Server, int]) -> None:
    server, _ = approval

    response = server.post("/runs/999/approve", json={"by": "alice"})

    assert response.status_code == 404
    assert response.get_json()["error"] == "not_found"


@pytest.mark.parametrize(
    ("token", "status"), [(READ_TOKEN, 403), (TOKEN, 403), ("unknown-token-000000", 401), (None, 401)]
)
def test_the_read_token_the_webhook_token_or_no_token_cannot_approve(
    approval: tuple[Server, int], token: str | None, status: int
) -> None:
    server, run_id = approval

    response = server.post(f"/runs/{run_id}/approve", json={"by": "mallory"}, token=token)

    # 401: no or an unknown token; 403: a known token without the operator role.
    assert response.status_code == status
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"


@ON_EVERY_DATABASE
def test_a_run_awaiting_approval_is_cancelled_when_its_alert_resolves(approval: tuple[Server, int]) -> None:
    server, run_id = approval
    resolved = real_firing()
    resolved["status"] = resolved["alerts"][0]["status"] = "resolved"
    resolved["alerts"][0]["endsAt"] = "2026-11-21T06:00:00Z"

    assert server.webhook(resolved).status_code == 200

    cancelled = server.get(f"/runs/{run_id}").get_json()
    assert cancelled["status"] == "cancelled"
    assert "resolved" in cancelled["error"]
    assert server.post(f"/runs/{run_id}/approve", json={"by": "alice"}).status_code == 409
    assert server.drain() == 0


# --------------------------------------------------------------------------- pause / resume


@ON_EVERY_DATABASE
def test_while_paused_a_webhook_records_decision_paused_with_the_reason_and_starts_no_run(server: Server) -> None:
    paused = server.post("/pause", json={"reason": "GPU driver upgrade", "by": "alice"})
    assert paused.status_code == 200
    assert paused.get_json()["paused"] is True
    runs_before = server.counts()["runs"]

    body = server.webhook(real_firing()).get_json()

    assert body["decisions"] == {"paused": 1}
    assert body["runs"] == []
    assert server.counts()["runs"] == runs_before
    entry = server.history()["entries"][0]
    assert entry["decision"] == "paused"
    assert entry["run_id"] is None
    assert "operator (note: alice)" in entry["reason"]
    assert "GPU driver upgrade" in entry["reason"]
    assert server.history(status="paused")["entries"] == [entry]


@ON_EVERY_DATABASE
def test_get_pause_shows_who_paused_why_and_since_when(server: Server) -> None:
    assert server.get("/pause").get_json()["paused"] is False
    started = time.time()
    server.post("/pause", json={"reason": "maintenance", "by": "alice"})

    state = server.get("/pause", token=READ_TOKEN).get_json()

    assert state["paused"] is True
    assert state["by"] == "operator (note: alice)"
    assert state["reason"] == "maintenance"
    assert started - 1 <= state["since"] <= time.time() + 1


@ON_EVERY_DATABASE
def test_a_pause_over_a_pause_is_a_409_naming_the_pause_until_force_replaces_it(server: Server) -> None:
    """POST /pause over a pause silently replaced who paused and why."""
    server.post("/pause", json={"reason": "maintenance", "by": "alice"})
    first = server.get("/pause").get_json()

    again = server.post("/pause", json={"reason": "other", "by": "eve"})

    assert again.status_code == 409
    body = again.get_json()
    assert body["error"] == "already_paused"
    assert (body["paused_by"], body["reason"]) == ("operator (note: alice)", "maintenance")
    assert body["since"] == first["since"]
    assert server.get("/pause").get_json() == first
    assert server.post("/pause", json={"force": "yes"}).get_json()["field"] == "force"

    forced = server.post("/pause", json={"reason": "other", "by": "eve", "force": True})

    assert forced.status_code == 200
    assert (forced.get_json()["by"], forced.get_json()["reason"]) == ("operator (note: eve)", "other")


@ON_EVERY_DATABASE
def test_resetting_a_closed_breaker_answers_reset_false_and_moves_nothing(server: Server) -> None:
    """A reset of a closed breaker moved the stale horizon (older alerts became stale)."""
    response = server.post("/breaker/reset", json={"reason": "just in case"})

    assert response.status_code == 200
    assert (response.get_json()["reset"], response.get_json()["reset_at"]) == (False, None)
    assert server.get("/breaker").get_json()["reset_at"] is None


@ON_EVERY_DATABASE
def test_after_resume_new_alerts_run_again_and_a_resent_paused_alert_is_accepted(server: Server) -> None:
    server.post("/pause", json={"reason": "maintenance"})
    server.webhook(notification(alert("during-pause")))

    resumed = server.post("/resume", json={"by": "bob"})

    assert resumed.status_code == 200
    assert resumed.get_json()["paused"] is False
    assert resumed.get_json()["by"] == "operator (note: bob)"
    # AlertManager re-sends the group: the alert refused while paused now runs, and so does a new one.
    body = server.webhook(notification(alert("during-pause"), alert("after-pause"))).get_json()
    assert body["decisions"] == {"accepted": 2}
    assert server.drain() == 2
    assert [e["status"] for e in server.history(status="succeeded")["entries"]] == ["succeeded", "succeeded"]


@pytest.mark.parametrize("path", ["/pause", "/resume", "/breaker/reset"])
@pytest.mark.parametrize(("token", "status"), [(READ_TOKEN, 403), (TOKEN, 403), (None, 401)])
def test_the_read_token_the_webhook_token_or_no_token_cannot_pause_resume_or_reset(
    server: Server, path: str, token: str | None, status: int
) -> None:
    response = server.post(path, json={"reason": "x"}, token=token)

    assert response.status_code == status
    assert response.get_json()["error"] == ("forbidden" if status == 403 else "unauthorized")
    assert server.get("/pause").get_json()["paused"] is False


# --------------------------------------------------------------------------- unknown routes and methods


@pytest.mark.parametrize("path", ["/nope", "/runs", "/history/1", "/webhook/v2"])
def test_an_unknown_route_is_a_json_404(server: Server, path: str) -> None:
    response = server.get(path)

    assert response.status_code == 404
    assert response.is_json
    assert response.get_json()["error"] == "not_found"


def test_the_root_redirects_a_browser_to_the_pages_and_is_a_json_404_without_them(
    make_server: Callable[..., Server],
) -> None:
    response = make_server().client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/ui/"
    without = make_server(ui=False).client.get("/")
    assert without.status_code == 404
    assert without.get_json()["error"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/webhook", "POST"),
        ("DELETE", "/history", "GET"),
        ("PUT", "/pause", "GET"),
        ("GET", "/runs/1/approve", "POST"),
        ("POST", "/healthz", "GET"),
    ],
)
def test_a_wrong_method_is_a_json_405_that_says_what_is_allowed(
    server: Server, method: str, path: str, allowed: str
) -> None:
    response = server.client.open(path, method=method, headers={"Authorization": "Bearer x"})

    assert response.status_code == 405
    assert response.is_json
    assert response.get_json()["error"] == "method_not_allowed"
    assert allowed in response.headers["Allow"]


@pytest.mark.parametrize("path", ["/pause", "/resume", "/breaker/reset"])
@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'"alice"'])
def test_a_malformed_json_body_on_an_operator_endpoint_is_a_400_and_changes_nothing(
    server: Server, path: str, data: bytes
) -> None:
    response = server.post(path, data=data, content_type="application/json")

    assert response.status_code == 400
    assert response.get_json()["field"] == "body"
    assert server.get("/pause").get_json()["paused"] is False


def test_approving_with_a_by_that_is_not_unicode_text_is_a_400_naming_the_field(
    approval: tuple[Server, int],
) -> None:
    server, run_id = approval

    response = server.post(f"/runs/{run_id}/approve", data=b'{"by": "\\ud800"}', content_type="application/json")

    assert response.status_code == 400
    assert response.get_json()["field"] == "by"
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
