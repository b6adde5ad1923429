"""Audit events: named log records of what people and remediate did (who approved, what was refused).

Minimal: each event is one record of the `remediate.audit` logger, its name and fields in `extra`, so a
structured formatter writes them as fields and the text format still says what happened.
"""

from __future__ import annotations

import logging

log = logging.getLogger("remediate.audit")


def audit_event(event: str, /, *, level: int = logging.INFO, **fields: object) -> None:
    """Record `event` (e.g. `run.approved`) with its fields (run_id, principal, reason, ...)."""
    described = " ".join(f"{key}={value}" for key, value in fields.items())
    log.log(level, "%s %s", event, described, extra={"event": event, **fields})
