"""notify.webhook against a real local HTTP server (tests.realsystems.WebhookRecorder)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from remediate.actions.base import StepContext
from remediate.actions.notify import NotifyWebhookAction
from remediate.engine import Engine, IngestResult
from remediate.errors import ActionError, AmbiguousActionError, RetryableActionError
from remediate.executor import Executor
from remediate.store import Store
from tests.realsystems import WebhookRecorder

ALERT = {
    "labels": {"alertname": "GpuXidError", "Hostname": "node-a", "gpu": "3"},
    "annotations": {"summary": "GPU 3 Xid error"},
    "status": "firing",
    "alertname": "GpuXidError",
    "fingerprint": "c5801e9cde93e74f",
    "startsAt": "2026-01-01T00:00:00Z",
    "endsAt": "",
    "generatorURL": "http://prometheus/graph",
}


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hooks/oncall") as server:
        yield server


@pytest.fixture
def action() -> Iterator[NotifyWebhookAction]:
    with requests.Session() as session:
        yield NotifyWebhookAction(session=session)


def context(deadline: float = float("inf")) -> StepContext:
    return StepContext(
        run_id=7, step_index=0, playbook="notify-oncall", target="node-a", alert=ALERT, deadline=deadline
    )


def params(action: NotifyWebhookAction, url: str, **extra: Any) -> dict[str, Any]:
    return action.validate({"url": url, **extra})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that accepts connections (the kernel's listen queue) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/hook"


def test_execute_posts_the_summary_as_json(recorder: WebhookRecorder, action: NotifyWebhookAction) -> None:
    result = action.execute(
        params(action, recorder.url, message="GPU 3 on node-a", headers={"X-Team": "ml-infra"}), context()
    )

    assert result == {"posted_to": recorder.url, "status_code": 200}
    (request,) = recorder.requests
    assert (request.method, request.path) == ("POST", "/hooks/oncall")
    assert request.header("Content-Type") == "application/json"
    assert request.header("X-Team") == "ml-infra"
    assert request.json == {
        "source": "remediate",
        "run_id": 7,
        "playbook": "notify-oncall",
        "target": "node-a",
        "message": "GPU 3 on node-a",
        "alert": {
            "alertname": "GpuXidError",
            "status": "firing",
            "fingerprint": "c5801e9cde93e74f",
            "startsAt": "2026-01-01T00:00:00Z",
            "labels": ALERT["labels"],
            "annotations": ALERT["annotations"],
        },
    }


def test_the_message_defaults_to_empty(recorder: WebhookRecorder, action: NotifyWebhookAction) -> None:
    action.execute(params(action, recorder.url), context())

    assert recorder.requests[0].json["message"] == ""


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_server_errors_and_429_may_have_been_acted_on_and_are_not_retryable(
    recorder: WebhookRecorder, action: NotifyWebhookAction, status: int
) -> None:
    recorder.status = status

    with pytest.raises(AmbiguousActionError, match=f"answered {status}.*not sent again") as info:
        action.execute(params(action, recorder.url), context())

    assert not isinstance(info.value, RetryableActionError)
    assert info.value.maybe_applied


def test_every_post_carries_an_idempotency_key_of_its_run_and_step(
    recorder: WebhookRecorder, action: NotifyWebhookAction
) -> None:
    action.execute(params(action, recorder.url), context())

    assert recorder.requests[0].header("Idempotency-Key") == "remediate-run-7-step-0"


@pytest.mark.parametrize("status", [400, 401, 404])
def test_other_client_errors_fail_without_retry(
    recorder: WebhookRecorder, action: NotifyWebhookAction, status: int
) -> None:
    recorder.status = status

    with pytest.raises(ActionError, match=f"answered {status}") as info:
        action.execute(params(action, recorder.url), context())

    assert not isinstance(info.value, RetryableActionError)


def test_connection_refused_is_retryable(action: NotifyWebhookAction) -> None:
    url = f"http://127.0.0.1:{closed_port()}/hook"

    with pytest.raises(RetryableActionError, match=r"POST .* failed: ConnectionError"):
        action.execute(params(action, url), context())


def test_a_receiver_that_never_answers_times_out_as_maybe_applied(silent_url: str, action: NotifyWebhookAction) -> None:
    started = time.monotonic()
    with pytest.raises(AmbiguousActionError, match=r"ReadTimeout.*may have got it"):
        action.execute(params(action, silent_url, timeout=0.1), context())

    assert time.monotonic() - started < 0.45


def test_the_request_timeout_never_outlasts_the_step_deadline(silent_url: str, action: NotifyWebhookAction) -> None:
    started = time.monotonic()
    with pytest.raises(AmbiguousActionError, match="Timeout"):
        action.execute(params(action, silent_url, timeout=30), context(deadline=time.monotonic() + 0.15))

    assert time.monotonic() - started < 0.5


def test_plan_describes_the_post_and_sends_nothing(recorder: WebhookRecorder, action: NotifyWebhookAction) -> None:
    plan = action.plan(params(action, recorder.url, message="m"), context())

    assert plan["would_post_to"] == recorder.url
    assert plan["body"]["message"] == "m"
    assert plan["body"]["alert"]["labels"]["gpu"] == "3"
    time.sleep(0.05)
    assert recorder.requests == []


def _notify_run(
    url: str,
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """Ingest one alert for a one-step notify playbook, drain the executor; the run's detail."""
    playbook = {
        "name": "notify-oncall",
        "match": {"alertname": "GpuXidError"},
        "steps": [
            {"action": "notify.webhook", "with": {"url": url, "message": "GPU {{ labels.gpu }}", **extra}, "retries": 2}
        ],
    }
    engine = make_engine(playbook)
    (decision,) = ingest(engine, make_alert("GpuXidError", labels={"gpu": "5"}), at=1_767_225_600.0).decisions
    Executor(store=store, registry=engine.registry, retry_wait_max=0.01).drain()
    return store.run_detail(decision.run_id)


@pytest.mark.parametrize(
    ("receiver", "error"),
    [
        pytest.param({"status": 503}, "answered 503", id="503"),
        pytest.param({"delay": 1.0}, "ReadTimeout", id="slower-than-the-timeout"),
        pytest.param({"drop": True}, "ConnectionError", id="drops-after-reading-the-body"),
    ],
)
def test_through_the_executor_a_post_the_receiver_may_have_got_is_never_sent_twice(
    recorder: WebhookRecorder,
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
    receiver: dict[str, Any],
    error: str,
) -> None:
    """Finding 16: with `retries: 2`, each of these receivers got the same POST 3 times."""
    for name, value in receiver.items():
        setattr(recorder, name, value)

    detail = _notify_run(recorder.url, store, make_engine, ingest, make_alert, timeout=0.3)

    assert detail["status"] == "failed"
    (step,) = detail["steps"]
    assert [a["outcome"] for a in step["attempts"]] == ["maybe_applied"]
    assert error in step["error"]
    assert "not sent again" in step["error"]
    time.sleep(0.8 if receiver.get("delay") else 0.1)  # a slow receiver records on arrival; leave time for more
    assert len(recorder.requests) == 1
    assert recorder.requests[0].json["message"] == "GPU 5"


def test_through_the_executor_a_refused_connection_is_retried_as_nothing_was_sent(
    store: Store,
    make_engine: Callable[..., Engine],
    ingest: Callable[..., IngestResult],
    make_alert: Callable[..., dict[str, Any]],
) -> None:
    detail = _notify_run(f"http://127.0.0.1:{closed_port()}/hook", store, make_engine, ingest, make_alert)

    assert detail["status"] == "failed"
    (step,) = detail["steps"]
    assert [a["outcome"] for a in step["attempts"]] == ["retryable_error"] * 3
