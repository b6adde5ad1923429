"""notify.webhook against a real local HTTP server (tests.support.realsystems.WebhookRecorder)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from remediate.actions.base import StepContext
from remediate.actions.notify import NotifyWebhookAction
from remediate.errors import ActionError, AmbiguousActionError, ParamsError, RetryableActionError
from remediate.executor.loop import Executor
from remediate.intake.alerts import alert_ref
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.conftest import XID_CONTEXT as ALERT
from tests.conftest import alert_payload, ingest_alerts
from tests.support.realsystems import WebhookRecorder, free_port
from tests.support.store_json import run_json_of


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
        run_id=7, step_index=0, playbook="notify-oncall", target="node-a", alert=alert_ref(ALERT), deadline=deadline
    )


def params(action: NotifyWebhookAction, url: str, **extra: Any) -> dict[str, Any]:
    return action.validate({"url": url, **extra})


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

    assert result == {"posted_to": recorder.url, "status_code": 200, "message": "GPU 3 on node-a"}
    (request,) = recorder.requests
    assert (request.method, request.path) == ("POST", "/hooks/oncall")
    assert request.header("Content-Type") == "application/json"
    assert request.header("X-Team") == "ml-infra"
    assert request.json == {
        "source": "remediate",
        "run_id": 7,
        "run_url": None,
        "playbook": "notify-oncall",
        "target": "node-a",
        "message": "GPU 3 on node-a",
        "steps": [],
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


@pytest.mark.parametrize(
    ("status", "maybe_applied"),
    [(500, True), (502, True), (503, True), (429, True), (400, False), (401, False), (404, False)],
)
def test_an_error_answer_is_not_retried_and_a_5xx_or_429_may_have_been_acted_on(
    recorder: WebhookRecorder, action: NotifyWebhookAction, status: int, maybe_applied: bool
) -> None:
    recorder.status = status

    with pytest.raises(ActionError, match=f"answered {status}") as info:
        action.execute(params(action, recorder.url), context())

    assert not isinstance(info.value, RetryableActionError)
    assert isinstance(info.value, AmbiguousActionError) is maybe_applied
    if maybe_applied:
        assert info.value.maybe_applied and "not sent again" in str(info.value)


def test_every_post_carries_an_idempotency_key_of_its_run_and_step(
    recorder: WebhookRecorder, action: NotifyWebhookAction
) -> None:
    action.execute(params(action, recorder.url), context())

    assert recorder.requests[0].header("Idempotency-Key") == "remediate-run-7-step-0"


def test_connection_refused_is_retryable(action: NotifyWebhookAction) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"

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
    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels={"gpu": "5"}), at=1_767_225_600.0).decisions
    Executor(store=store, registry=engine.registry, retry_wait_max=0.01).drain()
    return run_json_of(store, decision.run_id)


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
    receiver: dict[str, Any],
    error: str,
) -> None:
    """Finding 16: with `retries: 2`, each of these receivers got the same POST 3 times."""
    for name, value in receiver.items():
        setattr(recorder, name, value)

    detail = _notify_run(recorder.url, store, make_engine, timeout=0.3)

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
) -> None:
    detail = _notify_run(f"http://127.0.0.1:{free_port()}/hook", store, make_engine)

    assert detail["status"] == "failed"
    (step,) = detail["steps"]
    assert [a["outcome"] for a in step["attempts"]] == ["retryable_error"] * 3


# --------------------------------------------------------------------------- secrets and redirects


class _Redirector:
    """A real local HTTP server that answers every POST with `status` and a Location (the receiver's URL)."""

    def __init__(self, status: int, location: str) -> None:
        import http.server
        import threading

        outer = self
        self.posts = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts += 1
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed_and_fails_naming_the_location(
    recorder: WebhookRecorder, action: NotifyWebhookAction, status: int
) -> None:
    redirector = _Redirector(status, recorder.url)
    try:
        with pytest.raises(ActionError, match=f"answered {status} redirecting to {recorder.url}: not followed") as info:
            action.execute(params(action, redirector.url), context())
    finally:
        redirector.close()

    assert not isinstance(info.value, RetryableActionError)
    assert redirector.posts == 1
    assert recorder.requests == []  # the body never reached the URL the playbook did not name


@pytest.mark.parametrize("name", ["Authorization", "X-Api-Key", "Cookie", "X-Auth-Token", "proxy-authorization"])
def test_credentials_in_the_stored_headers_param_are_refused_pointing_to_headers_file(
    action: NotifyWebhookAction, name: str
) -> None:
    errors = action.schema.check_static({"url": "http://example.test/h", "headers": {name: "s3cr3t"}})

    assert len(errors) == 1 and name in errors[0] and "headers_file" in errors[0]


def test_headers_file_must_be_an_absolute_path_written_in_the_playbook(action: NotifyWebhookAction) -> None:
    relative = action.schema.check_static({"url": "http://example.test/h", "headers_file": "secrets/h.yaml"})
    templated = action.schema.check_static({"url": "http://example.test/h", "headers_file": "/s/{{ labels.x }}"})

    assert relative and "absolute path" in relative[0]
    assert templated and "not templated" in templated[0]


def test_the_headers_file_is_read_when_the_step_executes_and_its_headers_are_sent(
    recorder: WebhookRecorder, action: NotifyWebhookAction, tmp_path: Any
) -> None:
    secret = tmp_path / "oncall-headers"
    secret.write_text("Authorization: Bearer first-secret\n", encoding="utf-8")
    step_params = params(action, recorder.url, headers={"X-Team": "ml"}, headers_file=str(secret))
    plan = action.plan(step_params, context())
    secret.write_text("Authorization: Bearer rotated-secret\n", encoding="utf-8")

    action.execute(step_params, context())

    (request,) = recorder.requests
    assert request.header("Authorization") == "Bearer rotated-secret"  # read at execute time, not before
    assert request.header("X-Team") == "ml"
    assert plan["headers_from"] == str(secret)
    assert "secret" not in repr(step_params).replace(str(secret), "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read headers_file"),
        ("- not a mapping\n", "must map header names"),
        ("Authorization: Bearer x\nX-Team: twice\n", "in both headers and headers_file"),
        ('"Bad Name": v\n', "does not allow"),
    ],
)
def test_a_bad_headers_file_fails_naming_the_file_never_its_contents(
    recorder: WebhookRecorder, action: NotifyWebhookAction, tmp_path: Any, content: str | None, message: str
) -> None:
    secret = tmp_path / "headers"
    if content is not None:
        secret.write_text(content, encoding="utf-8")

    with pytest.raises(ActionError, match=message) as info:
        action.execute(params(action, recorder.url, headers={"X-Team": "ml"}, headers_file=str(secret)), context())

    assert "Bearer x" not in str(info.value)
    assert recorder.requests == []


# --------------------------------------------------------------------------- credentials in stored URLs


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@hooks.example.test/events",
        "https://hooks.example.test/events?api_key=abc",
        "https://hooks.example.test/events?token=abc",
        "https://hooks.example.test/events?team=ml&X-Amz-Signature=abc",
        "https://hooks.example.test/events?v=sk_live_51H8aBcDeFgHiJkLmNoPq",  # an innocent name, a key's value
    ],
)
def test_a_url_carrying_credentials_is_refused_at_load_pointing_to_url_file(url: str) -> None:
    """The history stored and showed `https://user:pw@...` and `?api_key=` URLs."""
    from remediate.actions import default_registry
    from remediate.config.settings import Settings
    from remediate.errors import PlaybookError
    from remediate.playbooks.loading import parse_playbook

    playbook = {
        "name": "tell",
        "match": {"alertname": "X"},
        "steps": [{"action": "notify.webhook", "with": {"url": url}}],
    }
    with pytest.raises(PlaybookError, match=r"'url'.*(credential|user:password).*url_file") as info:
        parse_playbook(playbook, default_registry(Settings()), source="tell.yaml")

    assert "steps[0]" in str(info.value)


SLACK_HOOK = "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/xYz0123456789AbCdEfGhIjK"
TEAMS_HOOK = (
    "https://contoso.webhook.office.com/webhookb2/2f1c9a7e-0b7d-4c1e-9a51-0c8d2f6b7e11@2f1c9a7e-0b7d-4c1e-9a51-"
    "0c8d2f6b7e12/IncomingWebhook/0123456789abcdef0123456789abcdef/2f1c9a7e-0b7d-4c1e-9a51-0c8d2f6b7e13"
)


@pytest.mark.parametrize("action_name", ["notify.slack", "notify.teams", "notify.webhook"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        (SLACK_HOOK, "is a Slack incoming-webhook URL, whose path is its secret"),
        ("https://hooks.slack.com/x", "is a Slack incoming-webhook URL"),  # whatever its path looks like
        (TEAMS_HOOK, "is a Microsoft Teams incoming-webhook URL"),
        ("https://prod-01.westus.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke", "Workflows"),
        ("https://relay.example.test/hook/sk0123456789abcdefghijKLMN/x", "its path holds what looks like a token"),
    ],
)
def test_a_webhook_url_whose_path_is_its_secret_is_refused_in_a_playbook(action_name: str, url: str, says: str) -> None:
    """A Slack or Teams incoming-webhook URL is the credential itself (its path): written in a playbook, every
    reader of the history saw it. It must come from a sink or url_file, and the error says so."""
    from remediate.actions import default_registry
    from remediate.config.settings import Settings
    from remediate.errors import PlaybookError
    from remediate.playbooks.loading import parse_playbook

    playbook = {"name": "tell", "match": {"alertname": "X"}, "steps": [{"action": action_name, "with": {"url": url}}]}
    with pytest.raises(PlaybookError, match="url_file") as info:
        parse_playbook(playbook, default_registry(Settings()), source="tell.yaml")

    message = str(info.value)
    assert says in message and "steps[0]" in message
    assert ("sinks.<name>.url_file" in message) or "token" in says
    assert "0123456789" not in message and "T0123ABCD" not in message  # the error does not repeat the secret


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.test/events?team=ml-infra&v=2",
        "http://127.0.0.1:9099/x",
        "http://h.test/x?signal=1&zipcode=2",
    ],
)
def test_a_url_without_credentials_is_kept(action: NotifyWebhookAction, url: str) -> None:
    assert action.schema.check_static({"url": url}) == []


@pytest.mark.parametrize(
    "value", ["Bearer abc", "basic dXNlcjpwYXNz", "sk_live_51H8aBcDeFgHiJkLmNoPq", "0123456789abcdef0123456789abcdef"]
)
def test_a_secret_looking_value_under_an_innocent_header_name_is_refused(
    action: NotifyWebhookAction, value: str
) -> None:
    errors = action.schema.check_static({"url": "http://example.test/h", "headers": {"X-Team": value}})

    assert len(errors) == 1 and "X-Team" in errors[0] and "headers_file" in errors[0]


@pytest.mark.parametrize("value", ["ml-infra", "remediate-prod-cluster-01", "2f1c9a7e-0b7d-4c1e-9a51-0c8d2f6b7e11"])
def test_ordinary_header_values_are_kept(action: NotifyWebhookAction, value: str) -> None:
    assert action.schema.check_static({"url": "http://example.test/h", "headers": {"X-Team": value}}) == []


def test_url_file_is_read_when_the_step_runs_and_the_secret_url_is_never_shown(
    recorder: WebhookRecorder, action: NotifyWebhookAction, tmp_path: Any
) -> None:
    secret = tmp_path / "webhook-url"
    secret.write_text(f"{recorder.url}?api_key=s3cr3t\n")
    step_params = action.validate({"url_file": str(secret)})

    plan = action.plan(step_params, context())
    result = action.execute(step_params, context())

    assert plan["would_post_to"] == result["posted_to"] == f"the URL in {secret}"
    (request,) = recorder.requests
    assert request.path == "/hooks/oncall?api_key=s3cr3t"
    recorder.status = 500
    with pytest.raises(AmbiguousActionError) as info:
        action.execute(step_params, context())
    assert "s3cr3t" not in str(info.value) and str(secret) in str(info.value)
    with pytest.raises(ParamsError, match="exactly one of url"):
        action.validate({"url": recorder.url, "url_file": str(secret)})
    with pytest.raises(ParamsError, match="exactly one of url"):
        action.validate({})


def test_a_message_that_cannot_be_rendered_still_notifies_saying_so(
    recorder: WebhookRecorder, action: NotifyWebhookAction
) -> None:
    """The message is rendered when the step runs: a missing label must not cost on-call the notification."""
    result = action.execute(params(action, recorder.url, message="GPU {{ labels.nope }}"), context())

    (request,) = recorder.requests
    assert request.json["message"].startswith("(the playbook's message could not be rendered: ")
    assert "nope" in result["message_error"] and request.json["message_error"] == result["message_error"]
    assert request.json["alert"]["labels"]["gpu"] == "3"
