"""History to prune: many finished runs with every row they bring, written in a few bulk statements."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from remediate.store import Store
from remediate.store import schema as t


def _insert(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> list[int]:
    statement = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return [row[0] for row in conn.execute(statement, rows)]


def fill(store: Store, count: int, at: float, *, first: int = 0) -> None:
    """`count` finished one-step runs with their notification, alert, decision, step and attempt (bulk SQL)."""
    numbers = range(first, first + count)
    with store.write() as conn:
        notifications = _insert(
            conn,
            t.notifications,
            [
                {"received_at": at, "receiver": "r", "status": "firing", "group_key": "g", "alert_count": 1}
                | {"raw": "x" * 800}
                for _ in numbers
            ],
        )  # fmt: skip
        alerts = _insert(
            conn,
            t.alerts,
            [
                {
                    "notification_id": n, "fingerprint": f"fp{i}", "alertname": "GpuXidError", "status": "firing",
                    "starts_at": "2026-01-01T00:00:00Z", "labels": "{}", "annotations": "{}", "generator_url": "",
                }
                for i, n in zip(numbers, notifications, strict=True)
            ],
        )  # fmt: skip
        runs = _insert(
            conn,
            t.runs,
            [
                {
                    "dedupe_key": f"k{i}", "playbook": "xid", "alertname": "GpuXidError", "target": f"n{i}",
                    "phase": "firing", "mode": "enforce", "status": "succeeded", "alert_id": a, "created_at": at,
                    "updated_at": at, "finished_at": at, "guard_key": f"n{i}",
                }
                for i, a in zip(numbers, alerts, strict=True)
            ],
        )  # fmt: skip
        steps = _insert(
            conn,
            t.steps,
            [
                {
                    "run_id": r, "idx": 0, "name": "s", "action": "log", "where": "server", "params": "{}",
                    "timeout": 1.0, "retries": 0, "status": "succeeded", "result": "y" * 400,
                }
                for r in runs
            ],
        )  # fmt: skip
        _insert(
            conn, t.attempts, [{"step_id": s, "number": 1, "started_at": at, "outcome": "succeeded"} for s in steps]
        )
        _insert(
            conn,
            t.decisions,
            [
                {
                    "created_at": at, "notification_id": n, "alert_id": a, "alertname": "GpuXidError",
                    "fingerprint": f"fp{i}", "alert_status": "firing", "playbook": "xid", "target": f"n{i}",
                    "decision": "accepted", "reason": "ok", "status": "succeeded", "run_id": r,
                }
                for i, n, a, r in zip(numbers, notifications, alerts, runs, strict=True)
            ],
        )  # fmt: skip
