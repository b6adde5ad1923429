"""Guards: decide whether one (alert, playbook) pair may become a run. Pure logic.

The engine gathers the facts from the store inside its write transaction and asks
`judge`; the verdict is recorded whatever it is, so every refusal has a reason in
the audit history. Order matters: a duplicate is a duplicate even while paused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from remediate.durations import format_duration
from remediate.playbooks import Playbook

ATTEMPT_WINDOW = timedelta(hours=24)


class Decision(StrEnum):
    ACCEPTED = "accepted"
    UNMATCHED = "unmatched"
    DUPLICATE = "duplicate"
    PAUSED = "paused"
    COOLDOWN = "cooldown"
    ATTEMPT_CAP = "attempt_cap"
    REJECTED = "rejected"
    NO_FIRING_RUN = "no_firing_run"
    NOTHING_ON_RESOLVED = "nothing_on_resolved"


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str

    @property
    def accepted(self) -> bool:
        return self.decision is Decision.ACCEPTED


@dataclass(frozen=True)
class GuardFacts:
    """What the store knows that matters for one decision."""

    duplicate_of: int | None = None
    paused: bool = False
    paused_by: str = ""
    paused_reason: str = ""
    last_run_at: float | None = None
    runs_in_window: int = 0
    firing_run: int | None = None
    """For a resolved alert: the accepted firing run of the same occurrence, if any."""


def judge(playbook: Playbook, phase: str, target: str, facts: GuardFacts, now: float) -> Verdict:
    if facts.duplicate_of is not None:
        return Verdict(
            Decision.DUPLICATE,
            f"already recorded as run {facts.duplicate_of} (same fingerprint, startsAt, status and playbook)",
        )
    if phase == "resolved":
        if not playbook.on_resolved:
            return Verdict(Decision.NOTHING_ON_RESOLVED, "the playbook has no on_resolved steps")
        if facts.firing_run is None:
            return Verdict(Decision.NO_FIRING_RUN, "no run was accepted for this alert while it fired")
    if facts.paused:
        who = f" by {facts.paused_by}" if facts.paused_by else ""
        why = f": {facts.paused_reason}" if facts.paused_reason else ""
        return Verdict(Decision.PAUSED, f"remediation is paused{who}{why}")
    if phase == "firing":
        cooldown = playbook.cooldown.total_seconds()
        if cooldown and facts.last_run_at is not None and now - facts.last_run_at < cooldown:
            wait = timedelta(seconds=int(cooldown - (now - facts.last_run_at)) + 1)
            return Verdict(
                Decision.COOLDOWN,
                f"last run for {target} at {_iso(facts.last_run_at)}; cooldown {format_duration(playbook.cooldown)}, "
                f"next allowed in {format_duration(wait)}",
            )
        if playbook.max_attempts is not None and facts.runs_in_window >= playbook.max_attempts:
            return Verdict(
                Decision.ATTEMPT_CAP,
                f"{facts.runs_in_window} runs for {target} in the last 24h reached max_attempts "
                f"{playbook.max_attempts}",
            )
    return Verdict(Decision.ACCEPTED, f"matched playbook {playbook.name} ({phase})")


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
