"""Repeat offenders (a ladder's `repeat_offender`): the key as loaded, the rung chosen (pure), the count of
the runs that acted (window edges, what counts), the engine sending the count-th firing straight to the
named rung with the reason, and the report's list; the store parts on both databases (@EVERY_DATABASE)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from remediate.actions.base import ActionRegistry
from remediate.errors import PlaybookError
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.judging.ladder import RungChoice, repeat_offender_choice
from remediate.playbooks.repeat import RepeatOffender, ordinal
from remediate.runs import Decision, LadderState
from remediate.store import RepeatRule, ReportQuery, Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows
from tests.unit.test_ladder import decision, ladder, parsed

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MIN, HOUR, DAY = 60.0, 3600.0, 86400.0
MakeEngine = Callable[..., Engine]
THREE_IN_A_WEEK = {"count": 3, "within": "7d", "then": "cordon"}


def offender_ladder(rule: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """test_ladder's `hot` ladder (cap-power, lock-clocks, cordon; reset_after 6h) with a repeat_offender."""
    return ladder(repeat_offender=THREE_IN_A_WEEK if rule is None else rule, **changes)


def hot(at: float, host: str = "node-a", **kwargs: Any) -> dict[str, Any]:
    """The occurrence of the ladder's alert on `host` that started at `at` (UNIX seconds)."""
    starts = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return alert_payload("GPUTemperatureHigh", labels={"Hostname": host}, starts_at=starts, **kwargs)


def fire(engine: Engine, at: float, host: str = "node-a") -> Any:
    """The decision on the occurrence of `host` that started at `at`, received then."""
    return decision(ingest_alerts(engine, hot(at, host), at=at))


def drain(store: Store, engine: Engine, at: float) -> None:
    Executor(store=store, registry=engine.registry, retry_wait_max=0.01, clock=lambda: at).drain()


def incident(store: Store, engine: Engine, at: float, *, host: str = "node-a") -> Any:
    """One occurrence on `host` at `at`: fired, its run executed, resolved two minutes later."""
    fired = fire(engine, at, host)
    drain(store, engine, at + 1)
    ingest_alerts(engine, hot(at, host, status="resolved"), at=at + 2 * MIN)
    drain(store, engine, at + 2 * MIN + 1)
    return fired


# --------------------------------------------------------------------------- the key, as loaded


def test_a_ladder_loads_its_repeat_offender(registry: ActionRegistry) -> None:
    playbook = parsed(registry, repeat_offender={"count": 2, "within": "7d", "then": "lock-clocks"})

    assert playbook.repeat_offender == RepeatOffender(2, timedelta(days=7), "lock-clocks")


@pytest.mark.parametrize(
    ("rule", "field", "message"),
    [
        ("3 in 7d", "repeat_offender", "must be a mapping"),
        ({**THREE_IN_A_WEEK, "count": 1}, "repeat_offender.count", "a whole number >= 2"),
        ({**THREE_IN_A_WEEK, "count": True}, "repeat_offender.count", "a whole number >= 2"),
        ({"within": "7d", "then": "cordon"}, "repeat_offender.count", "required"),
        ({**THREE_IN_A_WEEK, "within": "a week"}, "repeat_offender.within", "not a duration"),
        ({**THREE_IN_A_WEEK, "within": "0s"}, "repeat_offender.within", "longer than 0s"),
        ({**THREE_IN_A_WEEK, "then": "reboot"}, "repeat_offender.then", "one of cap-power, lock-clocks, cordon"),
        ({**THREE_IN_A_WEEK, "then": "cap-power"}, "repeat_offender.then", "the first rung"),
        ({**THREE_IN_A_WEEK, "per": "gpu"}, "repeat_offender.per", "unknown key"),
    ],
)
def test_a_bad_repeat_offender_is_refused_naming_the_field(
    registry: ActionRegistry, rule: Any, field: str, message: str
) -> None:
    with pytest.raises(PlaybookError) as caught:
        parsed(registry, repeat_offender=rule)

    assert caught.value.field == field
    assert message in str(caught.value)


def test_only_a_ladder_has_a_repeat_offender(registry: ActionRegistry) -> None:
    steps = {"name": "plain", "match": {"alertname": "X"}, "steps": [{"action": "log", "with": {"message": "m"}}]}
    from remediate.playbooks.loading import parse_playbook

    with pytest.raises(PlaybookError) as caught:
        parse_playbook({**steps, "repeat_offender": THREE_IN_A_WEEK}, registry)

    assert caught.value.field == "repeat_offender"
    assert "only a ladder (`escalate`) has a repeat_offender" in str(caught.value)


@pytest.mark.parametrize(("number", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"),
                                              (12, "12th"), (13, "13th"), (21, "21st"), (102, "102nd")])  # fmt: skip
def test_ordinal(number: int, text: str) -> None:
    assert ordinal(number) == text


# --------------------------------------------------------------------------- the rung chosen (pure)


def last(rung: int, occurrence: tuple[str, str] = ("f", "earlier")) -> LadderState:
    return LadderState("hot", "node-a", "node-a", rung, 1, *occurrence, T0, T0 + MIN, "", (), T0)


FIRST = RungChoice(1, "ladder reset: quiet 7h after rung 1 resolved (reset_after 6h)", restart=True)


def test_the_count_th_run_in_the_window_goes_straight_to_the_named_rung(registry: ActionRegistry) -> None:
    playbook = parsed(registry, repeat_offender=THREE_IN_A_WEEK)

    below = repeat_offender_choice(playbook, FIRST, last(1), ("f", "now"), acted=1, target="node-a")
    reached = repeat_offender_choice(playbook, FIRST, last(1), ("f", "now"), acted=2, target="node-a")
    beyond = repeat_offender_choice(playbook, FIRST, None, ("f", "now"), acted=6, target="node-a")

    assert below == FIRST
    assert reached == RungChoice(
        3,
        "3rd remediation of node-a in 7d: straight to rung cordon (repeat_offender: 3 in 7d; the ladder alone said "
        "rung 1: ladder reset: quiet 7h after rung 1 resolved (reset_after 6h))",
        restart=True,
    )
    assert (beyond.rung, beyond.reason.startswith("7th remediation of node-a in 7d")) == (3, True)


def test_a_ladder_already_at_or_above_the_named_rung_stays_where_it_is(registry: ActionRegistry) -> None:
    playbook = parsed(registry, repeat_offender={**THREE_IN_A_WEEK, "then": "lock-clocks"})
    on_top = RungChoice(3, "re-fired 4m after rung 2 resolved (holds_for 30m)")

    assert repeat_offender_choice(playbook, on_top, last(2), ("f", "now"), acted=5, target="node-a") == on_top


def test_the_same_occurrence_re_sent_is_left_to_the_ladder(registry: ActionRegistry) -> None:
    """Its own run is among the counted ones: a re-send must not make it an offence of its own."""
    playbook = parsed(registry, repeat_offender=THREE_IN_A_WEEK)
    same = RungChoice(1, "the same occurrence is still on rung 1")

    kept = repeat_offender_choice(playbook, same, last(1, ("f", "now")), ("f", "now"), acted=2, target="node-a")

    assert kept == same


# --------------------------------------------------------------------------- what counts, on every store


def acted(store: Store, target: str, since: float, playbook: str = "hot") -> int:
    with store.ingest.reader() as reader:
        return reader.acted_runs(playbook, target, since)


@EVERY_DATABASE
def test_only_succeeded_firing_runs_of_the_playbook_on_the_target_count(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(offender_ladder())
    first = incident(store, engine, T0)
    incident(store, engine, T0 + 10 * MIN, host="node-b")
    # Not acted (yet): a run still queued, and one awaiting approval (rung 3's mode).
    fire(engine, T0 + 20 * MIN)  # rung 2 (re-fired within holds_for)
    fire(engine, T0 + 21 * MIN)  # rung 3

    statuses = sorted(r.status for r in rows(store, "runs", phase="firing", target="node-a"))
    assert statuses == ["awaiting_approval", "queued", "succeeded"]
    assert acted(store, "node-a", T0 - DAY) == 1
    assert acted(store, "node-b", T0 - DAY) == 1
    assert acted(store, "node-a", T0 - DAY, playbook="other") == 0
    assert first.decision is Decision.ACCEPTED


@EVERY_DATABASE
def test_dry_run_runs_do_not_count(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(offender_ladder(), mode="dry-run")
    for at in (T0, T0 + 8 * HOUR, T0 + 16 * HOUR):
        incident(store, engine, at)

    assert {r.status for r in rows(store, "runs", phase="firing")} == {"planned"}
    assert acted(store, "node-a", T0 - DAY) == 0


@EVERY_DATABASE
def test_the_window_starts_at_since_inclusive(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(offender_ladder())
    incident(store, engine, T0)  # its run is created at T0

    assert acted(store, "node-a", T0) == 1
    assert acted(store, "node-a", T0 + 0.001) == 0


# --------------------------------------------------------------------------- the engine


@EVERY_DATABASE
def test_the_third_remediation_in_the_window_goes_straight_to_the_named_rung(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(offender_ladder())
    one = incident(store, engine, T0)
    two = incident(store, engine, T0 + 8 * HOUR)  # quiet 8h > reset_after 6h: rung 1 again

    third = fire(engine, T0 + 16 * HOUR)
    elsewhere = fire(engine, T0 + 16 * HOUR, host="node-b")

    runs = {r.id: r for r in rows(store, "runs", phase="firing")}
    assert [runs[d.run_id].rung for d in (one, two, third, elsewhere)] == [1, 1, 3, 1]
    assert third.decision is Decision.ACCEPTED
    assert third.reason == (
        "matched playbook hot (firing); rung 3 of 3 (cordon): 3rd remediation of node-a in 7d: straight to rung "
        "cordon (repeat_offender: 3 in 7d; the ladder alone said rung 1: ladder reset: quiet 7h58m after rung 1 "
        "resolved (reset_after 6h))"
    )
    assert runs[third.run_id].status == "awaiting_approval"  # the cordon rung's own mode: approve
    (ladder_a,) = store.ladders.read(target="node-a")
    assert (ladder_a.rung, ladder_a.run_id) == (3, third.run_id)
    assert ladder_a.climb[-1]["reason"].startswith("3rd remediation of node-a in 7d: straight to rung cordon")

    resent = decision(ingest_alerts(engine, hot(T0 + 16 * HOUR), at=T0 + 16 * HOUR + 5 * MIN))
    assert resent.decision is Decision.DUPLICATE


@EVERY_DATABASE
def test_a_remediation_just_outside_the_window_does_not_count(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(offender_ladder({"count": 2, "within": "1d", "then": "lock-clocks"}))
    incident(store, engine, T0)
    outside = incident(store, engine, T0 + DAY + 1)  # the run at T0 is a day and a second back

    inside = fire(engine, T0 + 40 * HOUR)  # the run at T0 + 1d + 1s is 16h back

    firing = [r.rung for r in rows(store, "runs", phase="firing")]
    assert firing == [1, 1, 2]
    assert "rung 1 of 3 (cap-power): ladder reset" in outside.reason
    assert "2nd remediation of node-a in 1d: straight to rung lock-clocks" in inside.reason


@EVERY_DATABASE
def test_a_repeat_offender_in_a_dry_run_playbook_shows_the_rung_it_would_take(
    store: Store, make_engine: MakeEngine
) -> None:
    """Counted from enforced history; a shadow run records the rung and leaves the ladder where it was."""
    enforced = make_engine(offender_ladder({"count": 2, "within": "7d", "then": "cordon"}))
    incident(store, enforced, T0)
    shadow = make_engine(offender_ladder({"count": 2, "within": "7d", "then": "cordon"}), mode="dry-run")

    planned = fire(shadow, T0 + 8 * HOUR)

    assert "rung 3 of 3 (cordon): 2nd remediation of node-a in 7d" in planned.reason
    assert planned.reason.endswith("; shadow (dry-run): the ladder does not move")
    (ladder_a,) = store.ladders.read(target="node-a")
    assert ladder_a.rung == 1


# --------------------------------------------------------------------------- the report


@EVERY_DATABASE
def test_the_report_lists_the_repeat_offenders_of_each_rule(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(offender_ladder({"count": 3, "within": "7d", "then": "lock-clocks"}))
    for at in (T0, T0 + 8 * HOUR, T0 + 16 * HOUR):  # node-a: 3 runs that acted, the third on lock-clocks
        incident(store, engine, at)
    incident(store, engine, T0 + 30 * MIN, host="node-b")  # node-b: 1
    rule = RepeatRule("hot", 2, 7 * DAY, "lock-clocks")

    report = store.history.report(ReportQuery(since=T0, until=T0 + DAY, repeat_rules=(rule,))).as_json()
    later = store.history.report(ReportQuery(since=T0, until=T0 + 7 * DAY + HOUR, repeat_rules=(rule,)))
    now = store.history.repeat_offenders([rule], until=T0 + DAY)

    assert report["repeat_offenders"] == [
        {
            "target": "node-a",
            "playbook": "hot",
            "runs": 3,
            "window_seconds": 7 * DAY,
            "threshold": 2,
            "then": "lock-clocks",
            "last_run_at": "2026-01-01T16:00:00Z",
        }
    ]
    # A week on, the first run (T0) left the window: two remain, still the count.
    assert [(o["target"], o["runs"]) for o in later.repeat_offenders] == [("node-a", 2)]
    assert [o.as_json() for o in now] == report["repeat_offenders"]
    assert [r.rung for r in rows(store, "runs", phase="firing", target="node-a")] == [1, 1, 2]
    assert store.history.report(ReportQuery(since=T0, until=T0 + DAY)).repeat_offenders == []


def test_the_counts_are_range_seeks_of_the_target_index(store: Store) -> None:
    """SQLite: the engine's count per (playbook, target) and the report's per playbook read a range of
    ix_runs_target, never a scan of runs (every ingest of a playbook with repeat_offender does the first)."""
    from remediate.store import repeat_offenders as counts

    params = {"p_playbook": "hot", "p_target": "node-a", "p_since": T0, "p_until": T0 + DAY, "p_count": 2}
    for statement, seek in (
        (counts._ACTED_ON_TARGET, "ix_runs_target (playbook=? AND target=? AND phase=? AND created_at>?)"),
        (counts._OFFENDERS, "ix_runs_target (playbook=?)"),
    ):
        bound = statement.params({k: v for k, v in params.items() if k in str(statement)})
        sql = str(bound.compile(store.database.engine, compile_kwargs={"literal_binds": True}))
        with store.read() as conn:
            plan = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
        assert any(seek in step for step in plan), plan
        assert not [step for step in plan if step.startswith("SCAN")], plan
