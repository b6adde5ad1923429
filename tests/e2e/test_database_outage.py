"""The real ``remediate serve`` (gunicorn, HTTP workers and the executor process) on a real PostgreSQL 15
that is stopped and started under it, as a restart or a fail-over of the database does.

While the database is down the webhook answers 503 (AlertManager retries) and /readyz is unready;
a run whose step was in flight is neither lost nor done twice (its end is recorded once the database is
back); once the database is back, the same
server (no restart) answers 200 again and runs what it accepts, exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.support.postgres import PostgresCluster
from tests.support.realsystems import WebhookRecorder
from tests.support.server import WAIT, HasLogTail, RemediateServer, notification, notify_and_log_playbooks
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def server_on_postgres(
    own_postgres: PostgresCluster,
    tmp_path: Path,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    watch_log: Callable[[str, HasLogTail], None],
) -> Iterator[RemediateServer]:
    notify_and_log_playbooks(playbooks_dir, "E2EOutage", recorder.url)
    url = own_postgres.database()
    server = RemediateServer(tmp_path / "remediate", playbooks_dir, executor_threads=1)
    server.database_url = url
    watch_log("remediate", server)
    try:
        yield server.start()
    finally:
        server.stop()
        if not own_postgres.running:
            own_postgres.resume()
        own_postgres.drop(url)


def test_a_database_outage_is_503_and_unready_and_the_server_recovers_by_itself(
    own_postgres: PostgresCluster, server_on_postgres: RemediateServer, recorder: WebhookRecorder
) -> None:
    server = server_on_postgres
    recorder.delay = 1.0  # the notify step is in flight when the database goes
    accepted = server.post_webhook(notification("E2EOutageNotify", {"Hostname": "node-a"}, fingerprint="a" * 16))
    assert accepted.status_code == 200, accepted.text
    [in_flight] = accepted.json()["runs"]
    recorder.wait_for(timeout=WAIT)

    late = notification("E2EOutageLog", {"Hostname": "node-b"}, fingerprint="b" * 16)
    with own_postgres.down():
        refused = server.post_webhook(late)
        unready = requests.get(f"{server.url}/readyz", timeout=scaled(10))
        # The step ends while the database is down: its outcome cannot be recorded.
        wait_until(
            lambda: f"run {in_flight}: the store failed under it" in server.log_tail(400),
            WAIT,
            message="the executor noticed that the step's outcome could not be recorded",
        )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "store_unavailable"
    assert unready.status_code == 503, unready.text
    assert unready.json()["error"] == "store_unavailable"

    # AlertManager's retry after the database is back: the same server, not restarted, takes it.
    retried = server.post_webhook(late)
    assert retried.status_code == 200, retried.text
    assert retried.json()["decisions"] == {"accepted": 1}
    assert requests.get(f"{server.url}/readyz", timeout=scaled(10)).status_code == 200
    done = server.wait_for_run(status="succeeded", alertname="E2EOutageLog")
    assert done["target"] == "node-b"

    # The run whose POST was sent while the database was down: handed back, and its step recorded as it ended
    # once the database is back (not "interrupted by an executor stop"), never sent twice.
    done_first = server.wait_for_run_status(in_flight, "succeeded", "failed")
    assert done_first["status"] == "succeeded", done_first
    [step] = done_first["steps"]
    assert step["status"] == "succeeded"
    assert [a["outcome"] for a in step["attempts"]] == ["succeeded"]
    assert len(recorder.requests) == 1

    assert [e["target"] for e in server.runs(alertname="E2EOutageLog")] == ["node-b"]
    assert [e["run_id"] for e in server.runs(alertname="E2EOutageNotify")] == [in_flight]
    assert server.starts == 1
    assert "Traceback" not in server.log_tail(2000)
