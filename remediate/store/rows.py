"""What the store's modules share about rows: the JSON text columns, row ids, the alert a step sees."""

from __future__ import annotations

import json
from typing import Any

from remediate.store import schema as t

MAX_ID = 2**63 - 1
"""Largest row id a database integer column holds; a larger id can only be unknown."""


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


ALERT_CONTEXT_COLUMNS = (
    t.alerts.c.labels,
    t.alerts.c.annotations,
    t.alerts.c.fingerprint,
    t.alerts.c.starts_at,
    t.alerts.c.ends_at,
    t.alerts.c.generator_url,
    t.alerts.c.status.label("alert_status"),
)
"""The alert's columns a step's context is built from (`alert_context`); the query also selects runs.alertname."""


def alert_context(row: Any) -> dict[str, Any]:
    """The alert as actions see it (StepContext.alert), from a row holding ALERT_CONTEXT_COLUMNS and alertname."""
    return {
        "labels": json.loads(row.labels),
        "annotations": json.loads(row.annotations),
        "status": row.alert_status,
        "alertname": row.alertname,
        "fingerprint": row.fingerprint,
        "startsAt": row.starts_at,
        "endsAt": row.ends_at or "",
        "generatorURL": row.generator_url,
    }
