"""A logfmt parser with the scanning rules of github.com/go-logfmt/logfmt's Decoder (what Loki's `| logfmt`
and most logfmt tools are built on), to read our text log lines as a log pipeline would.

A key is a run of bytes above space other than `=` and `"`; `key=` is followed by a bare value (bytes above
space other than `=` and `"`) or a quoted one (Go's escapes); a key without `=` has no value (None). A `"`
where a key starts, or a `=`/`"` inside a bare value, is a syntax error (LogfmtError), as in go-logfmt.
"""

from __future__ import annotations

import json


class LogfmtError(ValueError):
    """The line is not logfmt at `pos` (go-logfmt's SyntaxError)."""


def _run(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] > " " and line[pos] not in '="':
        pos += 1
    return pos


def pairs(line: str) -> list[tuple[str, str | None]]:
    """Every (key, value) of `line` in order; value None for a key without `=`."""
    found: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(line):
        if line[pos] <= " ":
            pos += 1
            continue
        end = _run(line, pos)
        if end == pos:
            raise LogfmtError(f"unexpected {line[pos]!r} at {pos}")
        key, pos = line[pos:end], end
        if pos >= len(line) or line[pos] != "=":
            found.append((key, None))
            continue
        pos += 1
        if pos < len(line) and line[pos] == '"':
            close = pos + 1
            while close < len(line) and line[close] != '"':
                close += 2 if line[close] == "\\" else 1
            if close >= len(line):
                raise LogfmtError(f"unterminated quoted value at {pos}")
            found.append((key, json.loads(line[pos : close + 1])))
            pos = close + 1
        else:
            end = _run(line, pos)
            if end < len(line) and line[end] > " ":
                raise LogfmtError(f"unexpected {line[end]!r} in a bare value at {end}")
            found.append((key, line[pos:end]))
            pos = end
    return found


def fields(line: str) -> dict[str, str]:
    """The keys with a value (what a pipeline makes labels of), the first of a repeated key kept (Loki's rule)."""
    kept: dict[str, str] = {}
    for key, value in pairs(line):
        if value is not None:
            kept.setdefault(key, value)
    return kept
