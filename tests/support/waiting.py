"""How long a test waits for a real machine: one scale setting, ``REMEDIATE_TEST_TIME_SCALE``.

Every bound a test puts on how long a real process, server, AlertManager, Prometheus or PostgreSQL
may take (to start, to answer, to finish a run, to stop) is written in seconds as the test's author
saw them on an idle machine, and passes through `scaled`. A slow or loaded machine sets the scale
(`REMEDIATE_TEST_TIME_SCALE=3 scripts/test`; CI runs at 2) and the same tests wait longer instead of
failing: a fresh clone on a loaded 2-core host failed 10 of 2,937 tests on fixed 30 s waits.

Only the bounds on waiting are scaled. A time that is the behaviour under test (a step timeout the
test asserts fires, a lease a replica must outlive, a client deadline the server must answer within)
stays as written: scaling it would change what the test checks.

`wait_until` is the one polling helper; its ``timeout`` is such an idle-machine bound and is scaled
inside, as is every ``timeout`` parameter of the helpers in tests/support that wait
(``RemediateServer.wait_for_run``, ``WebhookRecorder.wait_for``, ``wait_for_ack``, ...).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

__all__ = ["SCALE", "SCALE_VARIABLE", "scaled", "wait_until"]

T = TypeVar("T")

SCALE_VARIABLE = "REMEDIATE_TEST_TIME_SCALE"


class TimeScaleError(ValueError):
    """REMEDIATE_TEST_TIME_SCALE is set to something that is not a positive number."""


def read_scale(environ: Mapping[str, str] = os.environ) -> float:
    """The scale the environment asks for: 1 when unset, else a finite number > 0."""
    raw = environ.get(SCALE_VARIABLE, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise TimeScaleError(f"{SCALE_VARIABLE}={raw!r}: not a number (e.g. 1, 2, 3.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise TimeScaleError(f"{SCALE_VARIABLE}={raw!r}: must be a finite number > 0")
    return value


SCALE = read_scale()


def scaled(seconds: float) -> float:
    """``seconds`` (a bound on an idle machine) on this machine: times `SCALE`."""
    return seconds * SCALE


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.05,
    message: str = "",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Real systems answer eventually, not immediately; polling with a deadline keeps tests fast
    when things are quick and bounded when they are not. ``timeout`` is the bound on an idle
    machine, scaled here (`scaled`). Raises ``AssertionError`` with ``message`` and the last value
    seen, so a failing test says what it was waiting for and how far it got.
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"{message or 'condition not met'} (timed out after {limit:g} s at "
                f"{SCALE_VARIABLE}={SCALE:g}; last value: {value!r})"
            )
        time.sleep(interval)
