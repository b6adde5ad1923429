"""remediate.judging.engine on the SQLite store and (@EVERY_DATABASE) PostgreSQL: ingest in one transaction, guards,
runs, steps, preview."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.errors import PayloadError, RunStateError, StoreConflict, UnknownRunError
from remediate.intake.alerts import parse_notification
from remediate.judging.engine import INGEST_ATTEMPTS, Engine, IngestResult
from remediate.runs import Decision
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import alert_payload, ingest_alerts, notification_payload
from tests.support.stores import EVERY_DATABASE, table_counts
from tests.support.stores import rows as table_rows

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0

MakeEngine = Callable[..., Engine]


def playbook(name: str = "xid", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "match": {"alertname": "GpuXidError"},
        "target": "node",
        "steps": [
            {"action": "log", "with": {"message": "GPU {{ labels.gpu }} on {{ labels.Hostname }}"}},
            {"action": "log", "name": "second", "with": {"message": "again", "level": "warning"}, "retries": 4},
        ],
        "on_resolved": [{"action": "log", "with": {"message": "{{ alertname }} resolved on {{ labels.Hostname }}"}}],
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def rows(store: Store, table: sa.Table, **equal: Any) -> list[Any]:
    return table_rows(store, table.name, **equal)


def decisions_of(result: IngestResult) -> list[tuple[str | None, str]]:
    return [(d.playbook, d.decision.value) for d in result.decisions]


def xid(host: str = "node-a", gpu: str = "3", **kwargs: Any) -> dict[str, Any]:
    return alert_payload("GpuXidError", labels={"Hostname": host, "gpu": gpu, "severity": "critical"}, **kwargs)


# --------------------------------------------------------------------------- what ingest stores


@EVERY_DATABASE
def test_ingest_stores_the_raw_notification_alerts_decisions_runs_and_steps(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook())
    payload = notification_payload(xid(), alert_payload("DiskFull", labels={"Hostname": "node-b"}))
    body = json.dumps(payload).encode()

    result = engine.ingest_body(body, received_at=T0)

    (notification,) = rows(store, t.notifications)
    assert json.loads(notification.raw) == payload
    assert (notification.received_at, notification.status, notification.alert_count) == (T0, "firing", 2)
    assert notification.receiver == "remediate"
    alert_rows = rows(store, t.alerts)
    assert [a.alertname for a in alert_rows] == ["GpuXidError", "DiskFull"]
    assert json.loads(alert_rows[0].labels)["gpu"] == "3"
    assert alert_rows[0].starts_at == "2026-01-01T00:00:00Z"
    assert alert_rows[0].ends_at is None
    accepted, unmatched = rows(store, t.decisions)
    assert (accepted.decision, accepted.status, accepted.playbook, accepted.target) == (
        "accepted",
        "queued",
        "xid",
        "node-a",
    )
    assert (unmatched.decision, unmatched.status, unmatched.playbook, unmatched.run_id) == (
        "unmatched",
        "unmatched",
        None,
        None,
    )
    assert unmatched.reason == "no playbook matches this alert"
    (run,) = rows(store, t.runs)
    assert accepted.run_id == run.id
    assert (run.playbook, run.alertname, run.target, run.phase, run.mode, run.status) == (
        "xid",
        "GpuXidError",
        "node-a",
        "firing",
        "enforce",
        "queued",
    )
    assert run.alert_id == alert_rows[0].id
    assert run.created_at == T0
    assert run.after_run_id is None
    steps = rows(store, t.steps)
    assert [(s.idx, s.name, s.action, s.status, s.retries) for s in steps] == [
        (0, "1-log", "log", "pending", 2),
        (1, "second", "log", "pending", 4),
    ]
    assert json.loads(steps[0].params) == {"message": "GPU 3 on node-a", "level": "info"}
    assert steps[0].timeout == 300.0
    assert result.notification_id == notification.id
    assert result.alerts == 2
    assert result.alert_statuses == {"firing": 2}
    assert result.runs_queued == 1
    assert result.decision_counts() == {"accepted": 1, "unmatched": 1}
    assert result.summary()["runs"] == [run.id]


@EVERY_DATABASE
def test_a_step_timeout_comes_from_the_step_or_the_engine_default(store: Store, make_engine: MakeEngine) -> None:
    steps = [{"action": "log", "with": {"message": "a"}, "timeout": "5s"}, {"action": "log", "with": {"message": "b"}}]
    engine = make_engine(playbook(steps=steps), step_timeout=42.0)

    ingest_alerts(engine, xid(), at=T0)

    assert [s.timeout for s in rows(store, t.steps)] == [5.0, 42.0]


@EVERY_DATABASE
def test_a_notification_is_stored_whole_or_not_at_all(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    with store.write() as conn:  # the last insert of ingest (decisions) fails inside the database
        for statement in REFUSE_DECISIONS[conn.dialect.name]:
            conn.exec_driver_sql(statement)
    before = table_counts(store)

    with pytest.raises(sa.exc.DBAPIError, match="disk on fire"):
        ingest_alerts(engine, xid(), alert_payload("DiskFull"), at=T0)

    assert table_counts(store) == before
    assert before["notifications"] == before["runs"] == 0


REFUSE_DECISIONS = {
    "sqlite": [
        "CREATE TRIGGER refuse_decisions BEFORE INSERT ON decisions BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_decisions BEFORE INSERT ON decisions FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}
"""A trigger that makes the database refuse the insert of a decision, in each database's dialect."""


@EVERY_DATABASE
@pytest.mark.parametrize("conflicts", [1, INGEST_ATTEMPTS])
def test_a_run_another_writer_stored_first_makes_ingest_judge_again_a_few_times(
    store: Store, make_engine: MakeEngine, monkeypatch: Any, conflicts: int
) -> None:
    """StoreConflict (a replica committed the same dedupe key first) rolls the transaction back; the engine
    tries the whole notification again, INGEST_ATTEMPTS times at most, then lets the conflict through (503)."""
    engine = make_engine(playbook())
    real_writer = store.ingest.writer
    tries: list[int] = []

    def conflict(*_: Any) -> list[int]:
        raise StoreConflict("another writer stored a run for the same alert occurrence first")

    @contextmanager
    def conflicting_writer() -> Iterator[Any]:
        with real_writer() as writer:
            tries.append(1)
            if len(tries) <= conflicts:
                monkeypatch.setattr(writer, "insert_runs", conflict)
            yield writer

    monkeypatch.setattr(store.ingest, "writer", conflicting_writer)

    if conflicts == INGEST_ATTEMPTS:
        with pytest.raises(StoreConflict):
            ingest_alerts(engine, xid(), at=T0)
        assert (len(tries), table_counts(store)["notifications"]) == (INGEST_ATTEMPTS, 0)
        return
    result = ingest_alerts(engine, xid(), at=T0)
    assert [d.decision for d in result.decisions] == [Decision.ACCEPTED]
    assert len(tries) == 2
    assert (table_counts(store)["notifications"], table_counts(store)["runs"]) == (1, 1)


@EVERY_DATABASE
def test_an_invalid_body_is_refused_before_anything_is_stored(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    before = table_counts(store)

    with pytest.raises(PayloadError):
        engine.ingest_body(b'{"version": "4", "status": "firing", "alerts": []}', received_at=T0)
    with pytest.raises(PayloadError):
        engine.ingest_body(b"not json", received_at=T0)

    assert table_counts(store) == before


@EVERY_DATABASE
def test_on_queued_is_called_only_when_a_run_was_queued(make_engine: MakeEngine) -> None:
    calls: list[int] = []
    engine = make_engine(playbook(), on_queued=lambda: calls.append(1))

    ingest_alerts(engine, alert_payload("DiskFull"), at=T0)
    assert calls == []
    ingest_alerts(engine, xid(), at=T0)
    assert calls == [1]


@EVERY_DATABASE
def test_every_matching_playbook_gets_its_own_decision_and_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook("first"), playbook("second", match={"alertname": ["Other", "GpuXidError"]}))

    result = ingest_alerts(engine, xid(), at=T0)

    assert decisions_of(result) == [("first", "accepted"), ("second", "accepted")]
    assert [r.playbook for r in rows(store, t.runs)] == ["first", "second"]


# --------------------------------------------------------------------------- dedupe


@EVERY_DATABASE
def test_the_same_payload_twice_makes_one_run_and_a_duplicate_decision(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    first = ingest_alerts(engine, xid(), at=T0)

    second = ingest_alerts(engine, xid(), at=T0 + 30)

    (run,) = rows(store, t.runs)
    assert decisions_of(first) == [("xid", "accepted")]
    assert decisions_of(second) == [("xid", "duplicate")]
    assert second.decisions[0].run_id is None
    assert f"already recorded as run {run.id}" in second.decisions[0].reason
    assert len(rows(store, t.notifications)) == 2
    assert len(rows(store, t.alerts)) == 2
    assert [d.decision for d in rows(store, t.decisions)] == ["accepted", "duplicate"]


@EVERY_DATABASE
def test_the_same_alert_twice_in_one_notification_makes_one_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())

    result = ingest_alerts(engine, xid(), xid(), at=T0)

    assert decisions_of(result) == [("xid", "accepted"), ("xid", "duplicate")]
    assert result.decisions[1].reason == "the same alert occurrence appears earlier in this notification"
    assert len(rows(store, t.runs)) == 1
    assert len(rows(store, t.alerts)) == 2


@EVERY_DATABASE
def test_a_new_occurrence_of_the_same_alert_is_not_a_duplicate(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    ingest_alerts(engine, xid(), at=T0)

    result = ingest_alerts(engine, xid(starts_at="2026-01-01T02:00:00Z"), at=T0 + 2 * HOUR)

    assert decisions_of(result) == [("xid", "accepted")]
    assert len(rows(store, t.runs)) == 2


# --------------------------------------------------------------------------- cooldown and attempt cap


@EVERY_DATABASE
def test_cooldown_applies_per_playbook_and_target(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook("xid", cooldown="10m"), playbook("other", cooldown="10m"))
    ingest_alerts(engine, xid(gpu="0"), at=T0)

    same_target = ingest_alerts(engine, xid(gpu="1"), at=T0 + 60)
    other_target = ingest_alerts(engine, xid(host="node-b", gpu="1"), at=T0 + 60)
    after = ingest_alerts(engine, xid(gpu="2"), at=T0 + 600)

    assert decisions_of(same_target) == [("xid", "cooldown"), ("other", "cooldown")]
    assert "cooldown 10m, next allowed in 9m" in same_target.decisions[0].reason
    assert decisions_of(other_target) == [("xid", "accepted"), ("other", "accepted")]
    assert decisions_of(after) == [("xid", "accepted"), ("other", "accepted")]
    assert len(rows(store, t.runs)) == 6


@EVERY_DATABASE
def test_cooldown_is_separate_for_each_playbook(make_engine: MakeEngine) -> None:
    engine = make_engine(playbook("xid", cooldown="10m"), playbook("fast", cooldown="0s"))
    ingest_alerts(engine, xid(gpu="0"), at=T0)

    result = ingest_alerts(engine, xid(gpu="1"), at=T0 + 60)

    assert decisions_of(result) == [("xid", "cooldown"), ("fast", "accepted")]


@EVERY_DATABASE
def test_two_alerts_of_one_target_in_one_notification_respect_the_cooldown(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(cooldown="10m"))

    result = ingest_alerts(engine, xid(gpu="0"), xid(gpu="1"), xid("node-b"), at=T0)

    assert [d.decision for d in result.decisions] == [Decision.ACCEPTED, Decision.COOLDOWN, Decision.ACCEPTED]
    assert [r.target for r in rows(store, t.runs)] == ["node-a", "node-b"]


@EVERY_DATABASE
def test_a_cooldown_longer_than_a_day_is_enforced(make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(cooldown="48h"))
    ingest_alerts(engine, xid(gpu="0"), at=T0)

    during = ingest_alerts(engine, xid(gpu="1"), at=T0 + 30 * HOUR)
    after = ingest_alerts(engine, xid(gpu="2"), at=T0 + 48 * HOUR)

    assert decisions_of(during) == [("xid", "cooldown")]
    assert "next allowed in 18h" in during.decisions[0].reason
    assert decisions_of(after) == [("xid", "accepted")]


@EVERY_DATABASE
def test_max_attempts_caps_firing_runs_per_target_over_24h(make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(max_attempts=3, cooldown="1h"))
    verdicts = [ingest_alerts(engine, xid(gpu=str(i)), at=T0 + i * 2 * HOUR).decisions[0].decision for i in range(4)]
    other_node = ingest_alerts(engine, xid("node-b", gpu="9"), at=T0 + 7 * HOUR)
    at_24h = ingest_alerts(engine, xid(gpu="10"), at=T0 + 24 * HOUR)
    after_24h = ingest_alerts(engine, xid(gpu="11"), at=T0 + 24 * HOUR + 1)

    assert verdicts == [Decision.ACCEPTED] * 3 + [Decision.ATTEMPT_CAP]
    assert decisions_of(other_node) == [("xid", "accepted")]
    assert decisions_of(at_24h) == [("xid", "attempt_cap")]
    assert at_24h.decisions[0].reason == "3 runs for node-a in the last 24h reached max_attempts 3"
    assert decisions_of(after_24h) == [("xid", "accepted")]


@EVERY_DATABASE
def test_max_attempts_applies_inside_one_notification(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(max_attempts=2))

    result = ingest_alerts(engine, *(xid(gpu=str(i)) for i in range(4)), at=T0)

    assert [d.decision.value for d in result.decisions] == ["accepted", "accepted", "attempt_cap", "attempt_cap"]
    assert len(rows(store, t.runs)) == 2


@EVERY_DATABASE
def test_rejected_runs_do_not_count_for_cooldown_or_attempts(make_engine: MakeEngine) -> None:
    steps = [{"action": "log", "with": {"message": "{{ labels.needed }}"}}]
    engine = make_engine(playbook(steps=steps, cooldown="1h", max_attempts=1))
    rejected = ingest_alerts(engine, xid(gpu="0"), at=T0)

    fine = ingest_alerts(
        engine, alert_payload("GpuXidError", labels={"Hostname": "node-a", "needed": "yes"}), at=T0 + 1
    )

    assert decisions_of(rejected) == [("xid", "rejected")]
    assert decisions_of(fine) == [("xid", "accepted")]


# --------------------------------------------------------------------------- pause, modes, approval


@EVERY_DATABASE
def test_while_paused_decisions_are_paused_with_the_reason_and_no_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    store.pause.set(True, by="alice", reason="rolling upgrade", now=T0 - 10)

    result = ingest_alerts(engine, xid(), at=T0)

    assert decisions_of(result) == [("xid", "paused")]
    assert result.decisions[0].reason == "remediation is paused by alice: rolling upgrade"
    assert rows(store, t.runs) == []
    (decision,) = rows(store, t.decisions)
    assert (decision.decision, decision.status, decision.run_id) == ("paused", "paused", None)

    store.pause.set(False, by="alice", reason="done", now=T0 + 5)
    assert decisions_of(ingest_alerts(engine, xid(), at=T0 + 10)) == [("xid", "accepted")]


@EVERY_DATABASE
def test_approve_mode_waits_for_approval_then_queues(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(mode="approve"))
    result = ingest_alerts(engine, xid(), at=T0)
    run_id = result.decisions[0].run_id
    assert run_id is not None
    (run,) = rows(store, t.runs)
    assert (run.status, run.mode) == ("awaiting_approval", "approve")
    assert rows(store, t.decisions)[0].status == "awaiting_approval"
    assert store.queue.claim("w", T0) is None

    store.queue.approve(run_id, by="bob", now=T0 + 60)

    (run,) = rows(store, t.runs)
    assert (run.status, run.approved_by, run.approved_at) == ("queued", "bob", T0 + 60)
    assert rows(store, t.decisions)[0].status == "queued"
    with pytest.raises(RunStateError, match=f"run {run_id} is queued, not awaiting approval"):
        store.queue.approve(run_id, by="bob", now=T0 + 61)
    with pytest.raises(UnknownRunError):
        store.queue.approve(run_id + 100, by="bob", now=T0 + 61)
    claimed = store.queue.claim("w", T0 + 62)
    assert claimed is not None
    assert claimed.id == run_id


@EVERY_DATABASE
def test_server_dry_run_mode_makes_every_run_dry_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook("enforced"), playbook("approved", mode="approve"), mode="dry-run")

    result = ingest_alerts(engine, xid(), at=T0)

    assert decisions_of(result) == [("enforced", "accepted"), ("approved", "accepted")]
    assert [(r.mode, r.status) for r in rows(store, t.runs)] == [("dry-run", "queued"), ("dry-run", "queued")]


@EVERY_DATABASE
def test_a_dry_run_playbook_queues_a_dry_run_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(mode="dry-run"))

    ingest_alerts(engine, xid(), at=T0)

    assert [(r.mode, r.status) for r in rows(store, t.runs)] == [("dry-run", "queued")]


# --------------------------------------------------------------------------- resolved alerts


@EVERY_DATABASE
def test_a_resolved_alert_runs_only_the_on_resolved_steps_after_the_firing_run(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook())
    firing = ingest_alerts(engine, xid(), at=T0)

    resolved = ingest_alerts(engine, xid(status="resolved"), at=T0 + 300)

    assert decisions_of(resolved) == [("xid", "accepted")]
    assert resolved.decisions[0].reason == "matched playbook xid (resolved)"
    first_run, resolved_run = rows(store, t.runs)
    assert first_run.id == firing.decisions[0].run_id
    assert (resolved_run.phase, resolved_run.status, resolved_run.after_run_id) == ("resolved", "queued", first_run.id)
    steps = rows(store, t.steps, run_id=resolved_run.id)
    assert [json.loads(s.params)["message"] for s in steps] == ["GpuXidError resolved on node-a"]
    alert_row = rows(store, t.alerts, id=resolved_run.alert_id)[0]
    assert alert_row.status == "resolved"
    assert alert_row.ends_at == "2026-01-01T01:00:00Z"


ABSENT_LABEL = [{"action": "log", "with": {"message": "{{ labels.absent }}"}}]


@EVERY_DATABASE
@pytest.mark.parametrize(
    ("changes", "before", "resolved", "decision", "runs"),
    [
        ({}, [], {}, "no_firing_run", 0),
        ({}, [{}], {"starts_at": "2026-01-01T00:30:00Z"}, "no_firing_run", 1),
        ({"on_resolved": None}, [{}], {}, "nothing_on_resolved", 1),
        ({"steps": ABSENT_LABEL}, [{}], {}, "no_firing_run", 1),
        ({}, [{}, {"status": "resolved"}], {}, "duplicate", 2),
        ({"cooldown": "1h", "max_attempts": 1}, [{}], {}, "accepted", 2),
    ],
    ids=[
        "without-a-firing-run",
        "of-another-occurrence",
        "of-a-playbook-without-on-resolved",
        "whose-firing-run-was-rejected",
        "resent-is-a-duplicate",
        "not-held-back-by-cooldown-or-cap",
    ],
)
def test_what_a_resolved_alert_decides(
    store: Store, make_engine: MakeEngine, changes: dict, before: list[dict], resolved: dict, decision: str, runs: int
) -> None:
    engine = make_engine(playbook(**changes))
    for i, alert in enumerate(before):
        ingest_alerts(engine, xid(**alert), at=T0 + 60 * i)

    result = ingest_alerts(engine, xid(status="resolved", **resolved), at=T0 + 60 * len(before))

    assert decisions_of(result) == [("xid", decision)]
    assert len(rows(store, t.runs)) == runs


@EVERY_DATABASE
def test_resolving_while_the_firing_run_awaits_approval_cancels_the_firing_run(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(mode="approve"))
    firing_id = ingest_alerts(engine, xid(), at=T0).decisions[0].run_id

    resolved = ingest_alerts(engine, xid(status="resolved"), at=T0 + 60)

    (firing_run,) = rows(store, t.runs)  # nothing ran while firing, so on_resolved has nothing to undo
    assert firing_run.id == firing_id
    assert (firing_run.status, firing_run.finished_at) == ("cancelled", T0 + 60)
    assert firing_run.error == "the alert resolved before the run was approved"
    assert rows(store, t.decisions, run_id=firing_id)[0].status == "cancelled"
    assert decisions_of(resolved) == [("xid", "no_firing_run")]
    assert f"firing run {firing_id} was still awaiting approval" in resolved.decisions[0].reason
    with pytest.raises(RunStateError, match="is cancelled"):
        store.queue.approve(firing_id, by="bob", now=T0 + 120)
    again = ingest_alerts(engine, xid(status="resolved"), at=T0 + 120)
    assert decisions_of(again) == [("xid", "no_firing_run")]
    assert f"firing run {firing_id} was cancelled" in again.decisions[0].reason


@EVERY_DATABASE
def test_resolving_cancels_an_awaiting_firing_run_even_without_on_resolved_steps(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(mode="approve", on_resolved=None))
    firing_id = ingest_alerts(engine, xid(), at=T0).decisions[0].run_id

    resolved = ingest_alerts(engine, xid(status="resolved"), at=T0 + 60)

    assert decisions_of(resolved) == [("xid", "nothing_on_resolved")]
    (firing_run,) = rows(store, t.runs)
    assert (firing_run.id, firing_run.status) == (firing_id, "cancelled")


@EVERY_DATABASE
def test_resolving_after_approval_does_not_cancel_the_firing_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(mode="approve"))
    firing_id = ingest_alerts(engine, xid(), at=T0).decisions[0].run_id
    store.queue.approve(firing_id, by="bob", now=T0 + 10)

    ingest_alerts(engine, xid(status="resolved"), at=T0 + 60)

    firing_run, resolved_run = rows(store, t.runs)
    assert firing_run.status == "queued"
    assert (resolved_run.status, resolved_run.after_run_id) == ("queued", firing_id)


# --------------------------------------------------------------------------- rejected params


@EVERY_DATABASE
def test_a_template_on_a_missing_label_rejects_the_run_naming_step_and_label(
    store: Store, make_engine: MakeEngine
) -> None:
    steps = [
        {"action": "log", "with": {"message": "fine"}},
        {"action": "log", "name": "needs-uuid", "with": {"message": "GPU {{ labels.UUID }}"}},
    ]
    engine = make_engine(playbook(steps=steps))

    result = ingest_alerts(engine, xid(), at=T0)

    (decision,) = result.decisions
    assert decision.decision is Decision.REJECTED
    assert decision.reason.startswith("steps[1] needs-uuid (log): with.message:")
    assert "UUID" in decision.reason
    (run,) = rows(store, t.runs)
    assert (run.status, run.error, run.finished_at) == ("rejected", decision.reason, T0)
    assert rows(store, t.steps) == []
    assert rows(store, t.decisions)[0].status == "rejected"
    assert result.runs_queued == 0
    assert store.queue.claim("w", T0) is None


@EVERY_DATABASE
def test_a_rendered_value_that_does_not_fit_the_schema_rejects_the_run(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(steps=[{"action": "log", "with": {"message": "x", "level": "{{ labels.gpu }}"}}]))

    result = ingest_alerts(engine, xid(), at=T0)

    assert result.decisions[0].decision is Decision.REJECTED
    assert "parameter 'level' must be one of" in result.decisions[0].reason


@EVERY_DATABASE
def test_a_paused_decision_wins_over_a_render_error(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(steps=[{"action": "log", "with": {"message": "{{ labels.absent }}"}}]))
    store.pause.set(True, by="", reason="", now=T0)

    result = ingest_alerts(engine, xid(), at=T0)

    assert decisions_of(result) == [("xid", "paused")]
    assert rows(store, t.runs) == []


# --------------------------------------------------------------------------- preview (dry-run)


@EVERY_DATABASE
def test_preview_writes_nothing_and_gives_the_verdicts_ingest_would(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(
        playbook("xid", cooldown="10m", max_attempts=5),
        playbook("strict", match={"alertname": "GpuXidError", "labels": ['gpu="7"']}),
        playbook("broken", steps=[{"action": "log", "with": {"message": "{{ labels.absent }}"}}]),
    )
    ingest_alerts(engine, xid(gpu="0"), at=T0)
    payload = notification_payload(
        xid(gpu="0"),  # duplicate for xid and broken
        xid(gpu="1"),  # cooldown for xid
        xid("node-b", gpu="7"),  # accepted by all three, broken rejected
        xid(gpu="0", status="resolved"),
        alert_payload("Unrelated"),
    )
    before = table_counts(store)

    preview = engine.preview(parse_notification(payload), now=T0 + 60)

    assert table_counts(store) == before
    result = engine.ingest_body(json.dumps(payload).encode(), received_at=T0 + 60)
    expected = [(d.playbook, d.decision, d.reason) for d in result.decisions]
    assert [(j.playbook_name, j.verdict.decision, j.verdict.reason) for j in preview] == expected
    assert {d for _, d, _ in expected} >= {
        Decision.DUPLICATE,
        Decision.COOLDOWN,
        Decision.ACCEPTED,
        Decision.REJECTED,
        Decision.UNMATCHED,
    }


@EVERY_DATABASE
def test_preview_without_a_store_judges_against_an_empty_history(registry: Any, make_engine: MakeEngine) -> None:
    with_store = make_engine(playbook(cooldown="10m"))
    engine = Engine(store=None, playbooks=with_store.playbooks, registry=registry)
    notification = parse_notification(notification_payload(xid(gpu="0"), xid(gpu="1")))

    judged = engine.preview(notification, now=T0)

    assert [j.verdict.decision for j in judged] == [Decision.ACCEPTED, Decision.COOLDOWN]
    with pytest.raises(RuntimeError, match="only preview"):
        engine.ingest(notification, raw="{}", received_at=T0)


@EVERY_DATABASE
def test_preview_reads_the_pause(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    store.pause.set(True, by="carol", reason="", now=T0)

    (judged,) = engine.preview(parse_notification(notification_payload(xid())), now=T0)

    assert judged.verdict.decision is Decision.PAUSED
    assert judged.verdict.reason == "remediation is paused by carol"


# --------------------------------------------------------------------------- size


@EVERY_DATABASE
def test_a_notification_of_2000_alerts_stores_every_alert(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(match={"alertname": "GpuXidError", "labels": ['gpu!="unmatched"']}))
    alerts = [xid(host=f"node-{i // 8}", gpu=str(i % 8)) for i in range(1999)]
    alerts.append(xid(gpu="unmatched"))

    result = ingest_alerts(engine, *alerts, at=T0)

    counts = table_counts(store)
    assert counts["notifications"] == 1
    assert counts["alerts"] == 2000
    assert counts["decisions"] == 2000
    assert counts["runs"] == 1999
    assert counts["steps"] == 2 * 1999
    assert result.alerts == 2000
    assert result.decision_counts() == {"accepted": 1999, "unmatched": 1}
    fingerprints = {r.fingerprint for r in rows(store, t.alerts)}
    assert fingerprints == {a["fingerprint"] for a in alerts}


def test_guard_by_gives_each_gpu_of_a_node_its_own_cooldown(tmp_path, registry) -> None:
    from remediate.judging.engine import Engine
    from remediate.playbooks.loading import parse_playbook
    from remediate.playbooks.model import PlaybookSet
    from remediate.store import Store
    from tests.conftest import alert_payload, notification_payload

    playbook = parse_playbook(
        {
            "name": "per-gpu",
            "match": {"alertname": "GPUTemperatureHigh"},
            "target": "node",
            "guard_by": ["UUID"],
            "cooldown": "15m",
            "steps": [{"action": "log", "with": {"message": "{{ labels.UUID }}"}}],
        },
        registry,
    )
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    engine = Engine(store=store, playbooks=PlaybookSet([playbook]), registry=registry)

    def fire(uuid: str, starts_at: str) -> str:
        alert = alert_payload("GPUTemperatureHigh", labels={"Hostname": "node-a", "UUID": uuid}, starts_at=starts_at)
        result = engine.ingest_body(json.dumps(notification_payload(alert)).encode(), received_at=1_000_000.0)
        return result.decisions[0].decision.value

    assert fire("GPU-a", "2026-01-01T00:00:00Z") == "accepted"
    assert fire("GPU-b", "2026-01-01T00:00:01Z") == "accepted"  # another GPU of the same node
    assert fire("GPU-a", "2026-01-01T00:00:02Z") == "cooldown"  # the same GPU again
    store.close()


def test_guard_by_must_name_labels(registry) -> None:
    from remediate.errors import PlaybookError
    from remediate.playbooks.loading import parse_playbook

    with pytest.raises(PlaybookError, match="guard_by"):
        parse_playbook(
            {
                "name": "x",
                "match": {"alertname": "A"},
                "guard_by": ["../x"],
                "steps": [{"action": "log", "with": {"message": "m"}}],
            },
            registry,
        )


# --------------------------------------------------------------------------- order of firing and resolved

S2 = "2026-01-01T02:00:00Z"  # a newer occurrence of the same alert (same fingerprint, later startsAt)


@EVERY_DATABASE
def test_a_firing_alert_arriving_after_its_own_resolved_starts_nothing(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    early = ingest_alerts(engine, xid(status="resolved"), at=T0)

    late = ingest_alerts(engine, xid(), at=T0 + 5)

    assert decisions_of(early) == [("xid", "no_firing_run")]
    assert decisions_of(late) == [("xid", "already_resolved")]
    assert "already reported resolved" in late.decisions[0].reason
    assert rows(store, t.runs) == []
    # A new occurrence of the alert (another startsAt) is handled as usual.
    assert decisions_of(ingest_alerts(engine, xid(starts_at=S2), at=T0 + 10)) == [("xid", "accepted")]


@pytest.mark.parametrize("resolved_first", [True, False])
@EVERY_DATABASE
def test_firing_and_resolved_of_one_occurrence_in_one_notification_start_nothing_in_either_order(
    store: Store, make_engine: MakeEngine, resolved_first: bool
) -> None:
    engine = make_engine(playbook())
    pair = [xid(), xid(status="resolved")]
    if resolved_first:
        pair.reverse()

    result = ingest_alerts(engine, *pair, at=T0)

    decisions = [d.decision.value for d in result.decisions]  # in the notification's order
    assert decisions == (
        ["no_firing_run", "already_resolved"] if resolved_first else ["already_resolved", "no_firing_run"]
    )
    assert rows(store, t.runs) == []


@EVERY_DATABASE
def test_a_late_resolved_of_an_older_occurrence_does_not_undo_while_a_newer_one_is_active(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook())
    s1 = ingest_alerts(engine, xid(), at=T0).decisions[0].run_id
    s2 = ingest_alerts(engine, xid(starts_at=S2), at=T0 + 2 * HOUR).decisions[0].run_id

    late = ingest_alerts(engine, xid(status="resolved"), at=T0 + 2 * HOUR + 5)

    assert decisions_of(late) == [("xid", "superseded")]
    assert f"firing run {s2}" in late.decisions[0].reason
    assert [r.id for r in rows(store, t.runs)] == [s1, s2]
    # The newer occurrence's own resolved undoes, once.
    newest = ingest_alerts(engine, xid(status="resolved", starts_at=S2), at=T0 + 3 * HOUR)
    assert decisions_of(newest) == [("xid", "accepted")]
    assert rows(store, t.runs)[-1].after_run_id == s2


@EVERY_DATABASE
def test_a_late_resolved_undoes_when_the_newer_occurrence_is_over_or_never_acted(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(), playbook("held", mode="approve"))
    ingest_alerts(engine, xid(), at=T0)
    store.queue.approve(2, by="alice", now=T0 + 1)  # run 2: "held" for S1, approved, so it acts
    ingest_alerts(engine, xid(starts_at=S2), at=T0 + 2 * HOUR)  # xid acts; held waits for approval
    ingest_alerts(engine, xid(status="resolved", starts_at=S2), at=T0 + 2 * HOUR + 1)

    late = ingest_alerts(engine, xid(status="resolved"), at=T0 + 2 * HOUR + 5)

    # xid: S2 resolved already; held: S2's run never acted (cancelled while awaiting approval).
    assert decisions_of(late) == [("xid", "accepted"), ("held", "accepted")]


@EVERY_DATABASE
def test_a_newer_occurrence_accepted_in_the_same_notification_also_supersedes(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook())
    ingest_alerts(engine, xid(), at=T0)

    result = ingest_alerts(engine, xid(status="resolved"), xid(starts_at=S2), at=T0 + HOUR)

    assert decisions_of(result) == [("xid", "superseded"), ("xid", "accepted")]
    assert "(accepted in this notification) is active" in result.decisions[0].reason


@EVERY_DATABASE
def test_preview_sees_the_order_cases_as_ingest_does(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    ingest_alerts(engine, xid(), at=T0)
    payload = notification_payload(
        xid(status="resolved"),
        xid(starts_at=S2),
        xid("node-b", status="resolved"),
        xid("node-b"),
    )

    preview = engine.preview(parse_notification(payload), now=T0 + HOUR)
    result = engine.ingest_body(json.dumps(payload).encode(), received_at=T0 + HOUR)

    expected = [(d.playbook, d.decision, d.reason) for d in result.decisions]
    assert [(j.playbook_name, j.verdict.decision, j.verdict.reason) for j in preview] == expected
    assert [d for _, d, _ in expected] == [
        Decision.SUPERSEDED,
        Decision.ACCEPTED,
        Decision.NO_FIRING_RUN,
        Decision.ALREADY_RESOLVED,
    ]


# --------------------------------------------------------------------------- what the playbooks read


def test_the_engine_says_whether_a_playbook_reads_the_nodes_in_any_phase_or_rung(make_engine: MakeEngine) -> None:
    """A step the breaker caps (cordon, taint, drain; slurm.drain for Slurm's) anywhere in a playbook: the
    executor starts that scheduler's node cache with itself (remediate.serve.launcher)."""
    log_step = {"action": "log", "with": {"message": "hot"}}
    assert not make_engine(playbook()).reads_nodes()
    assert not make_engine(playbook(steps=[log_step, {"action": "k8s.uncordon"}])).reads_nodes()  # only undoes
    assert not make_engine(playbook(steps=[{"action": "slurm.drain"}])).reads_nodes()  # Slurm's nodes, not the cache
    assert make_engine(playbook(steps=[{"action": "slurm.drain"}])).reads_nodes("slurm")
    slurm_undo = playbook(steps=[log_step, {"action": "slurm.resume"}, {"action": "slurm.requeue"}])
    assert not make_engine(slurm_undo).reads_nodes("slurm")  # read their node fresh: no counts, no cache
    assert not make_engine(playbook("cordons", steps=[{"action": "k8s.cordon"}])).reads_nodes("slurm")
    assert make_engine(playbook(), playbook("cordons", steps=[{"action": "k8s.cordon"}])).reads_nodes()
    ladder = playbook(
        "ladder",
        steps=None,
        on_resolved=None,
        escalate=[
            {"name": "gentle", "holds_for": "30m", "steps": [log_step]},
            {"name": "out", "holds_for": "30m", "steps": [log_step], "on_resolved": [{"action": "k8s.drain"}]},
        ],
    )
    assert make_engine(ladder).reads_nodes()
