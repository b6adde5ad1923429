"""Repeat offenders: a ladder playbook's `repeat_offender:` key, as written and checked (pure).

A target (the playbook's: a node, or a GPU with `target: {labels: [UUID]}`) whose firing runs of the
playbook acted `count` times within `within` is a repeat offender: its next new occurrence skips the
gentle rungs and goes straight to the rung named by `then` (docs/playbooks.md, "Repeat offenders").
Counted from the store's history (remediate.store.repeat_offenders); the rung is chosen by
remediate.judging.ladder.repeat_offender_choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from remediate.config.durations import parse_duration

KEYS = frozenset({"count", "within", "then"})


@dataclass(frozen=True)
class RepeatOffender:
    count: int
    """The run this many (counting the one being judged) within `within` goes straight to `then`."""
    within: timedelta
    then: str
    """The name of the rung to go straight to."""


def parse_repeat_offender(raw: Any, rung_names: Sequence[str], fail: Callable[[str, str], Exception]) -> RepeatOffender:
    """`repeat_offender: {count: 3, within: 7d, then: keep-out}` of a ladder whose rungs are `rung_names`."""
    field = "repeat_offender"
    if not isinstance(raw, dict):
        raise fail(field, "must be a mapping: {count: 3, within: 7d, then: <rung name>}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise fail(f"{field}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(KEYS))})")
    count = raw.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        # 1 would send every firing straight to `then`: write a shorter ladder instead.
        raise fail(f"{field}.count", "required: a whole number >= 2 (the run that makes it a repeat offender)")
    within_raw = raw.get("within")
    if isinstance(within_raw, int | float) and not isinstance(within_raw, bool):
        within_raw = str(within_raw)
    if not isinstance(within_raw, str):
        raise fail(f"{field}.within", "required: a duration like 7d or 24h")
    try:
        within = parse_duration(within_raw)
    except ValueError as exc:
        raise fail(f"{field}.within", str(exc)) from exc
    if within <= timedelta(0):
        raise fail(f"{field}.within", "must be longer than 0s")
    then = raw.get("then")
    if not isinstance(then, str) or then not in rung_names:
        raise fail(f"{field}.then", f"required: the name of a rung of this ladder (one of {', '.join(rung_names)})")
    if then == rung_names[0]:
        raise fail(f"{field}.then", f"{then!r} is the first rung: a repeat offender would skip nothing")
    return RepeatOffender(count, within, then)


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= number % 100 <= 20 else _SUFFIX.get(number % 10, "th")
    return f"{number}{suffix}"


_SUFFIX = {1: "st", 2: "nd", 3: "rd"}
