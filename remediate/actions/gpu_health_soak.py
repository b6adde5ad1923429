"""The soak of `gpu.health`: its NVML checks repeated over a window, every round's verdict kept as evidence.

Why a window and not one look: a GPU back from an XID often passes a check taken once (a reset clears the
counters, an idle link trains at full width) and fails under sustained load an hour later; NVSentinel's
users report exactly that (#695 "post-reboot checks are overly optimistic", #1427). A node drained by the
ladder is idle, so the soak cannot load it (the burn-in does that); what it catches is a fault that comes
back by itself within the window: volatile double-bit ECC counting again, a link that trains down again,
HW slowdown or power brake asserted again, a GPU that falls off the bus again. The first failing round
fails the step at once (no need to wait out the window to keep a node out); warnings are kept, never fatal.

A GPU can also fall off the bus so far that NVML stops listing it (after an XID 79 the driver may drop the device):
a round judging only the GPUs listed then would pass a node short of one. So every round is held to the GPUs
the plan or the first round listed (run_soak, for the step's soak and the release gate's rounds alike): one no
longer listed fails the round's `on_bus` check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remediate.errors import ActionError

ROUNDS_KEPT = 200
"""The most rounds kept in the result (the first and the latest ones): a long soak's history stays bounded."""


class SoakTooLong(ActionError):
    """The soak does not fit in the step's timeout: it would be cut short, so it is refused before it starts."""


class SoakStopped(ActionError):
    """The server stopped during the soak: the node was not proven healthy over the whole window."""


UNLISTED = "no longer listed by NVML: fell off the bus?"
"""The `on_bus` evidence of a GPU the soak's first round (or the plan) listed and a later round does not."""


@dataclass(frozen=True)
class Listed:
    """A GPU a round listed: its index then and its UUID (what identifies it across rounds: indexes shift)."""

    index: int
    uuid: str

    def who(self) -> str:
        """`GPU 0 (GPU-…)`, as gpu.health's evidence lines name a GPU."""
        return f"GPU {self.index} ({self.uuid})"

    def unlisted_line(self) -> str:
        return f"{self.who()}: on_bus: {UNLISTED}"


def listed_in(entries: Iterable[Mapping[str, Any]]) -> tuple[Listed, ...]:
    """The GPUs of gpu.health's `gpus` entries (a plan's or a result's) whose UUID is known."""
    return tuple(
        Listed(int(e.get("index", -1)), str(e["gpu"])) for e in entries if e.get("gpu") not in (None, "", "unknown")
    )


@dataclass(frozen=True)
class Round:
    """One round of the checks: when it ran (seconds from the soak's start) and what it found.

    `gpus`: the GPUs it listed (None: not known, nothing to hold it to); `unlisted`: those run_soak found missing
    from it, already among `failed`."""

    at_s: float
    verdict: str
    failed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    gpus: tuple[Listed, ...] | None = None
    unlisted: tuple[Listed, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 1), "verdict": self.verdict, "failed": list(self.failed),
                "warnings": list(self.warnings)}  # fmt: skip


@dataclass(frozen=True)
class Soak:
    """A window of `window_s` seconds, a round every `every_s` (the first at once, the last at the window's end);
    a window of 0: one round, the step as it was without a soak."""

    window_s: float
    every_s: float

    def offsets(self) -> list[float]:
        """When each round runs, in seconds from the start: 0, every, 2·every, ..., and the window's end."""
        if self.window_s <= 0:
            return [0.0]
        count = int(self.window_s // self.every_s)
        offsets = [i * self.every_s for i in range(count + 1)]
        return offsets if offsets[-1] >= self.window_s else [*offsets, self.window_s]

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "every_s": self.every_s, "rounds_planned": len(self.offsets())}


@dataclass
class SoakLog:
    """The rounds run so far, the evidence kept with the step whatever its outcome."""

    soak: Soak
    rounds: list[Round] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        kept = self.rounds
        if len(kept) > ROUNDS_KEPT:
            kept = kept[: ROUNDS_KEPT // 2] + kept[-ROUNDS_KEPT // 2 :]
        return self.soak.to_dict() | {"rounds_run": len(self.rounds), "rounds": [r.to_dict() for r in kept]}


def run_soak(
    soak: Soak,
    one_round: Callable[[], Round],
    *,
    remaining: Callable[[], float],
    stopping: threading.Event,
    margin_s: float,
    clock: Callable[[], float] = time.monotonic,
    expected: Sequence[Listed] = (),
    on_round: Callable[[Round], None] = lambda done: None,
) -> SoakLog:
    """Every round of `soak` in turn, until one fails (it is the last in the log) or the window ends.

    Each round is held to `expected` (the plan's GPUs), or when that is empty to the first round's: a GPU it no
    longer lists fails it (module docstring). `on_round` is told each round so judged, as it ends.
    Raises SoakTooLong before the first round when the window and `margin_s` exceed `remaining()`, and
    SoakStopped (the log so far in its message) when `stopping` is set during a wait."""
    if soak.window_s + margin_s > remaining():
        raise SoakTooLong(
            f"soak {soak.window_s:g}s (+{margin_s:g}s to judge) does not fit in the {remaining():.0f}s left of "
            "the step's timeout: raise the step's `timeout`"
        )
    log, started = SoakLog(soak), clock()
    for offset in soak.offsets():
        wait = started + offset - clock()
        if wait > 0 and stopping.wait(wait):
            raise SoakStopped(
                f"stopped after {len(log.rounds)} of {len(soak.offsets())} soak rounds (the server is stopping): "
                "the node was not proven healthy over the window"
            )
        done = _held_to(one_round(), expected or (log.rounds[0].gpus if log.rounds else None) or ())
        log.rounds.append(done := replace(done, at_s=clock() - started))
        on_round(done)
        if done.verdict == "fail":
            break
    return log


def _held_to(done: Round, expected: Sequence[Listed]) -> Round:
    """`done`, failed for each GPU of `expected` it did not list (UUIDs compare case-insensitively, as NVML's)."""
    if done.gpus is None:
        return done
    listed = {g.uuid.lower() for g in done.gpus}
    unlisted = tuple(g for g in expected if g.uuid.lower() not in listed)
    if not unlisted:
        return done
    failed = (*done.failed, *(g.unlisted_line() for g in unlisted))
    return replace(done, verdict="fail", failed=failed, unlisted=unlisted)
