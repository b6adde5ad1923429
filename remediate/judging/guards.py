"""Guards: decide whether one (alert, playbook) pair may become a run. Pure logic.

The engine gathers the facts from the store inside its write transaction and asks
`judge`, which asks the guard stages (`STAGES`: dedupe, already resolved, something to undo,
superseded, pause, breaker, cooldown, attempt cap) in order; the first refusal is the verdict. The
verdict is recorded whatever it is, so every refusal has a reason in the audit history. Order
matters: a duplicate is a duplicate even while paused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from remediate.breaker import BreakerState, is_stale, iso_utc, open_reason, stale_reason
from remediate.config.durations import format_duration
from remediate.playbooks.model import Playbook
from remediate.runs import Decision, RunStatus

ATTEMPT_WINDOW = timedelta(hours=24)


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
    """The run already recorded for this occurrence; 0 when it is earlier in the same notification."""
    paused: bool = False
    paused_by: str = ""
    paused_reason: str = ""
    last_run_at: float | None = None
    runs_in_window: int = 0
    firing_run: int | None = None
    """For a resolved alert: the firing run of the same occurrence, if any."""
    firing_run_status: str | None = None
    gated: bool = False
    """The playbook's steps for this phase include cluster changes the circuit breaker caps."""
    breaker: BreakerState | None = None
    """The circuit breaker's state (remediate.breaker), when the store has one."""
    alert_started_at: float | None = None
    stale_horizon: float = 900.0
    already_resolved: bool = False
    """For a firing alert: a resolved alert of the same occurrence (fingerprint + startsAt) was received."""
    superseded_by: int | None = None
    """For a resolved alert: the firing run of a newer occurrence of the same alert (later startsAt, same
    playbook and guard key) that acted and has not resolved yet."""
    rung: int | None = None
    """For a ladder's firing alert: the rung (1-based) it would run; its cooldown and max_attempts apply."""
    rung_runs_in_window: int = 0
    """Counted runs of that rung (same playbook and guard key) in the attempt window."""


# A resolved alert undoes nothing when its firing run never acted.
NOTHING_TO_UNDO = {
    RunStatus.AWAITING_APPROVAL: "was still awaiting approval; it is cancelled and there is nothing to undo",
    RunStatus.CANCELLED: "was cancelled; there is nothing to undo",
    RunStatus.REJECTED: "was rejected (its params did not validate); there is nothing to undo",
}


@dataclass(frozen=True, slots=True)
class GuardCase:
    """One (alert, playbook) pair as the guard stages see it."""

    playbook: Playbook
    phase: str
    target: str
    facts: GuardFacts
    now: float


Stage = Callable[[GuardCase], "Verdict | None"]
"""One guard: a refusal with its reason, or None to go on to the next stage."""


def dedupe(case: GuardCase) -> Verdict | None:
    """A duplicate is a duplicate whatever else holds (even while paused): AlertManager re-sends groups."""
    duplicate_of = case.facts.duplicate_of
    if duplicate_of == 0:  # the engine's mark for "earlier in the same notification"
        return Verdict(Decision.DUPLICATE, "the same alert occurrence appears earlier in this notification")
    if duplicate_of is not None:
        return Verdict(
            Decision.DUPLICATE,
            f"already recorded as run {duplicate_of} (same fingerprint, startsAt, status and playbook)",
        )
    return None


def already_resolved(case: GuardCase) -> Verdict | None:
    # Starting a fix for an alert that is over would leave it applied with no resolved to undo it
    # (the resolved was handled first: nothing to undo then). Not starting is the safe order.
    if case.phase == "firing" and case.facts.already_resolved:
        return Verdict(
            Decision.ALREADY_RESOLVED,
            "this alert occurrence (same fingerprint and startsAt) was already reported resolved; "
            "its firing steps are not started",
        )
    return None


def something_to_undo(case: GuardCase) -> Verdict | None:
    """A resolved alert runs on_resolved only when the playbook has some and its firing run acted."""
    if case.phase != "resolved":
        return None
    facts = case.facts
    if not case.playbook.undoes:
        return Verdict(Decision.NOTHING_ON_RESOLVED, "the playbook has no on_resolved steps")
    if facts.firing_run is None:
        return Verdict(Decision.NO_FIRING_RUN, "no run was accepted for this alert while it fired")
    if facts.firing_run_status in NOTHING_TO_UNDO:
        return Verdict(
            Decision.NO_FIRING_RUN,
            f"the firing run {facts.firing_run} {NOTHING_TO_UNDO[facts.firing_run_status]}",
        )
    return None


def superseded(case: GuardCase) -> Verdict | None:
    """A resolved alert does not undo what a newer, still firing occurrence of it needs."""
    newer_run = case.facts.superseded_by
    if case.phase != "resolved" or newer_run is None:
        return None
    newer = f"firing run {newer_run}" if newer_run else "accepted in this notification"
    return Verdict(
        Decision.SUPERSEDED,
        f"a newer occurrence of this alert on {case.target} ({newer}) is active and has not resolved: "
        "undoing now would undo what it needs; its own resolved runs on_resolved",
    )


def pause(case: GuardCase) -> Verdict | None:
    facts = case.facts
    if not facts.paused:
        return None
    who = f" by {facts.paused_by}" if facts.paused_by else ""
    why = f": {facts.paused_reason}" if facts.paused_reason else ""
    return Verdict(Decision.PAUSED, f"remediation is paused{who}{why}")


def breaker(case: GuardCase) -> Verdict | None:
    """Only new cluster changes: undo (on_resolved) is never refused by the breaker."""
    facts = case.facts
    if case.phase != "firing" or not facts.gated or facts.breaker is None:
        return None
    if facts.breaker.open:
        return Verdict(Decision.BREAKER_OPEN, open_reason(facts.breaker))
    if is_stale(facts.alert_started_at, facts.breaker, case.now, facts.stale_horizon):
        assert facts.alert_started_at is not None
        return Verdict(Decision.STALE, stale_reason(facts.alert_started_at, facts.breaker, facts.stale_horizon))
    return None


def cooldown(case: GuardCase) -> Verdict | None:
    """A ladder's rung may have its own cooldown; it counts from the last run of any rung."""
    facts, playbook, now = case.facts, case.playbook, case.now
    if case.phase != "firing" or facts.last_run_at is None:
        return None
    span = playbook.rung_cooldown(facts.rung) if facts.rung is not None else playbook.cooldown
    seconds = span.total_seconds()
    if not seconds or now - facts.last_run_at >= seconds:
        return None
    wait = timedelta(seconds=math.ceil(seconds - (now - facts.last_run_at)))
    return Verdict(
        Decision.COOLDOWN,
        f"last run for {case.target} at {iso_utc(facts.last_run_at)}; cooldown {format_duration(span)}, "
        f"next allowed in {format_duration(wait)}",
    )


def attempt_cap(case: GuardCase) -> Verdict | None:
    """max_attempts in the attempt window: the rung's own cap first, then the playbook's."""
    facts, playbook = case.facts, case.playbook
    if case.phase != "firing":
        return None
    rung_cap = playbook.rungs[facts.rung - 1].max_attempts if facts.rung is not None else None
    if rung_cap is not None and facts.rung_runs_in_window >= rung_cap:
        return Verdict(
            Decision.ATTEMPT_CAP,
            f"{facts.rung_runs_in_window} runs of rung {facts.rung} for {case.target} in the last 24h reached its "
            f"max_attempts {rung_cap}",
        )
    if playbook.max_attempts is not None and facts.runs_in_window >= playbook.max_attempts:
        return Verdict(
            Decision.ATTEMPT_CAP,
            f"{facts.runs_in_window} runs for {case.target} in the last 24h reached max_attempts "
            f"{playbook.max_attempts}",
        )
    return None


STAGES: tuple[Stage, ...] = (
    dedupe,
    already_resolved,
    something_to_undo,
    superseded,
    pause,
    breaker,
    cooldown,
    attempt_cap,
)
"""The guards in the order they are asked: the first refusal is the verdict (tests/unit/test_guards.py pins it)."""


def judge(playbook: Playbook, phase: str, target: str, facts: GuardFacts, now: float) -> Verdict:
    case = GuardCase(playbook, phase, target, facts, now)
    for stage in STAGES:
        verdict = stage(case)
        if verdict is not None:
            return verdict
    return Verdict(Decision.ACCEPTED, f"matched playbook {playbook.name} ({phase})")
