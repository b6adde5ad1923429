"""remediate.config.durations: the durations people write in playbooks and config."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediate.config.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15m", 900),
        ("90s", 90),
        ("2h", 7200),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("0s", 0),
        ("45", 45),
        ("0.2", 0.2),
        ("  10m  ", 600),
    ],
)
def test_durations_written_like_prometheus_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "m", "15x", "15 m", "1h 30m", "-5", "-5s", "m15", "1.2.3s", "inf", "nan", "1e400", "9" * 30 + "d"],
)
def test_anything_else_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_infinite_and_overlong_durations_are_value_errors_not_overflow_errors() -> None:
    for text in ("inf", "nan", "1e400", "99999999999999999999d"):
        with pytest.raises(ValueError, match=r"finite|too long"):
            parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (900, "15m"), (5400, "1h30m"), (90061, "1d1h1m1s"), (0.9, "0s")],
)
def test_format_duration_writes_the_shortest_form(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


@given(st.integers(min_value=0, max_value=10**8))
def test_whole_second_durations_survive_a_format_parse_round_trip(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    assert parse_duration(format_duration(delta)) == delta
