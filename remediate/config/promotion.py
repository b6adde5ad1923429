"""Waves that promote themselves on evidence: the rule (pure; docs/playbooks.md#staged-rollout).

A rollout's `promote: {after: 5, within: 7d}` lets each wave but the first switch from its configured mode
(approve, dry-run) to enforce once the wave written before it in `waves` has shown, within `within`, `after`
runs of the same playbook version that succeeded and verified, none failed and none undone by hand since.
Any failure (a firing run failed, its undo's verify failed, a person undid what it did) demotes the wave back
to its configured mode; the count starts again after it. So a promotion is a fact about one playbook version:
a changed playbook (a new version) starts in the modes as written.

Why the written order of `waves` and not the names' order: "10" sorts before "2", `canary` before `fleet`;
a rollout's author writes its waves in the order a change meets them.

Why evidence per playbook version and not per playbook: what wave 1 proved is that this text of the playbook
behaves; an edited step has proved nothing yet.

The store's reading of the evidence is remediate.store.wave_evidence; the engine asks at judging time
(remediate.judging.engine), and the decision's reason quotes `Promotion.note`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from remediate.config.durations import format_duration, parse_duration

_KEYS = {"after", "within"}
MAX_AFTER = 1000
"""Runs a promotion may ask for: the evidence is read in one query, newest first, at most this many and
a margin (remediate.store.wave_evidence)."""


class PromotionError(ValueError):
    """A `promote` as written is wrong: the message names the field."""


@dataclass(frozen=True)
class PromoteRule:
    """`rollout.promote`: `after` verified runs of the wave before, within `within` seconds."""

    after: int
    within: float
    order: tuple[str, ...]
    """The waves in the order `waves` writes them: a wave is promoted on the evidence of the one before it."""

    def previous(self, wave: str) -> str | None:
        """The wave whose runs promote `wave`; None for the first wave, or one not named."""
        if wave not in self.order:
            return None
        index = self.order.index(wave)
        return self.order[index - 1] if index > 0 else None


@dataclass(frozen=True)
class WaveEvidence:
    """What the store found of one wave's runs of one playbook version within the window, newest first:
    the runs verified since the last failure (or since the window began), and that failure if any."""

    verified: int
    first_verified_at: float | None = None
    """The oldest of the `verified` runs' creation time (the decision's "since")."""
    failed_run: int | None = None
    failed_at: float | None = None
    failed_how: str = ""
    """`failed`, `its verify (undo) failed`, `was undone by hand`."""


@dataclass(frozen=True)
class Promotion:
    """A wave's mode after its promotion was judged, and the evidence the decision's reason names."""

    promoted: bool
    note: str
    demoted: bool = False
    wave: str = ""


def parse_promote(value: Any, waves: tuple[str, ...], field: str) -> PromoteRule | None:
    """`promote: {after: 5, within: 7d}` of a rollout whose waves are `waves` (as written); None if absent."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PromotionError(f"{field}: must be a mapping (after: a number of runs, within: a duration)")
    unknown = sorted(set(map(str, value)) - _KEYS)
    if unknown:
        raise PromotionError(f"{field}.{unknown[0]}: unknown key (known: after, within)")
    after = value.get("after")
    if isinstance(after, bool) or not isinstance(after, int) or not 1 <= after <= MAX_AFTER:
        raise PromotionError(f"{field}.after: must be a whole number of runs from 1 to {MAX_AFTER}, got {after!r}")
    within = value.get("within")
    if not isinstance(within, str):
        raise PromotionError(f"{field}.within: required, a duration (e.g. 7d)")
    try:
        seconds = parse_duration(within).total_seconds()
    except ValueError as exc:
        raise PromotionError(f"{field}.within: {exc}") from None
    if seconds <= 0:
        raise PromotionError(f"{field}.within: must be more than 0s")
    if len(waves) < 2:
        raise PromotionError(f"{field}: needs at least two waves (a wave is promoted on the one before it)")
    return PromoteRule(after, seconds, waves)


def judge(
    rule: PromoteRule, wave: str, previous: str, version: str, configured: str, evidence: WaveEvidence
) -> Promotion:
    """Is `wave` promoted to enforce on `previous`'s evidence for playbook `version`? The note names it:
    `wave 2 enforcing: 5 of 5 wave-1 runs of version 3f2a1b2c… verified since 2026-12-03T10:00:00Z`."""
    of = f"{rule.after} wave-{previous} runs of version {short(version)}"
    if evidence.verified >= rule.after:
        since = _at(evidence.first_verified_at)
        return Promotion(True, f"wave {wave} enforcing: {evidence.verified} of {of} verified since {since}", wave=wave)
    held = f"wave {wave} {configured}"
    if evidence.failed_run is not None:
        return Promotion(
            False,
            f"{held} (demoted: run {evidence.failed_run} of wave {previous} {evidence.failed_how} at "
            f"{_at(evidence.failed_at)}; {evidence.verified} of {of} verified since)",
            demoted=True,
            wave=wave,
        )
    return Promotion(
        False,
        f"{held} (not promoted: {evidence.verified} of {of} verified within {format_duration(rule.within)})",
        wave=wave,
    )


def short(version: str) -> str:
    return f"{version[:8]}…" if len(version) > 8 else version


def _at(at: float | None) -> str:
    if at is None:
        return "?"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
