"""What the store's tests share: two playbooks, a start time, row readers and a way to queue runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from remediate.engine import Engine, IngestResult
from remediate.store import Store

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]
Ingest = Callable[..., IngestResult]
MakeAlert = Callable[..., dict[str, Any]]

PLAYBOOK = {
    "name": "xid",
    "match": {"alertname": ["GpuXidError", "GPUTemperatureHigh"]},
    "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
    "on_resolved": [{"action": "log", "with": {"message": "resolved"}}],
}
OTHER = {
    "name": "disk",
    "match": {"alertname": "DiskFull"},
    "steps": [{"action": "log", "with": {"message": "disk"}}],
}


def one(store: Store, table: sa.Table, *where: Any) -> Any:
    with store.read() as conn:
        return conn.execute(sa.select(table).where(*where)).one()


def queue_runs(engine: Engine, ingest: Ingest, make_alert: MakeAlert, count: int, at: float = T0) -> list[int]:
    alerts = [make_alert("GpuXidError", labels={"Hostname": f"node-{i}"}) for i in range(count)]
    result = ingest(engine, *alerts, at=at)
    return [d.run_id for d in result.decisions if d.run_id is not None]
