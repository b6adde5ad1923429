"""Two real `remediate serve` replicas (gunicorn) on one real PostgreSQL 15: the field case of several replicas.

Each one-alert notification is POSTed four times at once, two to each replica (an AlertManager HA pair
and its retries do that), for 40 alerts. Every request is answered 200, each alert is one run, run
once, the 120 other deliveries are recorded `duplicate`, and no replica logs a traceback. Before the
guard locks, 80 of these 160 requests were answered 503 (a UniqueViolation on runs.dedupe_key).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediate.store import Store
from tests.support.server import HasLogTail, RemediateServer, notification, write_playbook
from tests.support.stores import rows
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

ALERTS = 40
PLAYBOOK = """\
name: storm
description: one logged step per node
match:
  alertname: Storm
mode: enforce
target: node
cooldown: 0s
steps:
  - name: say
    action: log
    with:
      message: "storm on {{ labels.node }}"
"""


@pytest.fixture
def two_replicas(
    tmp_path: Path, pg_url: str, watch_log: Callable[[str, HasLogTail], None]
) -> Iterator[list[RemediateServer]]:
    playbooks = tmp_path / "playbooks"
    write_playbook(playbooks, "storm", PLAYBOOK)
    servers = []
    try:
        for name in ("replica-a", "replica-b"):
            server = RemediateServer(tmp_path / name, playbooks)
            server.database_url = pg_url  # both on the one PostgreSQL database
            watch_log(name, server)
            servers.append(server)
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_the_same_delivery_four_times_at_once_over_two_replicas_is_answered_200_and_run_once(
    two_replicas: list[RemediateServer], pg_url: str
) -> None:
    codes: Counter[int] = Counter()
    for index in range(ALERTS):
        body = notification("Storm", {"node": f"node-{index}"}, fingerprint=f"{index:016x}")
        barrier = threading.Barrier(4)

        def post(server: RemediateServer, body: dict[str, object] = body, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            codes[server.post_webhook(body).status_code] += 1

        threads = [threading.Thread(target=post, args=(two_replicas[k % 2],)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

    assert codes == {200: ALERTS * 4}
    store = Store.open(pg_url)
    try:
        decisions = Counter(d.decision for d in rows(store, "decisions"))
        assert decisions == {"accepted": ALERTS, "duplicate": ALERTS * 3}
        runs = rows(store, "runs")
        assert len({r.alert_id for r in runs}) == len(runs) == ALERTS
        # Each run is run once, by one replica or the other.
        wait_until(
            lambda: {r.status for r in rows(store, "runs")} == {"succeeded"}, 30, message="runs not all succeeded"
        )
        assert len(rows(store, "attempts")) == ALERTS
    finally:
        store.close()
    for server in two_replicas:
        assert "Traceback" not in server.log_path.read_text()
