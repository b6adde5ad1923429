"""remediate.judging.guards.judge: the pure decision for one (alert, playbook) pair, and its order."""

from __future__ import annotations

from typing import Any

import pytest

from remediate.actions.base import ActionRegistry
from remediate.breaker import BreakerState
from remediate.judging.guards import STAGES, GuardCase, GuardFacts, judge
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import Playbook
from remediate.runs import Decision

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def playbook(registry: ActionRegistry, **changes: Any) -> Playbook:
    data: dict[str, Any] = {
        "name": "pb",
        "match": {"alertname": "GpuXidError"},
        "cooldown": "10m",
        "max_attempts": 3,
        "steps": [{"action": "log", "with": {"message": "fire"}}],
        "on_resolved": [{"action": "log", "with": {"message": "resolved"}}],
    }
    data.update(changes)
    return parse_playbook({k: v for k, v in data.items() if v is not None}, registry)


@pytest.fixture
def pb(registry: ActionRegistry) -> Playbook:
    return playbook(registry)


def test_a_firing_alert_with_no_history_is_accepted(pb: Playbook) -> None:
    verdict = judge(pb, "firing", "node-a", GuardFacts(), NOW)

    assert verdict.decision is Decision.ACCEPTED
    assert verdict.accepted
    assert verdict.reason == "matched playbook pb (firing)"


def test_a_duplicate_is_a_duplicate_even_while_paused(pb: Playbook) -> None:
    facts = GuardFacts(duplicate_of=17, paused=True, last_run_at=NOW - 1, runs_in_window=99)

    verdict = judge(pb, "firing", "node-a", facts, NOW)

    assert verdict.decision is Decision.DUPLICATE
    assert "already recorded as run 17" in verdict.reason


def test_a_duplicate_earlier_in_the_same_notification_says_so(pb: Playbook) -> None:
    verdict = judge(pb, "firing", "node-a", GuardFacts(duplicate_of=0), NOW)

    assert verdict.decision is Decision.DUPLICATE
    assert verdict.reason == "the same alert occurrence appears earlier in this notification"


def test_paused_comes_before_cooldown_and_attempt_cap(pb: Playbook) -> None:
    facts = GuardFacts(
        paused=True, paused_by="alice", paused_reason="maintenance", last_run_at=NOW - 1, runs_in_window=9
    )

    verdict = judge(pb, "firing", "node-a", facts, NOW)

    assert verdict.decision is Decision.PAUSED
    assert verdict.reason == "remediation is paused by alice: maintenance"


def test_the_paused_reason_leaves_out_what_is_unknown(pb: Playbook) -> None:
    assert judge(pb, "firing", "n", GuardFacts(paused=True), NOW).reason == "remediation is paused"
    assert (
        judge(pb, "firing", "n", GuardFacts(paused=True, paused_by="bob"), NOW).reason == "remediation is paused by bob"
    )


def test_cooldown_refuses_a_run_and_says_how_long_is_left(pb: Playbook) -> None:
    facts = GuardFacts(last_run_at=NOW - 100, runs_in_window=1)

    verdict = judge(pb, "firing", "node-a", facts, NOW)

    assert verdict.decision is Decision.COOLDOWN
    assert verdict.reason == ("last run for node-a at 2025-12-31T23:58:20Z; cooldown 10m, next allowed in 8m20s")


def test_the_remaining_cooldown_rounds_up_to_the_next_second(pb: Playbook) -> None:
    verdict = judge(pb, "firing", "node-a", GuardFacts(last_run_at=NOW - 599.5), NOW)

    assert verdict.reason.endswith("next allowed in 1s")


def test_cooldown_is_over_exactly_when_it_has_elapsed(pb: Playbook) -> None:
    assert judge(pb, "firing", "n", GuardFacts(last_run_at=NOW - 600), NOW).accepted
    assert not judge(pb, "firing", "n", GuardFacts(last_run_at=NOW - 599.9), NOW).accepted


def test_no_cooldown_means_back_to_back_runs_are_fine(registry: ActionRegistry) -> None:
    pb = playbook(registry, cooldown="0s")

    assert judge(pb, "firing", "n", GuardFacts(last_run_at=NOW), NOW).accepted


def test_cooldown_comes_before_the_attempt_cap(pb: Playbook) -> None:
    verdict = judge(pb, "firing", "n", GuardFacts(last_run_at=NOW - 1, runs_in_window=3), NOW)

    assert verdict.decision is Decision.COOLDOWN


def test_the_attempt_cap_refuses_once_max_attempts_runs_happened(pb: Playbook) -> None:
    assert judge(pb, "firing", "node-a", GuardFacts(last_run_at=NOW - 3600, runs_in_window=2), NOW).accepted

    verdict = judge(pb, "firing", "node-a", GuardFacts(last_run_at=NOW - 3600, runs_in_window=3), NOW)

    assert verdict.decision is Decision.ATTEMPT_CAP
    assert verdict.reason == "3 runs for node-a in the last 24h reached max_attempts 3"


def test_without_max_attempts_there_is_no_cap(registry: ActionRegistry) -> None:
    pb = playbook(registry, max_attempts=None, cooldown="0s")

    assert judge(pb, "firing", "n", GuardFacts(last_run_at=NOW - 1, runs_in_window=10_000), NOW).accepted


def test_a_resolved_alert_needs_on_resolved_steps(registry: ActionRegistry) -> None:
    pb = playbook(registry, on_resolved=None)

    verdict = judge(pb, "resolved", "n", GuardFacts(firing_run=4), NOW)

    assert verdict.decision is Decision.NOTHING_ON_RESOLVED
    assert verdict.reason == "the playbook has no on_resolved steps"


def test_a_resolved_alert_needs_a_firing_run(pb: Playbook) -> None:
    verdict = judge(pb, "resolved", "n", GuardFacts(), NOW)

    assert verdict.decision is Decision.NO_FIRING_RUN
    assert verdict.reason == "no run was accepted for this alert while it fired"


def test_a_resolved_alert_with_a_firing_run_ignores_cooldown_and_cap(pb: Playbook) -> None:
    facts = GuardFacts(firing_run=4, last_run_at=NOW - 1, runs_in_window=50)

    verdict = judge(pb, "resolved", "n", facts, NOW)

    assert verdict.decision is Decision.ACCEPTED
    assert verdict.reason == "matched playbook pb (resolved)"


def test_a_resolved_alert_is_paused_too(pb: Playbook) -> None:
    assert judge(pb, "resolved", "n", GuardFacts(firing_run=4, paused=True), NOW).decision is Decision.PAUSED


def test_a_resolved_duplicate_is_a_duplicate_before_anything_else(registry: ActionRegistry) -> None:
    pb = playbook(registry, on_resolved=None)

    assert judge(pb, "resolved", "n", GuardFacts(duplicate_of=3), NOW).decision is Decision.DUPLICATE


def test_missing_firing_run_is_reported_before_pause(pb: Playbook) -> None:
    assert judge(pb, "resolved", "n", GuardFacts(paused=True), NOW).decision is Decision.NO_FIRING_RUN


def test_a_firing_alert_already_reported_resolved_is_not_started_even_with_no_history(pb: Playbook) -> None:
    verdict = judge(pb, "firing", "node-a", GuardFacts(already_resolved=True), NOW)

    assert verdict.decision is Decision.ALREADY_RESOLVED
    assert "already reported resolved" in verdict.reason


def test_already_resolved_comes_after_duplicate_and_before_pause_and_cooldown(pb: Playbook) -> None:
    assert judge(pb, "firing", "n", GuardFacts(duplicate_of=4, already_resolved=True), NOW).decision is (
        Decision.DUPLICATE
    )
    facts = GuardFacts(already_resolved=True, paused=True, last_run_at=NOW - 1, runs_in_window=9)
    assert judge(pb, "firing", "n", facts, NOW).decision is Decision.ALREADY_RESOLVED


def test_a_resolved_alert_does_not_undo_what_a_newer_active_occurrence_needs(pb: Playbook) -> None:
    facts = GuardFacts(firing_run=3, firing_run_status="succeeded", superseded_by=9, paused=True)

    verdict = judge(pb, "resolved", "node-a", facts, NOW)

    assert verdict.decision is Decision.SUPERSEDED
    assert "newer occurrence of this alert on node-a (firing run 9)" in verdict.reason


def test_superseded_only_matters_when_there_is_something_to_undo(registry: ActionRegistry, pb: Playbook) -> None:
    no_undo = playbook(registry, on_resolved=None)
    facts = GuardFacts(firing_run=3, firing_run_status="succeeded", superseded_by=9)

    assert judge(no_undo, "resolved", "n", facts, NOW).decision is Decision.NOTHING_ON_RESOLVED
    assert judge(pb, "resolved", "n", GuardFacts(superseded_by=9), NOW).decision is Decision.NO_FIRING_RUN


# --------------------------------------------------------------------------- escalation ladders: guards per rung


def ladder(registry: ActionRegistry) -> Playbook:
    def rung(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "holds_for": "30m", "steps": [{"action": "log", "with": {"message": name}}], **extra}

    return playbook(
        registry,
        steps=None,
        cooldown="1m",
        escalate=[rung("one", max_attempts=2), rung("two", cooldown="5m"), rung("three")],
    )


def test_a_rung_uses_its_own_cooldown_else_the_playbooks(registry: ActionRegistry) -> None:
    pb = ladder(registry)
    two_minutes_ago = GuardFacts(last_run_at=NOW - 120)

    first = judge(pb, "firing", "node-a", GuardFacts(last_run_at=NOW - 120, rung=1), NOW)
    second = judge(pb, "firing", "node-a", GuardFacts(last_run_at=NOW - 120, rung=2), NOW)
    without_rung = judge(pb, "firing", "node-a", two_minutes_ago, NOW)

    assert first.accepted and without_rung.accepted
    assert second.decision is Decision.COOLDOWN
    assert "cooldown 5m, next allowed in 3m" in second.reason


def test_a_rungs_max_attempts_counts_that_rungs_runs_and_the_playbooks_every_rung(registry: ActionRegistry) -> None:
    pb = ladder(registry)

    capped = judge(pb, "firing", "node-a", GuardFacts(rung=1, rung_runs_in_window=2, runs_in_window=2), NOW)
    other_rung = judge(pb, "firing", "node-a", GuardFacts(rung=3, rung_runs_in_window=2, runs_in_window=2), NOW)
    all_rungs = judge(pb, "firing", "node-a", GuardFacts(rung=3, rung_runs_in_window=0, runs_in_window=3), NOW)

    assert capped.decision is Decision.ATTEMPT_CAP
    assert capped.reason == "2 runs of rung 1 for node-a in the last 24h reached its max_attempts 2"
    assert other_rung.accepted
    assert all_rungs.decision is Decision.ATTEMPT_CAP
    assert all_rungs.reason == "3 runs for node-a in the last 24h reached max_attempts 3"


def test_a_ladder_with_undo_only_in_a_rung_still_undoes(registry: ActionRegistry) -> None:
    pb = ladder(registry)
    undo_in_rung = playbook(
        registry,
        steps=None,
        on_resolved=None,
        cooldown="1m",
        escalate=[
            {"name": "one", "holds_for": "30m", "steps": [{"action": "log", "with": {"message": "x"}}],
             "on_resolved": [{"action": "log", "with": {"message": "undo"}}]},
            {"name": "two", "holds_for": "30m", "steps": [{"action": "log", "with": {"message": "y"}}]},
        ],
    )  # fmt: skip
    facts = GuardFacts(firing_run=4, firing_run_status="succeeded")

    assert judge(undo_in_rung, "resolved", "node-a", facts, NOW).accepted
    assert judge(pb, "resolved", "node-a", facts, NOW).accepted  # the playbook's own on_resolved


# --------------------------------------------------------------------------- the guards as named stages


def test_each_guard_stage_goes_on_for_an_alert_nothing_holds_back(pb: Playbook) -> None:
    """A stage says nothing (None: go on) unless its own reason to refuse holds; then `judge` accepts."""
    for phase, facts in (("firing", GuardFacts()), ("resolved", GuardFacts(firing_run=4, firing_run_status="done"))):
        case = GuardCase(pb, phase, "node-a", facts, NOW)
        assert [stage(case) for stage in STAGES] == [None] * len(STAGES)
        assert judge(pb, phase, "node-a", facts, NOW).accepted


def test_every_stage_answers_for_its_own_reason_and_the_first_refusal_is_the_verdict(pb: Playbook) -> None:
    """Every refusal at once: each stage, asked alone, refuses with its own decision; judge gives the first."""
    facts = GuardFacts(
        duplicate_of=17,
        already_resolved=True,
        paused=True,
        gated=True,
        breaker=BreakerState(open=True, tripped_at=NOW - 5, reason="manual"),
        last_run_at=NOW - 1,
        runs_in_window=99,
    )
    case = GuardCase(pb, "firing", "node-a", facts, NOW)
    decisions = {stage.__name__: verdict.decision for stage in STAGES if (verdict := stage(case)) is not None}
    assert decisions == {
        "dedupe": Decision.DUPLICATE,
        "already_resolved": Decision.ALREADY_RESOLVED,
        "pause": Decision.PAUSED,
        "breaker": Decision.BREAKER_OPEN,
        "cooldown": Decision.COOLDOWN,
        "attempt_cap": Decision.ATTEMPT_CAP,
    }
    assert judge(pb, "firing", "node-a", facts, NOW).decision is Decision.DUPLICATE
