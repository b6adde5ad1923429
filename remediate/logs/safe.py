"""Log lines that alert data cannot forge: control characters in a record's message are escaped.

Alert labels and annotations are data from whoever can reach AlertManager or export metrics; a
label value with a CR/LF would otherwise end our log line and start a forged one ("... INFO
remediate.server: approved by admin"). Every record is one physical line: its message has control
characters written as escapes (\\n, \\r, \\x1b); a traceback's lines are indented, so none of them
can pass for a record of its own.
"""

from __future__ import annotations

import logging
import re

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_control(text: str) -> str:
    """`text` with every control character (C0, DEL, C1, Unicode line separators) written as an escape."""
    return _CONTROL.sub(_escape, text)


class EscapingFormatter(logging.Formatter):
    """A Formatter whose message part is always one line (see the module docstring)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_control(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        return self.formatStack(super().formatException(ei))  # type: ignore[arg-type]

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("    | " + escape_control(line) for line in stack_info.splitlines())
