"""notify.webhook's session and the environment's proxy settings, against real local HTTP servers.

The proxy is a real HTTP server spoken to as a forward proxy: a proxied POST arrives with the absolute URL
as its request target (`POST http://hooks.example.invalid/... HTTP/1.1`), an HTTPS one as `CONNECT
host:443`. The session reads the settings once, when it is made (remediate.outbound.session), not per POST.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.actions.notify import NotifyWebhookAction
from remediate.errors import ActionError
from remediate.intake.alerts import alert_ref
from tests.conftest import XID_CONTEXT as ALERT
from tests.support.realsystems import WebhookRecorder

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "REQUEST_METHOD")
ELSEWHERE = "http://hooks.example.invalid/hooks/oncall"
"""A host that does not resolve: only a proxy can take a POST to it."""


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the proxy variables it means (whatever the machine running the tests has set)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def proxy() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="") as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hooks/oncall") as server:
        yield server


def post(action: NotifyWebhookAction, url: str) -> dict[str, Any]:
    ctx = StepContext(run_id=7, step_index=0, playbook="notify-oncall", target="node-a", alert=alert_ref(ALERT))
    return action.execute(action.validate({"url": url, "message": "GPU 3"}), ctx)


def test_a_post_goes_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch, proxy: WebhookRecorder
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)

    result = post(NotifyWebhookAction(), ELSEWHERE)

    assert result["status_code"] == 200
    (request,) = proxy.requests
    assert (request.method, request.path) == ("POST", ELSEWHERE)
    assert request.json["message"] == "GPU 3"


def test_no_proxy_sends_the_post_straight_to_a_host_it_names(
    monkeypatch: pytest.MonkeyPatch, proxy: WebhookRecorder, receiver: WebhookRecorder
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    action = NotifyWebhookAction()

    post(action, receiver.url)
    post(action, ELSEWHERE)  # a host NO_PROXY does not name still goes through the proxy

    assert [r.path for r in receiver.requests] == ["/hooks/oncall"]
    assert [r.path for r in proxy.requests] == [ELSEWHERE]


class _TunnelRecorder:
    """An HTTPS proxy that records each CONNECT and refuses it (403): nothing is tunnelled."""

    def __init__(self) -> None:
        self.connects: list[str] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_CONNECT(self) -> None:
                recorder.connects.append(self.path)
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


def test_an_https_post_asks_the_https_proxy_of_the_environment_for_a_tunnel(monkeypatch: pytest.MonkeyPatch) -> None:
    tunnel = _TunnelRecorder()
    try:
        monkeypatch.setenv("HTTPS_PROXY", tunnel.url)
        with pytest.raises(ActionError, match=r"POST https://hooks\.example\.invalid/hook failed"):
            post(NotifyWebhookAction(), "https://hooks.example.invalid/hook")
    finally:
        tunnel.close()
    assert tunnel.connects == ["hooks.example.invalid:443"]


def test_the_environment_is_read_when_the_session_is_made_not_on_every_post(
    monkeypatch: pytest.MonkeyPatch, proxy: WebhookRecorder, receiver: WebhookRecorder
) -> None:
    """requests' default reads every proxy variable of the environment twice per request; the session
    takes them once. The process's environment does not change under a server: a POST after a change
    goes where the session was told when it was made; a session made later reads the environment again."""
    action = NotifyWebhookAction()
    post(action, receiver.url)

    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    post(action, receiver.url)

    assert len(receiver.requests) == 2
    assert proxy.requests == []
    post(NotifyWebhookAction(), receiver.url)  # a new action's session: the proxy now
    assert [r.path for r in proxy.requests] == [receiver.url]
