"""The server prunes its history by itself (`retention`): `remediate serve` under gunicorn on a database
with 100-day-old history; the executor process's Pruner deletes it soon after start and logs one line."""

from __future__ import annotations

import time
from pathlib import Path

import sqlalchemy as sa

from remediate.store import Store
from remediate.store import schema as t
from tests.support.retention import fill
from tests.support.server import RemediateServer, write_playbook
from tests.support.waiting import wait_until

DAY = 86400.0
PLAYBOOK = """\
name: xid
match: {alertname: GpuXidError}
target: node
steps:
  - action: log
    with: {message: hi}
"""


def runs(store: Store) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.runs)).scalar_one())


def test_a_served_database_is_pruned_to_its_retention_soon_after_start(tmp_path: Path) -> None:
    playbooks = tmp_path / "playbooks"
    write_playbook(playbooks, "xid", PLAYBOOK)
    server = RemediateServer(tmp_path / "server", playbooks, env={"REMEDIATE_RETENTION": "30d"})
    (tmp_path / "server").mkdir()
    store = Store.open(server.database_url)
    fill(store, 50, time.time() - 100 * DAY)
    fill(store, 5, time.time() - 10 * DAY, first=50)
    try:
        server.start()
        wait_until(lambda: runs(store) == 5, timeout=20, message="the server pruned the old runs")
        wait_until(lambda: "retention: pruned history" in server.log_tail(200), timeout=5)
    finally:
        server.stop()
        store.close()
    (line,) = [x for x in server.log_tail(200).splitlines() if "retention: pruned history" in x]
    assert "older than 2.592e+06s: notifications=50 alerts=50 decisions=50 runs=50 steps=50 attempts=50" in line
