"""The real `remediate serve`, started as a user starts it, through what a server lives through: a reload
(POST /-/reload, SIGHUP), an HTTP worker stopped or killed, the database away while a worker is replaced, its
master killed. Each of these once took the whole server down: a worker's exit removed the master's temporary
dirs (every request 500, then the master exited on the missing heartbeat), a worker forked while PostgreSQL was
down failed to boot and gunicorn stopped the server, and an orphaned worker held the port answering nothing.

Each test lives past several executor leases (`lease` 2 s): the executor process renews and the master judges
its heartbeat in the private dir more than once after the event.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.support.lifecycle import fingerprint, http_workers, port_free, replace_worker, soak_playbooks
from tests.support.postgres import PostgresCluster
from tests.support.server import RemediateServer, notification
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

LEASE = 2.0
"""The executor's lease (`lease`, its smallest): a test outlives several."""
LEASES = 3
"""How many leases each test goes on for after the event."""


def _post(server: RemediateServer, host: str) -> requests.Response:
    return server.post_webhook(notification("SoakLog", {"Hostname": host}, fingerprint=fingerprint(host)))


def _serve_through_leases(server: RemediateServer, label: str) -> None:
    """Webhooks and /metrics for LEASES leases: every answer 200, each run done, the master alive after."""
    deadline = time.monotonic() + LEASES * LEASE
    sent = 0
    while time.monotonic() < deadline or sent < 3:
        sent += 1
        answer = _post(server, f"{label}-{sent}")
        assert answer.status_code == 200, f"webhook {sent} after {label}: {answer.status_code} {answer.text[:300]}"
        metrics = requests.get(f"{server.url}/metrics", timeout=scaled(10))
        assert metrics.status_code == 200, f"/metrics after {label}: {metrics.status_code} {metrics.text[:300]}"
        time.sleep(0.3)
    assert server.running, f"the master exited after {label}:\n{server.log_tail(60)}"
    for number in range(1, sent + 1):
        server.wait_for_run(status="succeeded", target=f"{label}-{number}")
    assert requests.get(f"{server.url}/readyz", timeout=scaled(10)).status_code == 200
    assert "FileNotFoundError" not in server.log_tail(2000), server.log_tail(60)


@pytest.fixture
def lifecycle_server(start_server: Callable[..., RemediateServer], playbooks_dir: Path) -> RemediateServer:
    soak_playbooks(playbooks_dir)
    return start_server(env={"REMEDIATE_LEASE": f"{LEASE:g}s"})


@pytest.mark.parametrize("how", ["api", "sighup"])
def test_after_a_reload_webhooks_and_metrics_answer_for_several_leases(
    lifecycle_server: RemediateServer, how: str
) -> None:
    server = lifecycle_server
    assert _post(server, "before").status_code == 200
    old = set(http_workers(server))
    if how == "api":
        answer = requests.post(f"{server.url}/-/reload", headers=server.auth, timeout=scaled(30))
        assert answer.status_code == 200, answer.text
    else:
        os.kill(server.pid, signal.SIGHUP)
    http_workers(server, not_in=old)  # the old workers have exited: their exit ran whatever it runs
    _serve_through_leases(server, f"after-{how}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_one_http_worker_stopped_or_killed_leaves_the_server_answering(
    lifecycle_server: RemediateServer, sig: signal.Signals
) -> None:
    server = lifecycle_server
    replace_worker(server, sig)
    _serve_through_leases(server, f"after-{sig.name.lower()}")


def test_a_worker_replaced_while_postgresql_is_down_boots_answers_503_then_200(
    own_postgres: PostgresCluster, start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    soak_playbooks(playbooks_dir)
    url = own_postgres.database()
    try:
        server = start_server(database_url=url, env={"REMEDIATE_LEASE": f"{LEASE:g}s"})
        with own_postgres.down():
            replace_worker(server, signal.SIGKILL)  # its replacement boots with the database away
            time.sleep(LEASE)
            assert server.running, f"the server exited:\n{server.log_tail(60)}"
            for worker in range(2 * server.workers):  # both workers (no keep-alive: a connection each)
                refused = _post(server, f"away-{worker}")
                assert refused.status_code == 503, refused.text
            assert requests.get(f"{server.url}/readyz", timeout=scaled(10)).status_code == 503
            # Scraped all along: the store's write errors are what say most now.
            metrics = requests.get(f"{server.url}/metrics", timeout=scaled(10))
            assert metrics.status_code == 200, metrics.text[:300]
            assert "remediate_store_write_errors_total" in metrics.text
        wait_until(lambda: _post(server, "back-0").status_code == 200, 30, interval=0.2,
                   message="no 200 once PostgreSQL was back")  # fmt: skip
        _serve_through_leases(server, "back")
    finally:
        if not own_postgres.running:
            own_postgres.resume()
        own_postgres.drop(url)


def test_kill_9_of_the_master_frees_the_port_at_once(lifecycle_server: RemediateServer) -> None:
    server = lifecycle_server
    # AlertManager's kept-alive connection and a client that has not sent its request yet: gunicorn's worker
    # left orphaned waits for its connections (up to graceful_timeout) with the listening socket still open.
    kept = requests.Session()
    assert kept.get(f"{server.url}/healthz", timeout=scaled(10)).status_code == 200
    with socket.create_connection(("127.0.0.1", server.port), timeout=scaled(10)):
        os.kill(server.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(lambda: port_free(server.port), 2.0, interval=0.02,
                   message="the port is still held after kill -9 of the master")  # fmt: skip
        held = time.monotonic() - killed
    print(f"port held {held:.2f}s after kill -9 of the master")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}/healthz", timeout=scaled(5))  # refused: nobody accepts and stays silent
