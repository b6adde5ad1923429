"""doctor's sink checks against a real HTTP server: a HEAD with the sink's headers_file, never a POST."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from remediate.config.values import Sink
from remediate.doctor import Status
from remediate.doctor.probe import Probe, reason_of, shown_without_query
from remediate.doctor.sinks import check_sinks

pytestmark = [pytest.mark.integration]


class Sinkhole(ThreadingHTTPServer):
    """Answers every HEAD with `status` and records each request's method and headers."""

    status = 200

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook?key=secret"


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        server: Any = self.server
        server.seen.append((self.command, dict(self.headers.items())))
        self.send_response(server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def sinkhole() -> Iterator[Sinkhole]:
    server = Sinkhole()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_sink_is_asked_with_a_head_and_its_own_headers(sinkhole: Sinkhole, tmp_path: Path) -> None:
    headers = tmp_path / "headers.yaml"
    headers.write_text("Authorization: Bearer sink-token\n")
    (check,) = check_sinks(
        Probe(), [Sink("oncall", "webhook", url=sinkhole.url, headers_file=str(headers))], ["oncall"]
    )

    assert check.status is Status.OK
    assert check.detail == "webhook: answers (HTTP 200 to HEAD; nothing sent)"
    ((method, sent),) = sinkhole.seen
    assert method == "HEAD" and sent["Authorization"] == "Bearer sink-token"


def test_a_gateway_error_warns_and_the_url_file_is_read(sinkhole: Sinkhole, tmp_path: Path) -> None:
    sinkhole.status = 503
    url_file = tmp_path / "url"
    url_file.write_text(sinkhole.url + "\n")

    (check,) = check_sinks(Probe(), [Sink("slack", "slack", url_file=str(url_file))], [])

    assert check.status is Status.WARN
    assert check.detail == "slack: answers HTTP 503 to HEAD"


def test_an_unreadable_url_file_and_an_unknown_sink_fail(tmp_path: Path) -> None:
    checks = check_sinks(Probe(), [Sink("teams", "teams", url_file=str(tmp_path / "missing"))], ["teams", "pager"])

    assert [(c.name, c.status) for c in checks] == [("sinks: teams", Status.FAIL), ("sinks: pager", Status.FAIL)]
    assert checks[0].detail.startswith("cannot read url_file")
    assert checks[1].detail == "a notify step names it but it is not configured"


def test_the_query_string_of_a_sink_url_is_never_shown(tmp_path: Path) -> None:
    (check,) = check_sinks(Probe(timeout=1), [Sink("x", "webhook", url="http://127.0.0.1:9/hook?key=secret")], [])

    assert check.status is Status.FAIL
    assert "secret" not in check.detail and "http://127.0.0.1:9/hook" in check.detail


def test_a_chat_webhooks_key_is_never_shown() -> None:
    # Slack's incoming-webhook URL carries its key in the path: what a failed request names hides it.
    assert (
        shown_without_query("https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX")
        == "https://hooks.slack.com/***"
    )
    assert shown_without_query("http://hook.example:8080/alerts?token=abc") == "http://hook.example:8080/alerts"


def test_a_failure_message_does_not_repeat_the_path_it_asked_for() -> None:
    # A timeout's words from urllib3 name the path: a chat webhook's key would be in them.
    import requests

    error = requests.ConnectTimeout(
        "HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries exceeded "
        "with url: /services/T0000/B0000/XXXXXXXX (Caused by ConnectTimeoutError())"
    )
    assert "XXXXXXXX" not in reason_of(error) and reason_of(error).startswith("ConnectTimeout: HTTPSConnectionPool")
