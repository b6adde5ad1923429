"""One place that configures logging for `remediate serve` (its master, HTTP workers and executor process,
gunicorn's own messages too) and `remediate agent`: one format on stderr, `log_format` text or json, `log_level`.

Text is one line per record, `time LEVEL logger: message key=value ...` (remediate.logs.safe escapes control
characters, so alert data cannot forge a line; the message's arguments have `=` and `"` escaped too, so alert
data in a message cannot forge a `key=value` field for a logfmt parser). JSON is one object per line
(python-json-logger): `time` (RFC 3339, UTC), `level`, `logger`, `message`, and the record's structured fields
as keys. Structured fields are what a caller passes as `extra` (the audit events of remediate.logs.audit, the access
line) and the request id of the request being answered, which every record logged while answering it carries
(`request_id`). docs/logging.md lists the fields.
"""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar
from typing import Any

from remediate.logs.safe import LOG_FORMAT, EscapingFormatter, escape_control

REQUEST_ID: ContextVar[str | None] = ContextVar("remediate_request_id", default=None)
"""The id of the request this thread answers now (remediate.server.requestlog sets and clears it)."""

STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
"""A LogRecord's own attributes: anything else on a record is a structured field (`extra`)."""

_BARE = re.compile(r"[A-Za-z0-9_.:/@+-]+")


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record logged while a request is answered (and nothing otherwise)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = REQUEST_ID.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
        return True


def structured_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's structured fields (its `extra`, the request id), in the order they were given."""
    return {key: value for key, value in record.__dict__.items() if key not in STANDARD_ATTRIBUTES}


def _text_value(value: Any) -> str:
    text = escape_control(value if isinstance(value, str) else str(value))
    # Quoted when a space, quote or '=' would make `key=value` ambiguous (logfmt's rule).
    return text if text and _BARE.fullmatch(text) else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_FIELD_SYNTAX = str.maketrans({"=": "\\x3d", '"': "\\x22"})


def _inert(arg: Any) -> Any:
    """A message argument that a logfmt parser cannot read as a field: `=` and `"` written as escapes."""
    return arg if isinstance(arg, int | float) else str(arg).translate(_FIELD_SYNTAX)


def inert_message(record: logging.LogRecord) -> str:
    """The record's message with its arguments made inert (`_inert`). The arguments are the data (a label,
    a rendered template, an error); the format string is the code's own and stays as written."""
    args = record.args
    if not args:
        return record.getMessage()
    try:
        if isinstance(args, dict):
            return str(record.msg) % {key: _inert(value) for key, value in args.items()}
        return str(record.msg) % tuple(_inert(arg) for arg in args)
    except (TypeError, ValueError):  # a conversion that needs the original type (%x of an object): escape all
        return record.getMessage().translate(_FIELD_SYNTAX)


class TextFormatter(EscapingFormatter):
    """The text format: the escaping formatter's line, then each structured field as ` key=value` (logfmt).

    Alert data rendered into a message (`... GPU 3 principal=admin event=approval`) must not read as fields
    to a logfmt parser of the line (Loki's `| logfmt`, which keeps the first of a repeated key), so the
    message's arguments have `=` and `"` escaped; the structured fields after it are quoted where needed."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = inert_message(record)
        line = super().formatMessage(record)
        fields = structured_fields(record)
        if fields.get("event") == record.message:  # an audit event: its name is the message already
            del fields["event"]
        return line + "".join(f" {key}={_text_value(value)}" for key, value in fields.items() if value is not None)


def json_formatter() -> logging.Formatter:
    """The JSON format: one object per line; python-json-logger (imported only when chosen)."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
    )


def configure_logging(log_format: str = "text", level: str = "info") -> None:
    """Root logging to stderr in `log_format` (text, json) at `level`, replacing any handler set before; the
    request id filter on the handler, so a record of any logger (Flask's, gunicorn's, a library's) gets it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter() if log_format == "json" else TextFormatter(LOG_FORMAT))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
