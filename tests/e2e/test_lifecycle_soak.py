"""A server's long life, compressed: one `remediate serve`, started as a user starts it, under steady webhook traffic
for dozens of executor leases, while it is reloaded through the API and by SIGHUP, one HTTP worker is SIGTERMed
and one SIGKILLed, its executor process is killed, a slow client's request outlives the worker timeout, and the
database goes away (SQLite: another process holds the file's exclusive lock; PostgreSQL: the cluster is stopped)
and comes back while a worker is killed and replaced.

What must hold throughout: every webhook is answered 200 or 503 (AlertManager retries a 503), never 500 and never
a refused connection; every alert acknowledged (200) has exactly one run, none lost and none doubled, and every
run ends; /metrics answers every scrape and no counter goes backwards; the master is alive at the end.
The figures are printed (pytest -s): requests by status, runs, duplicates, the restarts survived.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import requests

from tests.support.lifecycle import (
    MetricsWatch,
    Traffic,
    executor_pid,
    fingerprint,
    http_workers,
    replace_worker,
    runs_by_target,
    slow_webhook,
    soak_playbooks,
    sqlite_locked,
)
from tests.support.postgres import PostgresCluster
from tests.support.server import RemediateServer, notification
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

LEASE = 2.0
"""The executor's `lease` (its smallest): the soak lives through dozens of them."""
WORKER_TIMEOUT = 3.0
"""`worker_timeout`: the slow client's request takes longer than this."""
SLOW_REQUEST = WORKER_TIMEOUT + 2.0
"""Seconds the slow client takes to send its body (within `request_timeout`, 10 s)."""
SETTLE = 2.5 * LEASE
"""How long traffic goes on between two events: the executor renews and the master judges its beat twice."""


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str | None, Callable[[], object]]]:
    """(the server's database URL, None for its own SQLite file; a context manager factory taking it away)."""
    if request.param == "sqlite":
        yield None, lambda: sqlite_locked(tmp_path / "remediate" / "r.db")
        return
    cluster: PostgresCluster = request.getfixturevalue("own_postgres")
    url = cluster.database()
    try:
        yield url, cluster.down
    finally:
        if not cluster.running:
            cluster.resume()
        cluster.drop(url)


def test_a_server_lives_through_reloads_kills_a_slow_request_and_a_database_outage(
    start_server: Callable[..., RemediateServer],
    playbooks_dir: Path,
    database: tuple[str | None, Callable[[], AbstractContextManager[object]]],
) -> None:
    url, database_away = database
    soak_playbooks(playbooks_dir)
    began = time.monotonic()
    server = start_server(
        database_url=url,
        env={
            "REMEDIATE_LEASE": f"{LEASE:g}s",
            "REMEDIATE_WORKER_TIMEOUT": f"{WORKER_TIMEOUT:g}s",
            "REMEDIATE_STORE_BUSY_TIMEOUT": "1s",  # a locked database answers 503 within a second
        },
    )
    traffic = Traffic(server).start()
    watch = MetricsWatch(server).start()
    survived: Counter[str] = Counter()
    events: list[str] = []

    def survive(event: str) -> None:
        survived[event] += 1
        events.append(f"{time.monotonic() - traffic.began:.1f}s {event}")

    slow: list[int] = []
    try:
        time.sleep(SETTLE)
        old = set(http_workers(server))
        _reload_by_api(server)
        http_workers(server, not_in=old)
        survive("reload (POST /-/reload)")
        time.sleep(SETTLE)

        old = set(http_workers(server))
        os.kill(server.pid, signal.SIGHUP)
        http_workers(server, not_in=old)
        survive("reload (SIGHUP)")
        time.sleep(SETTLE)

        replace_worker(server, signal.SIGTERM)
        survive("HTTP worker SIGTERMed")
        time.sleep(SETTLE)
        replace_worker(server, signal.SIGKILL)
        survive("HTTP worker SIGKILLed")
        time.sleep(SETTLE)

        executor = executor_pid(server)
        os.kill(executor, signal.SIGKILL)
        executor_pid(server, not_in={executor})
        survive("executor process SIGKILLed")
        time.sleep(SETTLE)

        payload = notification("SoakLog", {"Hostname": "slow-1"}, fingerprint=fingerprint("slow-1"))
        slow_client = threading.Thread(target=lambda: slow.append(slow_webhook(server, payload, SLOW_REQUEST)))
        slow_client.start()
        slow_client.join(timeout=SLOW_REQUEST + 30)
        survive("request longer than worker_timeout")
        time.sleep(SETTLE)

        with database_away():
            time.sleep(LEASE)
            replace_worker(server, signal.SIGKILL)  # its replacement boots with the database away
            survive("HTTP worker SIGKILLed, database away")
            time.sleep(LEASE)
        survive("database away and back")
        time.sleep(2 * SETTLE)
    finally:
        traffic.stop()
        watch.stop()

    acknowledged = [*traffic.acknowledged, *(["slow-1"] if slow == [200] else [])]

    def all_ended() -> Counter[str] | None:
        runs = runs_by_target(server, "SoakLog")
        unfinished = server.history(alertname="SoakLog", status="queued") + server.history(
            alertname="SoakLog", status="running"
        )
        return runs if not unfinished else None

    runs = wait_until(all_ended, 60, interval=0.5, message="runs of the soak still unfinished")
    lost = [host for host in acknowledged if runs[host] == 0]
    doubled = {host: count for host, count in runs.items() if count > 1}
    failed = server.history(alertname="SoakLog", status="failed")
    wall = time.monotonic() - began
    print(
        f"\nsoak on {'PostgreSQL' if url else 'SQLite'}: {wall:.0f} s, {wall / LEASE:.0f} leases; "
        f"webhooks {traffic.sent()}, answers by status {dict(sorted(traffic.answers.items()))}; slow client {slow}; "
        f"runs {sum(runs.values())} ({len(acknowledged)} acknowledged, lost {len(lost)}, doubled {len(doubled)}, "
        f"failed {len(failed)}); /metrics scrapes {watch.scrapes} "
        f"(cut {len(watch.cut)}, problems {len(watch.problems)}); "
        f"survived {sum(survived.values())}: {dict(survived)}"
    )
    assert traffic.bad == [], f"answered neither 200 nor 503: {traffic.bad[:10]}; events: {events}"
    # A SIGKILLed worker takes the kept-alive connection it held with it (its request is sent again): nothing else
    # may cut one, a reload or a SIGTERM least of all.
    killed = survived["HTTP worker SIGKILLed"] + survived["HTTP worker SIGKILLed, database away"]
    assert len(traffic.cut) <= killed, f"connections cut: {traffic.cut}; events: {events}"
    assert len(watch.cut) <= killed, f"scrapes cut: {watch.cut}; events: {events}"
    assert traffic.answers["200"] > 0 and traffic.answers["503"] > 0, traffic.answers  # the outage was seen
    assert slow == [200], f"the slow client's request (over {SLOW_REQUEST:g}s) was answered {slow}"
    assert "WORKER TIMEOUT" not in server.log_tail(100_000), "a worker was killed for a slow client"
    assert lost == [], f"acknowledged alerts without a run: {lost[:10]}"
    assert doubled == {}, f"alerts with more than one run: {doubled}"
    assert failed == [], f"runs that failed: {failed[:3]}"
    assert watch.problems == [], watch.problems[:10]
    assert watch.scrapes > 0
    assert server.running, f"the master is gone:\n{server.log_tail(60)}"


def _reload_by_api(server: RemediateServer) -> None:
    answer = requests.post(f"{server.url}/-/reload", headers=server.auth, timeout=scaled(30))
    assert answer.status_code == 200, answer.text
