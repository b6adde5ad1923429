"""The store's contract: one set of behaviours, run on both databases (tests.support.stores.DATABASES).

What the engine, the executor and the announcer rely on of `Store` (ingest, claims, steps, leases,
recovery, approval, ladders), pinned on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.breaker import BreakerLimits, BreakerOpen, CircuitBreaker
from remediate.errors import ClaimLostError, RunStateError, StoreConflict, UnknownRunError
from remediate.judging.engine import Engine
from remediate.runs import (
    AttemptOutcome,
    RunEnd,
    RunLease,
    RunningClaim,
    RunStatus,
    RunWrite,
    StepEnd,
    StepStatus,
)
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows, start_attempt

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]


def playbook(name: str = "xid", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "match": {"alertname": "GpuXidError"},
        "target": "node",
        "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
        "on_resolved": [{"action": "log", "with": {"message": "undo"}}],
        **changes,
    }
    return data


def xid(host: str = "node-a", **kwargs: Any) -> dict[str, Any]:
    return alert_payload("GpuXidError", labels={"Hostname": host}, **kwargs)


def queue(engine: Engine, host: str = "node-a", at: float = T0) -> int:
    (decision,) = ingest_alerts(engine, xid(host), at=at).decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


# --------------------------------------------------------------------------- ingest


@EVERY_DATABASE
def test_ingest_records_the_notification_its_alerts_runs_steps_and_decisions(
    store: Store, make_engine: MakeEngine
) -> None:
    result = ingest_alerts(make_engine(playbook()), xid(), alert_payload("DiskFull"), at=T0)

    (notification,) = rows(store, "notifications")
    assert (notification.id, notification.alert_count, notification.status) == (result.notification_id, 2, "firing")
    assert [(a.alertname, a.notification_id) for a in rows(store, "alerts")] == [
        ("GpuXidError", notification.id),
        ("DiskFull", notification.id),
    ]
    (run,) = rows(store, "runs")
    assert (run.status, run.phase, run.target, run.claim_generation, run.rerunnable) == (
        "queued", "firing", "node-a", 0, False,
    )  # fmt: skip
    assert [(s.idx, s.status, s.attempts, s.always) for s in rows(store, "steps", run_id=run.id)] == [
        (0, "pending", 0, False),
        (1, "pending", 0, False),
    ]
    assert [(d.decision, d.status, d.run_id) for d in rows(store, "decisions")] == [
        ("accepted", "queued", run.id),
        ("unmatched", "unmatched", None),
    ]


@EVERY_DATABASE
def test_a_run_with_a_dedupe_key_taken_is_refused_and_the_writer_block_leaves_nothing(store: Store) -> None:
    with store.ingest.writer() as w:
        notification = w.insert_notification(
            received_at=T0, receiver="r", status="firing", group_key="g", alert_count=1, raw="{}"
        )
        (alert,) = w.insert_alerts([alert_row(notification)])
        w.insert_runs([run_row(alert, "key-1")])
    before = {table: len(rows(store, table)) for table in ("notifications", "alerts", "runs")}

    with pytest.raises(StoreConflict), store.ingest.writer() as w:
        w.insert_notification(received_at=T0, receiver="r", status="firing", group_key="g", alert_count=1, raw="{}")
        w.insert_runs([run_row(alert, "key-2"), run_row(alert, "key-1")])

    assert {table: len(rows(store, table)) for table in before} == before
    with pytest.raises(ZeroDivisionError), store.ingest.writer() as w:  # any error: the block is one transaction
        w.insert_runs([run_row(alert, "key-3")])
        raise ZeroDivisionError
    assert [r.dedupe_key for r in rows(store, "runs")] == ["key-1"]


def alert_row(notification_id: int, fingerprint: str = "fp", status: str = "firing") -> dict[str, Any]:
    return {
        "notification_id": notification_id, "fingerprint": fingerprint, "alertname": "A", "status": status,
        "starts_at": "2026-01-01T00:00:00Z", "ends_at": None, "labels": "{}", "annotations": "{}",
        "generator_url": "",
    }  # fmt: skip


def run_row(alert_id: int, key: str, **changes: Any) -> dict[str, Any]:
    return {
        "dedupe_key": key, "playbook": "pb", "alertname": "A", "target": "n", "guard_key": "n", "phase": "firing",
        "mode": "enforce", "status": "queued", "alert_id": alert_id, "created_at": T0, "updated_at": T0, **changes,
    }  # fmt: skip


@EVERY_DATABASE
def test_the_guards_see_duplicates_cooldown_and_the_attempt_cap(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(cooldown="10m", max_attempts=2))
    ingest_alerts(engine, xid(), at=T0)

    again = ingest_alerts(engine, xid(), at=T0 + 1)
    cooled = ingest_alerts(engine, xid(starts_at="2026-01-01T00:01:00Z"), at=T0 + 60)
    second = ingest_alerts(engine, xid(starts_at="2026-01-01T00:11:00Z"), at=T0 + 660)
    capped = ingest_alerts(engine, xid(starts_at="2026-01-01T00:30:00Z"), at=T0 + 1800)

    assert [r.decisions[0].decision for r in (again, cooled, second, capped)] == [
        "duplicate", "cooldown", "accepted", "attempt_cap",
    ]  # fmt: skip
    with store.ingest.reader() as reader:
        assert reader.target_history("xid", "node-a", T0 + 1) == (T0 + 660, 1)
        assert reader.target_history("xid", "node-a", T0 + 661) == (T0 + 660, 0)
        assert reader.target_history("xid", "node-b", T0) == (None, 0)
        fingerprint = rows(store, "alerts")[0].fingerprint
        assert reader.reported_occurrences([fingerprint, "other"], "firing") == {
            (fingerprint, "2026-01-01T00:00:00Z"), (fingerprint, "2026-01-01T00:01:00Z"),
            (fingerprint, "2026-01-01T00:11:00Z"), (fingerprint, "2026-01-01T00:30:00Z"),
        }  # fmt: skip
        assert reader.reported_occurrences([fingerprint], "resolved") == set()
        assert reader.active_firing_runs("xid", "node-a", fingerprint) == [
            (1, "2026-01-01T00:00:00Z"), (2, "2026-01-01T00:11:00Z"),
        ]  # fmt: skip
        assert reader.existing_runs([rows(store, "runs")[1].dedupe_key, "nope"]) == {
            rows(store, "runs")[1].dedupe_key: (2, "queued")
        }


@EVERY_DATABASE
def test_a_run_that_failed_before_changing_anything_runs_again_at_the_next_delivery(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(cooldown="1h", max_attempts=1))
    run_id = queue(engine)
    claimed = store.queue.claim("w", T0 + 1)
    assert claimed is not None
    store.queue.record(
        RunWrite(claimed.lease, run_end=RunEnd(run_id, RunStatus.FAILED, "api down"), rerunnable=True), T0 + 2
    )
    with store.ingest.reader() as reader:
        assert reader.rerunnable_runs([run_id, 99]) == {run_id: "api down"}
        assert reader.target_history("xid", "node-a", T0) == (None, 0)  # it does not count

    (again,) = ingest_alerts(engine, xid(), at=T0 + 3).decisions

    assert again.decision == "accepted" and "runs again" in again.reason
    old, new = rows(store, "runs")
    assert (old.superseded_by, old.dedupe_key, new.id) == (again.run_id, f"superseded:{run_id}", again.run_id)
    with store.ingest.reader() as reader:
        assert reader.rerunnable_runs([run_id]) == {}


# --------------------------------------------------------------------------- the queue


@EVERY_DATABASE
def test_claims_take_the_oldest_queued_run_whose_prior_run_is_final(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook())
    first = queue(engine, "node-a")
    second = queue(engine, "node-b")
    (resolved,) = ingest_alerts(engine, xid("node-a", status="resolved"), at=T0 + 5).decisions

    a = store.queue.claim("w1", T0 + 10)
    b = store.queue.claim("w2", T0 + 11)
    assert store.queue.claim("w3", T0 + 12) is None  # the resolved run waits for its firing run
    assert a is not None and b is not None
    assert (a.id, a.worker, a.generation, b.id) == (first, "w1", 1, second)
    assert (a.playbook, a.target, a.phase, a.mode) == ("xid", "node-a", "firing", "enforce")
    assert a.alert_context["labels"] == {"alertname": "GpuXidError", "Hostname": "node-a"}
    assert (a.alert_context["status"], a.alert_context["startsAt"], a.alert_context["endsAt"]) == (
        "firing", "2026-01-01T00:00:00Z", "",
    )  # fmt: skip
    assert store.queue.queue_depth() == {"queued": 1, "running": 2, "awaiting_approval": 0}
    (run,) = rows(store, "runs", id=first)
    assert (run.status, run.claimed_by, run.heartbeat_at, run.started_at) == ("running", "w1", T0 + 10, T0 + 10)
    assert rows(store, "decisions", run_id=first)[0].status == "running"

    store.queue.record(RunWrite(a.lease, run_end=RunEnd(first, RunStatus.SUCCEEDED)), T0 + 20)
    c = store.queue.claim("w3", T0 + 21)
    assert c is not None and c.id == resolved.run_id
    assert (c.phase, c.alert_context["status"]) == ("resolved", "resolved")


@EVERY_DATABASE
def test_a_stale_lease_writes_nothing_and_raises_claim_lost(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine(playbook()))
    first = store.queue.claim("host:7", T0)
    assert first is not None
    step, _ = store.queue.steps_of(run_id)
    start_attempt(store, first.lease, step.id, 1, T0 + 1)
    assert store.leases.requeue_claims([RunningClaim(run_id, "host:7", 0, T0)], now=T0 + 2) == []  # another generation
    assert store.leases.requeue_claims(store.leases.running_claims(), now=T0 + 2) == [run_id]
    second = store.queue.claim("host:7", T0 + 3)
    assert second is not None and second.generation == 2
    before = (rows(store, "steps"), rows(store, "attempts"), rows(store, "runs"))

    stale = first.lease
    writes: list[Callable[[], object]] = [
        lambda: store.queue.record(RunWrite(stale), T0 + 4),
        lambda: start_attempt(store, stale, step.id, 2, T0 + 4, plan={"p": 1}),
        lambda: store.queue.finish_attempt(step.id, 1, AttemptOutcome.FAILED, "x", T0 + 4, lease=stale),
        lambda: store.queue.record(
            RunWrite(
                stale,
                ends=(StepEnd(step.id, StepStatus.SUCCEEDED, {}, attempt=1),),
                skip=(step.id,),
                skip_reason="x",
                run_end=RunEnd(run_id, RunStatus.FAILED),
            ),
            T0 + 4,
        ),
        lambda: store.queue.record(RunWrite(RunLease(run_id, "host:8", 2)), T0 + 4),
    ]
    for write in writes:
        with pytest.raises(ClaimLostError, match=f"run {run_id} is no longer claimed by"):
            write()

    assert (rows(store, "steps"), rows(store, "attempts"), rows(store, "runs")) == before
    store.queue.record(RunWrite(second.lease), T0 + 2)  # holds; the heartbeat moves on, never back
    assert rows(store, "runs")[0].heartbeat_at == T0 + 3.001


@EVERY_DATABASE
def test_a_takeover_needs_the_heartbeat_recovery_watched_and_each_attempt_names_its_executor(
    store: Store, make_engine: MakeEngine
) -> None:
    """An owner that renewed its lease after recovery looked keeps its run; the attempts of a run
    taken over name both executors (`attempts.worker`)."""
    run_id = queue(make_engine(playbook()))
    first = store.queue.claim("replica-a:7", T0)
    assert first is not None
    step, _ = store.queue.steps_of(run_id)
    start_attempt(store, first.lease, step.id, 1, T0 + 1)
    looked = store.leases.running_claims()
    store.leases.heartbeat([run_id], "replica-a:7", T0 + 2)  # alive after all

    assert store.leases.requeue_claims(looked, now=T0 + 3) == []
    assert rows(store, "runs")[0].status == "running"
    # The owner handing back its own claim (after a store outage): its own heartbeats do not count.
    assert store.leases.requeue_claims(looked, now=T0 + 4, own=True) == [run_id]
    second = store.queue.claim("replica-b:9", T0 + 5)
    assert second is not None
    start_attempt(store, second.lease, step.id, 2, T0 + 6)

    assert [(a.number, a.outcome, a.worker) for a in rows(store, "attempts")] == [
        (1, "interrupted", "replica-a:7"),
        (2, None, "replica-b:9"),
    ]


@EVERY_DATABASE
def test_a_run_handed_back_after_a_store_outage_keeps_the_end_of_the_step_that_ran(
    store: Store, make_engine: MakeEngine
) -> None:
    """The owner hands its run back with the end of the step whose action ran (the
    store failed as it was recorded): written with the requeue, the run goes on from the next step."""
    ran, flying = (queue(make_engine(playbook()), host) for host in ("node-a", "node-b"))
    claims = []
    for run_id in (ran, flying):
        claimed = store.queue.claim("replica-a:7", T0)
        assert claimed is not None and claimed.id == run_id
        step, _ = store.queue.steps_of(run_id)
        start_attempt(store, claimed.lease, step.id, 1, T0 + 1, plan={"would": "send"})
        claims.append(RunningClaim(run_id, "replica-a:7", claimed.generation, None))
    sent = StepEnd(store.queue.steps_of(ran)[0].id, StepStatus.SUCCEEDED, {"sent": True}, attempt=1)

    requeued = store.leases.requeue_claims(claims, now=T0 + 2, own=True, ends={ran: sent}, why="the store failed")

    assert sorted(requeued) == [ran, flying]
    done, later = store.queue.steps_of(ran)
    assert (done.status, done.finished, later.status) == ("succeeded", True, "pending")
    interrupted, _ = store.queue.steps_of(flying)
    assert (interrupted.status, interrupted.error) == ("interrupted", "the store failed while this step was running")
    attempts = {a.step_id: (a.outcome, a.error) for a in rows(store, "attempts")}
    assert attempts == {
        done.id: ("succeeded", None),
        interrupted.id: ("interrupted", "the store failed during this attempt"),
    }
    assert [r.status for r in rows(store, "runs")] == ["queued", "queued"]
    assert rows(store, "steps", id=done.id)[0].result is not None


@EVERY_DATABASE
def test_attempts_steps_and_the_run_end_are_recorded(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine(playbook()))
    claimed = store.queue.claim("w", T0)
    assert claimed is not None
    first, second = store.queue.steps_of(run_id)

    lease = claimed.lease
    start_attempt(store, lease, first.id, 1, T0 + 1, plan={"would": 1})
    store.queue.finish_attempt(first.id, 1, AttemptOutcome.RETRYABLE_ERROR, "busy", T0 + 2, lease=lease)
    start_attempt(store, lease, first.id, 2, T0 + 3)
    running, _ = store.queue.steps_of(run_id)
    assert (running.status, running.attempts, running.finished) == ("running", 2, False)
    store.queue.record(RunWrite(lease, ends=(StepEnd(first.id, StepStatus.SUCCEEDED, {"ok": 1}, attempt=2),)), T0 + 4)
    last = StepEnd(second.id, StepStatus.SUCCEEDED, {"ok": 2}, plan={"would": 2})
    store.queue.record(RunWrite(lease, ends=(last,), run_end=RunEnd(run_id, RunStatus.SUCCEEDED)), T0 + 5)

    done_first, _ = store.queue.steps_of(run_id)
    assert (done_first.status, done_first.attempts, done_first.finished, done_first.error) == (
        "succeeded", 2, True, None,
    )  # fmt: skip
    steps = rows(store, "steps")
    assert [(s.plan, s.result, s.started_at, s.finished_at) for s in steps] == [
        ('{"would":1}', '{"ok":1}', T0 + 1, T0 + 4),
        ('{"would":2}', '{"ok":2}', None, T0 + 5),
    ]
    assert [(a.number, a.started_at, a.finished_at, a.outcome, a.error) for a in rows(store, "attempts")] == [
        (1, T0 + 1, T0 + 2, "retryable_error", "busy"),
        (2, T0 + 3, T0 + 4, "succeeded", None),
    ]
    (run,) = rows(store, "runs")
    assert (run.status, run.finished_at, run.claimed_by, run.error) == ("succeeded", T0 + 5, None, None)
    assert rows(store, "decisions")[0].status == "succeeded"


@EVERY_DATABASE
def test_a_failed_step_skips_the_pending_ones_and_fails_the_run_in_one_write(
    store: Store, make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine(playbook()))
    claimed = store.queue.claim("w", T0)
    assert claimed is not None
    first, second = store.queue.steps_of(run_id)

    store.queue.record(
        RunWrite(claimed.lease, ends=(StepEnd(first.id, StepStatus.FAILED, error="boom"),), skip=(first.id, second.id),
                 skip_reason="skipped: step 0 failed", run_end=RunEnd(run_id, RunStatus.FAILED, "step 0: boom"),
                 rerunnable=True),
        T0 + 1,
    )  # fmt: skip

    assert [(s.status, s.error, s.finished) for s in store.queue.steps_of(run_id)] == [
        ("failed", "boom", True),
        ("skipped", "skipped: step 0 failed", True),  # only a pending step is skipped
    ]
    (run,) = rows(store, "runs")
    assert (run.status, run.error, run.rerunnable) == ("failed", "step 0: boom", True)
    assert rows(store, "decisions")[0].status == "failed"


@EVERY_DATABASE
def test_a_requeue_interrupts_the_steps_and_attempts_of_the_claims_given_and_leaves_the_others_running(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook())
    dead, silent, alive = (queue(engine, host) for host in ("a", "b", "c"))
    for worker, at in (("dead:1", T0 + 100), ("silent:1", T0), ("alive:1", T0 + 100)):
        claimed = store.queue.claim(worker, at)
        assert claimed is not None
        step = store.queue.steps_of(claimed.id)[0]
        start_attempt(store, claimed.lease, step.id, 1, at)  # its lease check moves the heartbeat on
    store.leases.heartbeat([dead, silent, alive], "alive:1", T0 + 110)  # only alive:1's own run

    stale = [claim for claim in store.leases.running_claims() if claim.claimed_by != "alive:1"]
    recovered = store.leases.requeue_claims(stale, now=T0 + 120)

    assert recovered == [dead, silent]
    assert [(r.status, r.claimed_by, r.heartbeat_at) for r in rows(store, "runs")] == [
        ("queued", None, T0 + 100.001), ("queued", None, T0 + 0.001), ("running", "alive:1", T0 + 110),
    ]  # fmt: skip
    assert [(s.status, s.error) for s in rows(store, "steps") if s.idx == 0] == [
        ("interrupted", "the executor stopped while this step was running"),
        ("interrupted", "the executor stopped while this step was running"),
        ("running", None),
    ]
    assert [(a.outcome, a.finished_at) for a in rows(store, "attempts")] == [
        ("interrupted", T0 + 120), ("interrupted", T0 + 120), (None, None),
    ]  # fmt: skip
    assert [d.status for d in rows(store, "decisions")] == ["queued", "queued", "running"]
    assert store.leases.running_claims() == [RunningClaim(alive, "alive:1", 1, T0 + 110)]


@EVERY_DATABASE
def test_a_heartbeat_never_goes_backwards(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine(playbook()))
    assert store.queue.claim("host:7", T0) is not None

    store.leases.heartbeat([run_id], "host:7", T0 - 600)
    store.leases.heartbeat([run_id], "host:8", T0 + 600)  # not its owner
    store.leases.heartbeat([], "host:7", T0 + 600)

    assert rows(store, "runs")[0].heartbeat_at == T0 + 0.001


@EVERY_DATABASE
def test_a_pending_outcome_is_listed_until_it_is_settled(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine(playbook()))
    claimed = store.queue.claim("w", T0)
    assert claimed is not None
    first, second = store.queue.steps_of(run_id)
    gave_up = StepEnd(first.id, StepStatus.FAILED, {"pending": {"job": "j"}}, "gave up")
    store.queue.record(
        RunWrite(
            claimed.lease,
            ends=(gave_up,),
            skip=(second.id,),
            run_end=RunEnd(run_id, RunStatus.FAILED, "step 0: gave up"),
        ),
        T0 + 1,
    )

    assert store.queue.pending_outcomes(since=T0 + 2) == []
    assert store.queue.pending_outcomes(since=T0, limit=0) == []
    (pending,) = store.queue.pending_outcomes(since=T0)
    assert (pending.step.id, pending.step.status, pending.follow_up, pending.finished_at) == (
        first.id, "failed", {"job": "j"}, T0 + 1,
    )  # fmt: skip
    assert (pending.run.id, pending.run.target, pending.run.alert_context["labels"]["Hostname"]) == (
        run_id, "node-a", "node-a",
    )  # fmt: skip

    assert store.queue.settle_pending(first.id, {"status": "applied_late"}, "late outcome", T0 + 5)
    assert not store.queue.settle_pending(first.id, {"status": "again"}, "again", T0 + 6)
    assert not store.queue.settle_pending(second.id, {"status": "none"}, "no result", T0 + 6)

    assert store.queue.pending_outcomes(since=T0) == []
    step = rows(store, "steps")[0]
    assert (step.result, step.error) == (
        '{"late_outcome":{"status":"applied_late"},"pending":{"job":"j"}}',
        "gave up; late outcome",
    )
    (run,) = rows(store, "runs")
    assert (run.error, run.updated_at) == ("step 0: gave up; late outcome", T0 + 5)


@EVERY_DATABASE
def test_a_pending_outcome_of_a_run_on_step_keeps_its_node(store: Store, make_engine: MakeEngine) -> None:
    """Reconciliation asks the node a `run_on` step ran on (its late outcome is there), not the target."""
    restart = {"action": "training.command", "with": {"command": "restart"}, "run_on": {"labels": ["control_node"]}}
    engine = make_engine(playbook(steps=[restart]))
    labels = {"Hostname": "node-a", "control_node": "node-c"}
    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels=labels), at=T0).decisions
    claimed = store.queue.claim("w", T0)
    assert claimed is not None and decision.run_id == claimed.id
    (step,) = store.queue.steps_of(claimed.id)
    gave_up = StepEnd(step.id, StepStatus.FAILED, {"pending": {"job": "j"}}, "gave up")
    store.queue.record(RunWrite(claimed.lease, ends=(gave_up,), run_end=RunEnd(claimed.id, RunStatus.FAILED)), T0 + 1)

    (pending,) = store.queue.pending_outcomes(since=T0)

    assert (pending.run.target, pending.step.node, pending.step.node_of(pending.run)) == ("node-a", "node-c", "node-c")


@EVERY_DATABASE
def test_writes_to_rows_that_do_not_exist(store: Store) -> None:
    # An UPDATE of no row changes nothing; a read of the one row a write needs fails.
    assert store.leases.requeue_claims([RunningClaim(99, "w", 1, T0)], now=T0) == []
    with pytest.raises(sa.exc.NoResultFound):
        store.queue.settle_pending(99, {}, "note", T0)
    with pytest.raises(ClaimLostError):
        store.queue.record(RunWrite(RunLease(99, "w", 1)), T0)
    assert store.queue.steps_of(99) == [] and rows(store, "runs") == [] and rows(store, "attempts") == []


@EVERY_DATABASE
def test_approval_queues_an_awaiting_run_and_a_resolved_alert_cancels_one(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(mode="approve"))
    approved = queue(engine, "node-a")
    cancelled = queue(engine, "node-b")
    assert store.queue.claim("w", T0) is None

    store.queue.approve(approved, by="bob", now=T0 + 60)
    ingest_alerts(engine, xid("node-b", status="resolved"), at=T0 + 61)

    with pytest.raises(RunStateError, match=f"run {approved} is queued, not awaiting approval"):
        store.queue.approve(approved, by="bob", now=T0 + 62)
    with pytest.raises(RunStateError, match=f"run {cancelled} is cancelled"):
        store.queue.approve(cancelled, by="bob", now=T0 + 62)
    for unknown in (0, 99, 2**63):
        with pytest.raises(UnknownRunError, match=f"no run {unknown}"):
            store.queue.approve(unknown, by="bob", now=T0 + 62)
    runs = rows(store, "runs")
    assert [(r.status, r.approved_by, r.approved_at, r.error) for r in runs] == [
        ("queued", "bob", T0 + 60, None),
        ("cancelled", None, None, "the alert resolved before the run was approved"),
    ]
    assert [d.status for d in rows(store, "decisions")] == ["queued", "cancelled", "no_firing_run"]


@EVERY_DATABASE
def test_pause_memory_and_breaker_rows(store: Store, make_engine: MakeEngine) -> None:
    assert store.pause.state().paused is False
    store.pause.set(True, by="alice", reason="upgrade", now=T0)
    assert (store.pause.state().paused, store.pause.state().by, store.pause.state().since) == (True, "alice", T0)
    assert ingest_alerts(make_engine(playbook()), xid(), at=T0 + 1).decisions[0].decision == "paused"

    memory = store.memory
    memory.remember("gpu/0", {"limit": 300}, run_id=1)
    assert memory.recall("gpu/0") == {"limit": 300}
    memory.forget("gpu/0")
    assert memory.recall("gpu/0") is None

    clock = iter(range(int(T0), int(T0) + 100))
    breaker = CircuitBreaker(
        store.breaker.ledger, store.breaker.view, limits=BreakerLimits(max_nodes=1), clock=lambda: next(clock)
    )
    breaker.acquire("n1", kind="cordon", run_id=1, cluster_nodes=10)
    with pytest.raises(BreakerOpen):
        breaker.acquire("n2", kind="cordon", run_id=2, cluster_nodes=10)
    assert breaker.release("n1", run_id=3) == 1
    assert breaker.state().tripped_at is not None
    assert [(c.node, c.released_at is not None) for c in rows(store, "breaker_claims")] == [("n1", True)]


# --------------------------------------------------------------------------- escalation ladders


@EVERY_DATABASE
def test_ladder_rows_are_read_written_listed_and_reset(store: Store, make_engine: MakeEngine) -> None:  # fmt: skip
    def rung(name: str, holds_for: str = "30m") -> dict[str, Any]:
        return {"name": name, "holds_for": holds_for, "steps": [{"action": "log", "with": {"message": name}}]}

    ladder = {**playbook(), "steps": None, "escalate": [rung("one"), rung("two")]}
    engine = make_engine({k: v for k, v in ladder.items() if v is not None})
    first = queue(engine)
    (second,) = ingest_alerts(engine, xid(starts_at="2026-01-01T00:01:00Z"), at=T0 + 60).decisions
    queue(engine, host="node-b")

    with store.ingest.reader() as reader:
        state = reader.ladder("xid", "node-a")
        assert reader.ladder("xid", "node-c") is None
        assert reader.target_history("xid", "node-a", T0, 1) == (T0, 1)
        assert reader.target_history("xid", "node-a", T0, 2) == (T0 + 60, 1)
        assert reader.target_history("xid", "node-a", T0) == (T0 + 60, 2)
    assert state is not None
    assert (state.rung, state.run_id, state.starts_at, state.climbed_at) == (
        2,
        second.run_id,
        "2026-01-01T00:01:00Z",
        T0 + 60,
    )
    assert [(c["rung"], c["run"]) for c in state.climb] == [(1, first), (2, second.run_id)]
    assert [(s.guard_key, s.rung) for s in store.ladders.read()] == [("node-a", 2), ("node-b", 1)]
    assert [s.guard_key for s in store.ladders.read(target="node-b", playbook="xid")] == ["node-b"]
    assert store.ladders.read(playbook="other") == []

    (reset,) = store.ladders.reset("node-a", by="alice", reason="swapped the fan", now=T0 + 120)

    assert (reset.rung, reset.reason, reset.climb, reset.updated_at) == (
        0,
        "reset by alice: swapped the fan",
        (),
        T0 + 120,
    )
    assert [s.rung for s in store.ladders.read()] == [0, 1]
    (after,) = ingest_alerts(engine, xid(starts_at="2026-01-01T00:03:00Z"), at=T0 + 180).decisions
    assert after.reason.endswith(
        "rung 1 of 2 (one): first rung (the ladder was reset: reset by alice: swapped the fan)"
    )
    assert [r.rung for r in rows(store, "runs")] == [1, 2, 1, 1]
