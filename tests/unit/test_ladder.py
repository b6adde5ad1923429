"""Escalation ladders: remediate.judging.ladder.choose_rung (pure), and the engine climbing, holding, resetting and
undoing a ladder on both databases (@EVERY_DATABASE: SQLite, PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from remediate.actions.base import ActionRegistry
from remediate.errors import PlaybookError
from remediate.intake.alerts import parse_notification
from remediate.judging.engine import Engine, IngestResult
from remediate.judging.ladder import choose_rung, climbed, resolved
from remediate.judging.stages import dedupe_key, rung_dedupe_key
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import Playbook
from remediate.runs import Decision, LadderState
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts, notification_payload
from tests.support.stores import EVERY_DATABASE, rows

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MIN = 60.0
MakeEngine = Callable[..., Engine]


def ladder(name: str = "hot", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "match": {"alertname": "GPUTemperatureHigh"},
        "target": "node",
        "reset_after": "6h",
        "escalate": [
            {
                "name": "cap-power",
                "holds_for": "30m",
                "steps": [{"action": "log", "with": {"message": "cap {{ labels.Hostname }}"}}],
                "on_resolved": [{"action": "log", "with": {"message": "uncap"}}],
            },
            {
                "name": "lock-clocks",
                "holds_for": "30m",
                "steps": [{"action": "log", "with": {"message": "lock"}}],
                "on_resolved": [{"action": "log", "with": {"message": "unlock"}}],
            },
            {
                "name": "cordon",
                "holds_for": "1h",
                "mode": "approve",
                "steps": [{"action": "log", "with": {"message": "cordon"}}],
            },
        ],
        "on_resolved": [{"action": "log", "with": {"message": "notify"}}],
        **changes,
    }
    return {k: v for k, v in data.items() if v is not None}


def hot(minute: int = 0, host: str = "node-a", **kwargs: Any) -> dict[str, Any]:
    """One occurrence of the alert: occurrences differ by their startsAt (minute after T0)."""
    starts = f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z"
    return alert_payload("GPUTemperatureHigh", labels={"Hostname": host}, starts_at=starts, **kwargs)


def parsed(registry: ActionRegistry, **changes: Any) -> Playbook:
    return parse_playbook(ladder(**changes), registry)


def state(rung: int, at: float, *, resolved_at: float | None = None, occurrence: tuple[str, str] = ("f", "s")) -> Any:
    return LadderState("hot", "node-a", "node-a", rung, 1, *occurrence, at, resolved_at, "", (), at)


# --------------------------------------------------------------------------- choose_rung (pure)


@pytest.mark.parametrize(
    ("last", "now", "rung", "reason"),
    [
        (None, T0, 1, "first rung"),
        (state(1, T0), T0 + 4 * MIN, 2, "re-fired 4m after rung 1 ran (holds_for 30m)"),
        # holds_for counts from the resolve when there was one.
        (
            state(2, T0, resolved_at=T0 + 50 * MIN),
            T0 + 60 * MIN,
            3,
            "re-fired 10m after rung 2 resolved (holds_for 30m)",
        ),
        (state(2, T0, resolved_at=T0), T0 + 45 * MIN, 2, "rung 2 held (quiet 45m >= holds_for 30m); trying it again"),
        (
            state(3, T0, resolved_at=T0),
            T0 + 7 * 60 * MIN,
            1,
            "ladder reset: quiet 7h after rung 3 resolved (reset_after 6h)",
        ),
        (state(3, T0), T0 + MIN, 3, "re-fired 1m after rung 3 ran (holds_for 1h); already on the last rung"),
    ],
    ids=["first", "climbs", "counts-from-resolve", "held-tried-again", "reset-after-quiet", "last-rung-again"],
)
def test_choose_rung(registry: ActionRegistry, last: Any, now: float, rung: int, reason: str) -> None:
    choice = choose_rung(parsed(registry), last, ("f", "later"), now)

    assert (choice.rung, choice.reason, choice.restart) == (rung, reason, rung == 1)


def test_the_same_occurrence_still_firing_after_holds_for_climbs(registry: ActionRegistry) -> None:
    """AlertManager re-sends an alert that never resolves (repeat_interval): the GPU stayed hot after the cap."""
    playbook = parsed(registry)

    before = choose_rung(playbook, state(1, T0), ("f", "s"), T0 + 29 * MIN)
    after = choose_rung(playbook, state(1, T0), ("f", "s"), T0 + 31 * MIN)

    assert (before.rung, before.reason) == (1, "the same occurrence is still on rung 1")
    assert (after.rung, after.reason) == (2, "still firing 31m after rung 1 ran (holds_for 30m)")


def test_a_reset_by_a_person_starts_over_and_says_who(registry: ActionRegistry) -> None:
    reset = LadderState("hot", "node-a", "node-a", 0, 1, "f", "s", T0, None, "reset by alice: fixed", (), T0)

    choice = choose_rung(parsed(registry), reset, ("f", "later"), T0 + MIN)

    assert (choice.rung, choice.reason) == (1, "first rung (the ladder was reset: reset by alice: fixed)")


def test_climbed_keeps_the_climb_since_the_last_reset(registry: ActionRegistry) -> None:
    playbook = parsed(registry)
    first = climbed(None, playbook="hot", guard_key="g", target="t", choice=choose_rung(playbook, None, ("f", "1"), T0),
                    run_id=7, occurrence=("f", "1"), now=T0)  # fmt: skip
    second_choice = choose_rung(playbook, resolved(first, T0 + MIN), ("f", "2"), T0 + 2 * MIN)
    second = climbed(first, playbook="hot", guard_key="g", target="t", choice=second_choice, run_id=9,
                     occurrence=("f", "2"), now=T0 + 2 * MIN)  # fmt: skip
    again = climbed(second, playbook="hot", guard_key="g", target="t",
                    choice=choose_rung(playbook, second, ("f", "3"), T0 + 9 * 60 * MIN), run_id=11,
                    occurrence=("f", "3"), now=T0 + 9 * 60 * MIN)  # fmt: skip

    assert [(c["rung"], c["run"]) for c in second.climb] == [(1, 7), (2, 9)]
    assert (second.rung, second.resolved_at, second.starts_at) == (2, None, "2")
    assert [(c["rung"], c["run"]) for c in again.climb] == [(1, 11)]


# --------------------------------------------------------------------------- the engine, on every store


def decision(result: IngestResult) -> Any:
    (only,) = result.decisions
    return only


@EVERY_DATABASE
def test_an_alert_that_keeps_re_firing_climbs_rung_by_rung(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(ladder())

    first = decision(ingest_alerts(engine, hot(0), at=T0))
    ingest_alerts(engine, hot(0, status="resolved"), at=T0 + 2 * MIN)
    second = decision(ingest_alerts(engine, hot(5), at=T0 + 5 * MIN))
    ingest_alerts(engine, hot(5, status="resolved"), at=T0 + 6 * MIN)
    third = decision(ingest_alerts(engine, hot(10), at=T0 + 10 * MIN))

    assert [d.decision for d in (first, second, third)] == [Decision.ACCEPTED] * 3
    assert first.reason == "matched playbook hot (firing); rung 1 of 3 (cap-power): first rung"
    assert (
        second.reason
        == "matched playbook hot (firing); rung 2 of 3 (lock-clocks): re-fired 3m after rung 1 resolved (holds_for 30m)"
    )
    assert third.reason.endswith("rung 3 of 3 (cordon): re-fired 4m after rung 2 resolved (holds_for 30m)")
    runs = {r.id: r for r in rows(store, "runs", phase="firing")}
    assert [runs[d.run_id].rung for d in (first, second, third)] == [1, 2, 3]
    # The top rung's mode: approve (the others the playbook's enforce).
    assert [runs[d.run_id].status for d in (first, second, third)] == ["queued", "queued", "awaiting_approval"]
    steps = rows(store, "steps", run_id=second.run_id)
    assert [json_message(s) for s in steps] == ["lock"]
    (state_now,) = store.ladders.read(target="node-a")
    assert (state_now.rung, state_now.run_id, state_now.resolved_at) == (3, third.run_id, None)
    assert [c["rung"] for c in state_now.climb] == [1, 2, 3]


def json_message(step: Any) -> str:
    return str(json.loads(step.params)["message"])


@EVERY_DATABASE
def test_a_ladder_that_stays_quiet_resets_to_rung_one(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(ladder())
    ingest_alerts(engine, hot(0), at=T0)
    ingest_alerts(engine, hot(0, status="resolved"), at=T0 + MIN)
    ingest_alerts(engine, hot(2), at=T0 + 2 * MIN)  # rung 2
    ingest_alerts(engine, hot(2, status="resolved"), at=T0 + 3 * MIN)

    held = decision(ingest_alerts(engine, hot(60), at=T0 + 60 * MIN))
    ingest_alerts(engine, hot(60, status="resolved"), at=T0 + 61 * MIN)
    reset = decision(ingest_alerts(engine, hot(8 * 60), at=T0 + 8 * 60 * MIN))

    assert "rung 2 of 3 (lock-clocks): rung 2 held (quiet 57m >= holds_for 30m); trying it again" in held.reason
    assert "rung 1 of 3 (cap-power): ladder reset: quiet 6h59m after rung 2 resolved (reset_after 6h)" in reset.reason
    (state_now,) = store.ladders.read()
    assert [c["rung"] for c in state_now.climb] == [1]


@EVERY_DATABASE
def test_a_re_send_of_the_same_occurrence_is_a_duplicate_until_holds_for_then_climbs(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(ladder())
    first = decision(ingest_alerts(engine, hot(0), at=T0))

    resent = decision(ingest_alerts(engine, hot(0), at=T0 + 10 * MIN))
    still_hot = decision(ingest_alerts(engine, hot(0), at=T0 + 31 * MIN))
    again = decision(ingest_alerts(engine, hot(0), at=T0 + 32 * MIN))

    assert resent.decision is Decision.DUPLICATE
    assert f"already recorded as run {first.run_id}" in resent.reason
    assert still_hot.decision is Decision.ACCEPTED
    assert "rung 2 of 3 (lock-clocks): still firing 31m after rung 1 ran (holds_for 30m)" in still_hot.reason
    assert again.decision is Decision.DUPLICATE
    keys = {r.id: r.dedupe_key for r in rows(store, "runs")}
    alert = engine.evaluate_all([parse_alert(engine, hot(0))])[0][1]
    assert keys[first.run_id] == dedupe_key(alert, "hot", "firing")
    assert keys[still_hot.run_id] == rung_dedupe_key(alert, "hot", 2) != keys[first.run_id]


def parse_alert(engine: Engine, payload: dict[str, Any]) -> Any:
    return parse_notification(notification_payload(payload)).alerts[0]


@EVERY_DATABASE
def test_resolve_undoes_the_rungs_that_ran_in_reverse_then_the_playbooks_on_resolved(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(ladder())
    ingest_alerts(engine, hot(0), at=T0)
    ingest_alerts(engine, hot(0), at=T0 + 31 * MIN)  # still hot: rung 2 for the same occurrence

    undo = decision(ingest_alerts(engine, hot(0, status="resolved"), at=T0 + 40 * MIN))

    assert undo.decision is Decision.ACCEPTED
    assert undo.reason.endswith("; undoes rungs 2, 1")
    assert [json_message(s) for s in rows(store, "steps", run_id=undo.run_id)] == ["unlock", "uncap", "notify"]
    (run,) = rows(store, "runs", id=undo.run_id)
    firing = {r.rung: r.id for r in rows(store, "runs", phase="firing")}
    assert run.after_run_id == firing[2]
    (state_now,) = store.ladders.read()
    assert (state_now.rung, state_now.resolved_at) == (2, T0 + 40 * MIN)


@EVERY_DATABASE
def test_resolve_cancels_a_rung_awaiting_approval_and_undoes_the_rungs_that_acted(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(ladder())
    ingest_alerts(engine, hot(0), at=T0)
    ingest_alerts(engine, hot(0), at=T0 + 31 * MIN)
    waiting = decision(ingest_alerts(engine, hot(0), at=T0 + 62 * MIN))  # rung 3: approve

    undo = decision(ingest_alerts(engine, hot(0, status="resolved"), at=T0 + 70 * MIN))

    (cancelled,) = rows(store, "runs", id=waiting.run_id)
    assert cancelled.status == "cancelled"
    assert [json_message(s) for s in rows(store, "steps", run_id=undo.run_id)] == ["unlock", "uncap", "notify"]


@EVERY_DATABASE
def test_a_rung_has_its_own_cooldown_and_attempt_cap(store: Store, make_engine: MakeEngine) -> None:
    rungs = ladder()["escalate"]
    rungs[0] = {**rungs[0], "max_attempts": 1}
    rungs[1] = {**rungs[1], "cooldown": "10m"}
    engine = make_engine(ladder(escalate=rungs, cooldown="1m"))
    ingest_alerts(engine, hot(0), at=T0)
    ingest_alerts(engine, hot(0, status="resolved"), at=T0 + MIN)

    cooling = decision(ingest_alerts(engine, hot(2), at=T0 + 2 * MIN))
    climbing = decision(ingest_alerts(engine, hot(12), at=T0 + 12 * MIN))
    ingest_alerts(engine, hot(12, status="resolved"), at=T0 + 13 * MIN)
    capped = decision(ingest_alerts(engine, hot(60), at=T0 + 10 * 60 * MIN))  # reset: rung 1 again

    assert cooling.decision is Decision.COOLDOWN
    assert "cooldown 10m" in cooling.reason and "rung 2 of 3 (lock-clocks)" in cooling.reason
    assert climbing.decision is Decision.ACCEPTED
    assert capped.decision is Decision.ATTEMPT_CAP
    assert "1 runs of rung 1 for node-a in the last 24h reached its max_attempts 1" in capped.reason


@EVERY_DATABASE
def test_a_render_error_in_a_rung_not_chosen_does_not_reject_the_run(store: Store, make_engine: MakeEngine) -> None:
    rungs = ladder()["escalate"]
    rungs[1] = {**rungs[1], "steps": [{"action": "log", "with": {"message": "{{ labels.missing }}"}}]}
    engine = make_engine(ladder(escalate=rungs))

    first = decision(ingest_alerts(engine, hot(0), at=T0))
    second = decision(ingest_alerts(engine, hot(1), at=T0 + MIN))

    assert first.decision is Decision.ACCEPTED
    assert second.decision is Decision.REJECTED
    assert "escalate[1].steps[0]" in second.reason


@EVERY_DATABASE
def test_preview_says_which_rung_would_run_and_writes_nothing(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(ladder())
    ingest_alerts(engine, hot(0), at=T0)
    (judged,) = engine.preview(parse_notification(notification_payload(hot(3))), now=T0 + 3 * MIN)

    assert (judged.rung, judged.rung_reason) == (2, "re-fired 3m after rung 1 ran (holds_for 30m)")
    (state_now,) = store.ladders.read()
    assert state_now.rung == 1


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"cooldown": "30m"}, "cooldown", "cooldown 30m >= holds_for 30m of rung 1 (cap-power)"),
        ({"reset_after": "1h"}, "reset_after", "reset_after 1h must be longer than the longest holds_for (1h)"),
        ({"max_attempts": 2}, "max_attempts", "max_attempts 2 is below the 3 rungs"),
        ({"steps": [{"action": "log", "with": {"message": "x"}}]}, "escalate", "either `steps` or `escalate`"),
    ],
)
def test_a_ladder_that_can_never_advance_is_refused(
    registry: ActionRegistry, changes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(ladder(**changes), registry)

    assert caught.value.field == field
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("rung_changes", "field", "message"),
    [
        ({"holds_for": None}, "escalate[1].holds_for", "required"),
        ({"holds_for": "0s"}, "escalate[1].holds_for", "longer than 0s"),
        ({"cooldown": "45m"}, "escalate[1].cooldown", "cooldown 45m >= holds_for 30m of rung 1"),
        ({"name": "cap-power"}, "escalate[1].name", "used twice"),
        ({"steps": []}, "escalate[1].steps", "at least one step"),
        ({"mode": "sometimes"}, "escalate[1].mode", "must be one of"),
    ],
)
def test_a_bad_rung_is_refused_with_its_field_path(
    registry: ActionRegistry, rung_changes: dict[str, Any], field: str, message: str
) -> None:
    rungs = ladder()["escalate"]
    rungs[1] = {k: v for k, v in {**rungs[1], **rung_changes}.items() if v is not None}

    with pytest.raises(PlaybookError) as caught:
        parse_playbook(ladder(escalate=rungs), registry)

    assert caught.value.field == field
    assert message in str(caught.value)


def test_a_one_rung_ladder_loads_with_a_warning(registry: ActionRegistry) -> None:
    playbook = parse_playbook(ladder(escalate=ladder()["escalate"][:1]), registry)

    assert playbook.is_ladder
    assert playbook.warnings() == [
        "escalate: a one-rung ladder never climbs (write `steps` unless more rungs are coming)"
    ]
