"""What the store's tests share: two playbooks, a start time and a way to queue runs."""

from __future__ import annotations

from collections.abc import Callable

from remediate.judging.engine import Engine
from tests.conftest import alert_payload, ingest_alerts

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]

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


def queue_runs(engine: Engine, count: int, at: float = T0) -> list[int]:
    alerts = [alert_payload("GpuXidError", labels={"Hostname": f"node-{i}"}) for i in range(count)]
    result = ingest_alerts(engine, *alerts, at=at)
    return [d.run_id for d in result.decisions if d.run_id is not None]
