"""An agent asking the server for its credential backs off with full jitter and honours Retry-After: thousands of
agent pods refused at once (a DaemonSet rollout) come back spread out, never in waves."""

from __future__ import annotations

import json
import random
import statistics
import threading
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from remediate.cli.agent import Backoff, credential_from_server, retry_after
from remediate.errors import ConfigError


def test_a_herd_refused_at_once_comes_back_spread_over_the_whole_window() -> None:
    # 10,000 pods, each with its own generator (as os.urandom seeds each pod's), after their 4th refusal with
    # Retry-After: 1: every one waits at least 1 s, and they spread evenly over the 8 s window above it.
    pauses = [Backoff(rng=random.Random(pod)).pause(3, retry_after=1.0) for pod in range(10_000)]

    assert 1.0 <= min(pauses) < 1.01 and 8.99 < max(pauses) <= 9.0
    # A uniform draw over 8 s: standard deviation 8 / sqrt(12) = 2.31 s; no second holds more than ~1/8 of them.
    assert statistics.pstdev(pauses) == pytest.approx(8 / 12**0.5, rel=0.03)
    per_second = [sum(1 for p in pauses if 1 + s <= p < 2 + s) for s in range(8)]
    assert max(per_second) < 1.1 * 10_000 / 8 and min(per_second) > 0.9 * 10_000 / 8
    # Without jitter all 10,000 would come back in the same instant.
    assert len({round(p, 3) for p in pauses}) > 5_000


def test_the_window_doubles_up_to_its_cap() -> None:
    backoff = Backoff(base=1.0, cap=60.0, rng=random.Random(1))
    for attempt, window in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 32.0), (6, 60.0), (40, 60.0)]:
        draws = [backoff.pause(attempt) for _ in range(2_000)]
        assert 0.0 <= min(draws) < 0.01 * window and 0.99 * window < max(draws) <= window, attempt


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert retry_after("3") == 3.0
    assert retry_after("-4") == 0.0
    assert retry_after(formatdate(1_000_030.0, usegmt=True), now=1_000_000.0) == 30.0
    assert retry_after(None) is None and retry_after("soon") is None


class _Enrolling(BaseHTTPRequestHandler):
    """A server that answers 429 (Retry-After: 5) `busy` times, then the credential."""

    server: _EnrollServer

    def do_POST(self) -> None:
        self.server.seen.append(self.headers.get("Authorization", ""))
        if len(self.server.seen) <= self.server.busy:
            body, status, extra = b'{"error": "too_many_requests"}', self.server.status, {"Retry-After": "5"}
        else:
            body, status, extra = json.dumps({"node": "node-a", "credential": "c-node-a"}).encode(), 200, {}
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(body)), **extra}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _EnrollServer(ThreadingHTTPServer):
    busy, status = 3, 429
    seen: list[str]


@pytest.fixture
def enroll_server() -> Iterator[_EnrollServer]:
    server = _EnrollServer(("127.0.0.1", 0), _Enrolling)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_agent_waits_what_the_server_asks_plus_jitter_then_gets_its_credential(
    enroll_server: _EnrollServer, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("projected-token\n")
    slept: list[float] = []
    url = f"http://127.0.0.1:{enroll_server.server_address[1]}"

    credential = credential_from_server(
        url, token, "node-a", 600.0, backoff=Backoff(rng=random.Random(7)), sleep=slept.append
    )

    assert credential == "c-node-a"
    assert enroll_server.seen == ["Bearer projected-token"] * 4
    # Each pause: the 5 s asked for, then a draw within the window of that attempt (1, 2, 4 s).
    assert len(slept) == 3
    assert all(5.0 <= pause <= 5.0 + 2**attempt for attempt, pause in enumerate(slept)), slept
    assert len(set(slept)) == 3


def test_a_refusal_is_not_asked_again(enroll_server: _EnrollServer, tmp_path: Path) -> None:
    enroll_server.status = 403
    token = tmp_path / "token"
    token.write_text("projected-token")
    slept: list[float] = []
    url = f"http://127.0.0.1:{enroll_server.server_address[1]}"

    with pytest.raises(ConfigError, match=r"refused this pod an agent credential: .*HTTP 403"):
        credential_from_server(url, token, "node-a", 600.0, sleep=slept.append)

    assert slept == [] and len(enroll_server.seen) == 1


def test_the_agent_gives_up_when_the_next_pause_would_pass_its_wait(
    enroll_server: _EnrollServer, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("projected-token")
    url = f"http://127.0.0.1:{enroll_server.server_address[1]}"

    # Retry-After: 5 is beyond a 3 s --wait: the agent says so at once rather than asking again too early.
    with pytest.raises(ConfigError, match=r"no agent credential within 3s: .*HTTP 429"):
        credential_from_server(url, token, "node-a", 3.0, sleep=lambda _: None)

    assert len(enroll_server.seen) == 1
