"""Audit events: who did what to remediation, as named log records of logger `remediate.logs.audit`.

An event is a record whose message is the event's name and whose structured fields are the event's fields:
JSON keys in the json log format, `key=value` in text (remediate.logs.setup); the request id joins them when
a request caused them. docs/logging.md lists every event with its fields (a test keeps the two in step).
The history in the store stays the record of runs; these lines are what a log pipeline (Loki, ...) sees.
"""

from __future__ import annotations

import logging

from remediate.logs.setup import STANDARD_ATTRIBUTES

log = logging.getLogger("remediate.audit")

RESERVED_FIELDS = STANDARD_ATTRIBUTES | {"event", "request_id", "level", "logger", "time"}
"""Names a field may not take: a LogRecord's own attributes, and the keys every JSON line has."""


class ReservedFieldError(TypeError):
    """An audit field named like a record's own key (a bug of the caller, found by its tests)."""


def audit_event(event: str, /, *, level: int = logging.INFO, **fields: object) -> None:
    """Log audit event `event` (a snake_case name of docs/logging.md) with `fields` at `level`."""
    clash = sorted(set(fields) & RESERVED_FIELDS)
    if clash:
        raise ReservedFieldError(f"audit event {event}: field {clash[0]!r} is reserved; name it otherwise")
    log.log(level, "%s", event, extra={"event": event, **fields})
