"""Availability of the real ``remediate serve`` and ``remediate agent``.

- 50 idle or slowly-sending loopback connections, no token: /healthz and /webhook still answer
  at once, the slow ones are cut off after ``request_timeout``, and a step in flight is not
  interrupted, not even when every HTTP worker is killed meanwhile (the executor has its own process);
- the same 50 connections against the agent: it still answers, and cuts them off after ``request_timeout``;
- the database file deleted under the running server: 503 and unready, never 200 for a lost write;
- the store's write lock held by another process: 503 within ``store_busy_timeout``, and /readyz says
  so (it tests a write, not only a read).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
import requests

from tests.support.processes import child_pids
from tests.support.realsystems import WebhookRecorder
from tests.support.server import HasLogTail, NodeAgent, RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

StartServer = Callable[..., RemediateServer]

REQUEST_TIMEOUT = 3.0  # the servers' request_timeout in these tests: slow clients are cut off after it
PROMPT = 2.0  # an answer within this is "still answering"


class SlowClients:
    """`count` loopback connections without a token: half send nothing, half a request head a byte at a time.

    Each closes itself after `lifetime` seconds at the latest; `cut_off` counts those the server closed first.
    """

    def __init__(self, port: int, count: int = 50, lifetime: float = 8.0) -> None:
        self.port = port
        self.count = count
        self.lifetime = lifetime
        self.connected = threading.Semaphore(0)
        self.cut_off: list[float] = []
        self._threads: list[threading.Thread] = []
        self._started = 0.0

    def __enter__(self) -> Self:
        self._started = time.monotonic()
        for index in range(self.count):
            thread = threading.Thread(target=self._client, args=(index % 2 == 1,), daemon=True)
            thread.start()
            self._threads.append(thread)
        for _ in range(self.count):
            assert self.connected.acquire(timeout=scaled(10)), "could not open the slow connections"
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        for thread in self._threads:
            thread.join(self.lifetime + 5)

    def _client(self, slow: bool) -> None:
        end = time.monotonic() + self.lifetime
        with socket.create_connection(("127.0.0.1", self.port), timeout=self.lifetime) as sock:
            self.connected.release()
            head = b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: "
            sent = 0
            while time.monotonic() < end:
                try:
                    if slow:
                        sock.sendall(head[sent : sent + 1] if sent < len(head) else b"a")
                        sent += 1
                        sock.settimeout(0.2)
                    else:
                        sock.settimeout(max(0.01, end - time.monotonic()))
                    if sock.recv(1024) == b"":
                        self.cut_off.append(time.monotonic() - self._started)
                        return
                except TimeoutError:
                    continue
                except OSError:
                    self.cut_off.append(time.monotonic() - self._started)
                    return


def _timed_get(url: str, **kwargs: object) -> tuple[int, float]:
    started = time.monotonic()
    response = requests.get(url, timeout=scaled(10), **kwargs)  # type: ignore[arg-type]
    return response.status_code, time.monotonic() - started


def _executor_pid(server: RemediateServer, timeout: float = 10.0) -> int:
    """The newest executor process's pid, once the master has logged its start (it forks it in its loop,
    just after the HTTP workers: on a loaded machine that can come after the server answers)."""
    pids = wait_until(
        lambda: re.findall(r"Started the executor process \(pid: (\d+)", server.log_path.read_text()),
        timeout,
        message=f"no executor process started; log:\n{server.log_tail()}",
    )
    return int(pids[-1])


def _playbook(recorder: WebhookRecorder) -> str:
    return f"""\
name: slow-notify
match:
  alertname: E2ESlowNotify
target: node
cooldown: 0s
steps:
  - name: notify
    action: notify.webhook
    timeout: 30s
    with:
      url: {recorder.url}
      message: "{{{{ labels.alertname }}}}"
    retries: 0
"""


@pytest.fixture
def env() -> dict[str, str]:
    return {"REMEDIATE_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT), "REMEDIATE_STORE_BUSY_TIMEOUT": "1"}


def test_fifty_slow_connections_neither_stall_the_server_nor_interrupt_a_step(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder, env: dict[str, str]
) -> None:
    write_playbook(playbooks_dir, "slow", _playbook(recorder))
    recorder.delay = 6.0  # the step stays in flight through everything below
    server = start_server(env=env)
    response = server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-a"}))
    assert response.status_code == 200, response.text
    [run_id] = response.json()["runs"]
    recorder.wait_for(timeout=10)

    with SlowClients(server.port) as clients:
        for _ in range(3):
            status, seconds = _timed_get(f"{server.url}/healthz")
            assert status == 200 and seconds < PROMPT, (status, seconds)
        started = time.monotonic()
        answer = server.post_webhook(notification("E2EOther", {"Hostname": "node-b"}))
        assert answer.status_code == 200 and time.monotonic() - started < PROMPT, answer.text

        # Every HTTP worker dies while the step is in flight: the executor is not one of them.
        executor = _executor_pid(server)
        workers = child_pids(server.pid) - {executor}
        assert len(workers) == 2, (workers, executor)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: _healthy(server), 20, message="the server did not come back after its workers died")

    # The slow senders were cut off by the server after request_timeout, not by themselves.
    assert len(clients.cut_off) >= 25, clients.cut_off
    assert all(seconds < REQUEST_TIMEOUT + 2.5 for seconds in sorted(clients.cut_off)[:25]), clients.cut_off

    detail = server.wait_for_run_status(run_id, "succeeded", "failed", timeout=30)
    [step] = detail["steps"]
    assert detail["status"] == "succeeded", detail
    assert [attempt["outcome"] for attempt in step["attempts"]] == ["succeeded"], step
    assert len(recorder.requests) == 1
    assert executor in child_pids(server.pid)  # the same executor process ran it to the end


def _healthy(server: RemediateServer) -> bool:
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{server.url}/healthz", timeout=1).status_code == 200
    return False


def test_the_master_restarts_a_dead_executor_process(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder, env: dict[str, str]
) -> None:
    write_playbook(playbooks_dir, "slow", _playbook(recorder))
    server = start_server(env=env)
    first = _executor_pid(server)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: _executor_pid(server) != first, 10, message="no new executor process")
    started = time.monotonic()
    response = server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-a"}))
    [run_id] = response.json()["runs"]
    assert server.wait_for_run_status(run_id, "succeeded")["status"] == "succeeded"
    print(f"\nreceipt -> run succeeded in {time.monotonic() - started:.3f}s with the new executor")


@pytest.fixture
def agent(tmp_path: Path, watch_log: Callable[[str, HasLogTail], None]) -> Iterator[NodeAgent]:
    node = NodeAgent(tmp_path / "agent", "node-a", env={"REMEDIATE_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT)})
    watch_log("agent", node)
    try:
        yield node.start()
    finally:
        node.stop()


def test_fifty_slow_connections_do_not_stall_the_agent_which_cuts_them_off(agent: NodeAgent) -> None:
    # The agent runs 8 steps at once (agent_threads): 8 slow clients once were enough to stop it.
    with SlowClients(agent.port) as clients:
        for _ in range(3):
            status, seconds = _timed_get(f"{agent.url}/healthz")
            assert status == 200 and seconds < PROMPT, (status, seconds)
    # Each connection's request has one deadline, request_timeout, however slowly its bytes come.
    assert len(clients.cut_off) >= 25, clients.cut_off
    assert all(seconds < REQUEST_TIMEOUT + 2.5 for seconds in sorted(clients.cut_off)[:25]), clients.cut_off


def test_deleting_the_database_under_a_running_server_gives_503_not_a_lost_200(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder, env: dict[str, str]
) -> None:
    write_playbook(playbooks_dir, "slow", _playbook(recorder))
    server = start_server(env=env)
    assert server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-a"})).status_code == 200
    for suffix in ("", "-wal", "-shm"):
        Path(f"{server.db_path}{suffix}").unlink(missing_ok=True)

    response = server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-b"}))
    assert response.status_code == 503, response.text
    # "deleted", or "replaced" when another connection (the executor process's) has since created an
    # empty file at the path: either way the store refuses to write to a file nobody will read again.
    assert re.search(r"was (deleted|replaced)", response.json()["message"]), response.text
    ready = requests.get(f"{server.url}/readyz", timeout=scaled(5))
    assert ready.status_code == 503, ready.text


def test_a_store_locked_by_another_process_gives_503_within_the_bound(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder, env: dict[str, str]
) -> None:
    write_playbook(playbooks_dir, "slow", _playbook(recorder))
    server = start_server(env=env)
    assert requests.get(f"{server.url}/readyz", timeout=scaled(5)).status_code == 200

    # Another process holds SQLite's write lock (a program that is not remediate, e.g. the sqlite3 shell, or
    # another writer stuck in a long transaction): every writer queues on that lock alone.
    other = sqlite3.connect(server.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        _assert_busy(server)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert requests.get(f"{server.url}/readyz", timeout=scaled(5)).status_code == 200
    assert server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-a"})).status_code == 200


def _assert_busy(server: RemediateServer) -> None:
    started = time.monotonic()
    response = server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-z"}))
    assert response.status_code == 503, response.text
    assert time.monotonic() - started < 4.0  # store_busy_timeout is 1 s here (SQLite's wait adds at most that)
    status, seconds = _timed_get(f"{server.url}/readyz")
    assert status == 503 and seconds < 4.0, (status, seconds)


def test_sigterm_lets_the_executor_process_finish_its_step_and_stops_everything(
    start_server: StartServer, playbooks_dir: Path, recorder: WebhookRecorder, env: dict[str, str]
) -> None:
    write_playbook(playbooks_dir, "slow", _playbook(recorder))
    recorder.delay = 2.0
    server = start_server(env=env, executor_threads=3)
    started_line = r"Started the executor process \(pid: \d+, 3 threads\)"
    # The master forks the executor in its loop, just after the HTTP workers.
    wait_until(lambda: re.search(started_line, server.log_path.read_text()), 10, message=server.log_tail())
    executor = _executor_pid(server)
    [run_id] = server.post_webhook(notification("E2ESlowNotify", {"Hostname": "node-a"})).json()["runs"]
    recorder.wait_for(timeout=10)

    started = time.monotonic()
    server.stop()  # SIGTERM to the master; SIGKILL of the group only after 20 s
    assert time.monotonic() - started < 10
    assert not Path(f"/proc/{executor}").exists()
    server.start()
    detail = server.run(run_id)
    assert detail["status"] == "succeeded", detail  # finished before the executor process exited
    assert len(recorder.requests) == 1
