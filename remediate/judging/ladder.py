"""Escalation ladders: which rung of a playbook's `escalate:` a firing alert gets now. Pure logic.

A ladder is per (playbook, guard key). Its state (remediate.runs.LadderState, the `ladders` table)
says which rung ran last, for which alert occurrence, when, and when that occurrence resolved. The
engine reads it inside the ingest transaction (the guard locks serialise one (playbook, guard key)),
asks `choose_rung`, and writes the new state with the run (`climbed`) in the same transaction.

The rules (docs/playbooks.md, "Escalation ladders"):
- no state (never climbed, or reset): rung 1;
- the same occurrence as the last rung's (AlertManager re-sends an alert that never resolved every
  repeat_interval) and not resolved: once the alert has kept firing for the rung's `holds_for` since
  the rung ran, the next rung; before that the same rung (its run exists: a duplicate);
- a new occurrence: within `holds_for` of the last rung (counted from its resolve, else from its run)
  the next rung (or the last one again); after `reset_after` of quiet rung 1; in between the rung held,
  so it is tried again.
- an alert named in the playbook's `start_at` goes at least to the rung named there (`start_at_choice`): the
  later signal of an incident (a loss spike) skips the gentle rung its earlier signal (a gradient norm spike)
  gets;
- a repeat offender (the playbook's `repeat_offender`: its target's runs acted `count` times within
  `within`, this one included): a new occurrence goes straight to the named rung when the rules above
  chose a gentler one (`repeat_offender_choice`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from remediate.config.durations import format_duration
from remediate.playbooks.model import Playbook
from remediate.playbooks.repeat import ordinal
from remediate.runs import LadderState, RunStatus, Standing

MAX_CLIMB = 50
"""Entries kept in a ladder's climb (the rungs run since its last reset): a ladder that keeps
re-running its last rung must not grow its row without bound."""


@dataclass(frozen=True)
class RungChoice:
    rung: int
    """1-based."""
    reason: str
    restart: bool = False
    """The ladder starts over here (never climbed, reset by a person, or quiet for reset_after)."""


def _ago(seconds: float) -> str:
    return format_duration(max(0, round(seconds)))


def choose_rung(playbook: Playbook, state: LadderState | None, occurrence: tuple[str, str], now: float) -> RungChoice:
    """The rung a firing `occurrence` (fingerprint, startsAt) of `playbook` gets, given where its ladder stands."""
    top = len(playbook.rungs)
    if state is None or state.rung < 1:
        why = "first rung" if state is None else f"first rung (the ladder was reset: {state.reason})"
        return RungChoice(1, why, restart=True)
    current = min(state.rung, top)  # the playbook may have lost rungs since
    held = playbook.rungs[current - 1].holds_for
    holds = format_duration(held)
    same = (state.fingerprint, state.starts_at) == occurrence
    if same and state.resolved_at is None:
        firing_for = now - state.climbed_at
        if firing_for >= held.total_seconds() and current < top:
            return RungChoice(
                current + 1,
                f"still firing {_ago(firing_for)} after rung {current} ran (holds_for {holds})",
            )
        # The same rung: its run of this occurrence exists, so the engine reports a duplicate.
        return RungChoice(current, f"the same occurrence is still on rung {current}")
    start = state.resolved_at if state.resolved_at is not None else state.climbed_at
    elapsed = now - start
    since = f"after rung {current} resolved" if state.resolved_at is not None else f"after rung {current} ran"
    if elapsed < held.total_seconds():
        if current < top:
            return RungChoice(current + 1, f"re-fired {_ago(elapsed)} {since} (holds_for {holds})")
        return RungChoice(current, f"re-fired {_ago(elapsed)} {since} (holds_for {holds}); already on the last rung")
    if elapsed >= playbook.reset_after.total_seconds():
        reset = format_duration(playbook.reset_after)
        return RungChoice(1, f"ladder reset: quiet {_ago(elapsed)} {since} (reset_after {reset})", restart=True)
    return RungChoice(current, f"rung {current} held (quiet {_ago(elapsed)} >= holds_for {holds}); trying it again")


def start_at_choice(playbook: Playbook, choice: RungChoice, alertname: str) -> RungChoice:
    """`choice`, or the rung the playbook's `start_at` names for `alertname` when the ladder alone chose a lower
    one (never down)."""
    floor = playbook.start_rung(alertname)
    if floor is None or choice.rung >= floor[0]:
        return choice
    return replace(
        choice,
        rung=floor[0],
        reason=f"{alertname} starts on rung {floor[1]} (start_at; the ladder alone said rung {choice.rung}: "
        f"{choice.reason})",
    )


def repeat_offender_choice(
    playbook: Playbook,
    choice: RungChoice,
    state: LadderState | None,
    occurrence: tuple[str, str],
    *,
    acted: int,
    target: str,
) -> RungChoice:
    """`choice`, or the playbook's `repeat_offender` rung when this firing is the target's `count`th (or
    later) within `within`: `acted` is the runs of the playbook on `target` that acted in that window.

    Only for a new occurrence: the same occurrence re-sent (or still firing) is judged by the ladder
    alone, so a re-send never counts the occurrence's own run as an earlier offence."""
    rule = playbook.repeat_offender
    if rule is None or acted + 1 < rule.count:
        return choice
    if state is not None and state.rung >= 1 and (state.fingerprint, state.starts_at) == occurrence:
        return choice
    rung = next(index for index, r in enumerate(playbook.rungs, start=1) if r.name == rule.then)
    if choice.rung >= rung:
        return choice
    within = format_duration(rule.within)
    return replace(
        choice,
        rung=rung,
        reason=f"{ordinal(acted + 1)} remediation of {target} in {within}: straight to rung {rule.then} "
        f"(repeat_offender: {rule.count} in {within}; the ladder alone said rung {choice.rung}: {choice.reason})",
    )


def climbed(
    state: LadderState | None,
    *,
    playbook: str,
    guard_key: str,
    target: str,
    choice: RungChoice,
    run_id: int,
    occurrence: tuple[str, str],
    now: float,
) -> LadderState:
    """The ladder's state after a run of `choice.rung` was accepted."""
    previous: tuple[Any, ...] = () if choice.restart or state is None else state.climb
    step = {"rung": choice.rung, "run": run_id, "at": now, "reason": choice.reason}
    return LadderState(
        playbook=playbook,
        guard_key=guard_key,
        target=target,
        rung=choice.rung,
        run_id=run_id,
        fingerprint=occurrence[0],
        starts_at=occurrence[1],
        climbed_at=now,
        resolved_at=None,
        reason=choice.reason,
        climb=(*previous, step)[-MAX_CLIMB:],
        updated_at=now,
    )


def resolved(state: LadderState, now: float) -> LadderState:
    """The ladder once the occurrence of its last rung was reported resolved: `holds_for` counts from now."""
    return replace(state, resolved_at=now, updated_at=now)


PENDING_RUN = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)
"""The statuses of a rung's run that has not ended yet: the rung is not in force yet."""


def standing(state: LadderState, run_status: str | None) -> Standing:
    """Where a ladder stands, for the operator's pages: `reset` (by a person), `resolved` (the occurrence of
    its last rung ended: undone where the rung has on_resolved), `in_force` (that rung's run succeeded),
    `pending` (its run has not ended), `not_in_force` (its run failed, was cancelled or rejected: the
    ladder moved on, but what the rung does did not happen, e.g. a cordon the breaker refused) or
    `unknown` (its run is no longer in the history)."""
    if state.rung < 1:
        return Standing.RESET
    if state.resolved_at is not None:
        return Standing.RESOLVED
    if run_status is None:
        return Standing.UNKNOWN
    if run_status == RunStatus.SUCCEEDED:
        return Standing.IN_FORCE
    if run_status in PENDING_RUN:
        return Standing.PENDING
    return Standing.NOT_IN_FORCE
