"""Durations as people write them in playbooks and config: ``90s``, ``15m``, ``1h30m``, ``2d``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> timedelta:
    """Parse Prometheus-style durations; a bare number means seconds. Raises ValueError."""
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise ValueError(f"negative duration {text!r}")
        return _timedelta(seconds, text)
    position = 0
    total = 0.0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(value):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 1h30m, 2d)")
    return _timedelta(total, text)


def _timedelta(seconds: float, text: str) -> timedelta:
    # "inf", "nan" and absurdly long durations must be a ValueError like any other bad input.
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {text!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration too long: {text!r}") from None


def format_duration(delta: timedelta | float) -> str:
    """`1h30m`; `delta` a timedelta or seconds."""
    seconds = int(delta.total_seconds() if isinstance(delta, timedelta) else delta)
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
