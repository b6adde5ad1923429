"""remediate.executor's one run path: what a step costs in write transactions (counted on a real SQLite file),
the claim that carries the first step's attempt start, the queue's order while a storm drains, and the
executor's threads, on SQLite, PostgreSQL and the fake.

A run is read at the head of the queue, its first step planned outside any transaction, then claimed with
that step's attempt start in one transaction, taken only if no other executor claimed the run meanwhile.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import pytest
from sqlalchemy import event

from remediate.actions import default_registry
from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.log import LogAction
from remediate.actions.schema import Param, ParamSchema
from remediate.config.settings import ExecutorSettings
from remediate.errors import ActionError
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import RunEnd, RunStatus, RunWrite
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.realsystems import WebhookRecorder
from tests.support.server import WAIT
from tests.support.stores import EVERY_DATABASE, rows, step_details
from tests.support.waiting import wait_until

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]


class Crash(BaseException):
    """The executor's process dies in the middle of an action (nothing of the executor catches it)."""


class Quick(Action):
    """Fails when its `note` is "boom"; runs the test's `during` while it executes, `planning` while it plans."""

    name: ClassVar[str] = "test.quick"
    idempotent: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema({"note": Param(str, default="")})

    def __init__(self) -> None:
        self.executions: list[tuple[int, str]] = []
        self.plans: list[tuple[int, str]] = []
        self.during: Callable[[StepContext], None] | None = None
        self.planning: Callable[[StepContext], None] | None = None
        self._lock = threading.Lock()

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        with self._lock:
            self.plans.append((ctx.run_id, params["note"]))
        if self.planning is not None:
            self.planning(ctx)
        return {"would": params["note"]}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        with self._lock:
            self.executions.append((ctx.run_id, params["note"]))
        if self.during is not None:
            self.during(ctx)
        if params["note"] == "boom":
            raise ActionError("boom")
        return {"did": params["note"]}


class QuickOnce(Quick):
    """The same, not idempotent: interrupted, it must not run again."""

    name: ClassVar[str] = "test.quickonce"
    idempotent: ClassVar[bool] = False


@pytest.fixture
def actions() -> dict[str, Quick]:
    return {a.name: a for a in (Quick(), QuickOnce())}


@pytest.fixture
def registry(actions: dict[str, Quick]) -> ActionRegistry:
    """Overrides the shared fixture: the shipped log action plus the fakes above."""
    return ActionRegistry([LogAction(), *actions.values()])


def playbook(*steps: dict[str, Any], name: str = "pb", **changes: Any) -> dict[str, Any]:
    return {"name": name, "match": {"alertname": "GpuXidError"}, "steps": list(steps), **changes}


def quick(note: str = "{{ labels.Hostname }}", action: str = "test.quick", **spec: Any) -> dict[str, Any]:
    return {"action": action, "with": {"note": note}, **spec}


def queue_runs(make_engine: MakeEngine, pb: dict[str, Any], hosts: list[str], **kw: Any) -> list[int]:
    """One notification with an alert per host; the ids of their runs, in host order."""
    engine = make_engine(pb, **kw)
    alerts = [alert_payload("GpuXidError", labels={"Hostname": host}) for host in hosts]
    result = ingest_alerts(engine, *alerts, at=T0)
    run_ids = [d.run_id for d in result.decisions]
    assert None not in run_ids, [d.reason for d in result.decisions]
    return [r for r in run_ids if r is not None]


def statuses(store: Store, run_ids: list[int]) -> list[str]:
    return [rows(store, "runs", id=run_id)[0].status for run_id in run_ids]


# --------------------------------------------------------------------------- write transactions


class CommittedWrites:
    """Counts the transactions SQLite commits with a write in them, on every connection of a store's engine
    (the driver's own statements, as SQLite's trace callback sees them)."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        self._lock = threading.Lock()
        engine = store.database.engine
        event.listen(engine, "connect", self._trace)
        engine.dispose()  # the connections opened from now on are traced

    def _trace(self, dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        wrote = [False]

        def statement(sql: str) -> None:
            verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if verb in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
                wrote[0] = True
            elif verb == "COMMIT":
                with self._lock:
                    self.count += wrote[0]
                wrote[0] = False
            elif verb in ("BEGIN", "ROLLBACK"):
                wrote[0] = False

        dbapi_connection.set_trace_callback(statement)


@pytest.fixture
def sink() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hook") as server:
        yield server


@pytest.mark.parametrize("action", ["log", "notify.webhook"])
def test_a_one_step_alert_costs_at_most_three_write_transactions_end_to_end(
    store: Store, sink: WebhookRecorder, action: str
) -> None:
    """On a real SQLite file: the ingest; the claim with the step's plan and attempt start; the end of the
    attempt, the step and the run (notify.webhook took five)."""
    params = {"message": "hi {{ labels.Hostname }}"} if action == "log" else {"url": sink.url}
    shipped = default_registry()
    pb = parse_playbook(playbook({"action": action, "with": params}), shipped, source="pb.yaml")
    engine = Engine(store=store, playbooks=PlaybookSet([pb]), registry=shipped)
    executor = Executor(store=store, registry=shipped)
    writes = CommittedWrites(store)

    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0).decisions
    assert executor.drain() == 1

    assert decision.run_id is not None and statuses(store, [decision.run_id]) == ["succeeded"]
    (detail,) = step_details(store, decision.run_id)
    assert detail["plan"] is not None and [a["outcome"] for a in detail["attempts"]] == ["succeeded"]
    assert len(sink.requests) == (1 if action == "notify.webhook" else 0)
    assert 0 < writes.count <= 3


@EVERY_DATABASE
def test_a_failing_one_step_run_closes_its_attempt_with_its_end_two_write_transactions(
    store: Store, executor_factory: Callable[..., Executor], make_engine: MakeEngine,
) -> None:  # fmt: skip
    (run_id,) = queue_runs(make_engine, playbook(quick(note="boom", retries=0)), ["node-a"])
    counted = counting_transactions(store)

    assert executor_factory().drain() == 1

    assert len(counted) == 2
    (detail,) = step_details(store, run_id)
    assert (detail["status"], [(a["outcome"], a["error"]) for a in detail["attempts"]]) == (
        "failed",
        [("failed", "boom")],
    )
    assert rows(store, "runs", id=run_id)[0].status == "failed"


def counting_transactions(store: Store) -> list[int]:
    """Count the store's write transactions from now on (the SQL store's write(), the fake's _transaction())."""
    counted: list[int] = []
    name = "write" if isinstance(store, Store) else "_transaction"
    write = getattr(store, name)

    def counting(**options: Any) -> Any:
        counted.append(1)
        return write(**options)

    setattr(store, name, counting)
    return counted


@pytest.fixture
def executor_factory(store: Store, registry: ActionRegistry) -> Callable[..., Executor]:
    def build(threads: int = 2, **kwargs: Any) -> Executor:
        section = ExecutorSettings(threads=threads, poll_interval=0.05)
        return Executor(store=store, registry=registry, retry_wait_max=0.01, settings=section, **kwargs)

    return build


# --------------------------------------------------------------------------- the claim


@EVERY_DATABASE
def test_a_run_another_executor_claims_while_this_one_plans_it_is_left_to_that_one(
    store: Store, actions: dict[str, Quick], executor_factory: Callable[..., Executor], make_engine: MakeEngine,
) -> None:  # fmt: skip
    (run_id,) = queue_runs(make_engine, playbook(quick()), ["node-a"])
    taken = []
    actions["test.quick"].planning = lambda _ctx: taken.append(store.queue.claim("other:1", T0))

    assert executor_factory().run_once()

    assert taken[0] is not None and taken[0].id == run_id
    assert actions["test.quick"].executions == []  # planned, never executed by the executor that lost the claim
    run = rows(store, "runs", id=run_id)[0]
    assert (run.status, run.claimed_by) == ("running", "other:1")
    (detail,) = step_details(store, run_id)
    assert (detail["status"], detail["attempts"]) == ("pending", [])


@pytest.mark.parametrize(
    ("action", "after"),
    [
        ("test.quick", ("succeeded", "succeeded", ["interrupted", "succeeded"])),
        ("test.quickonce", ("failed", "interrupted", ["interrupted"])),
    ],
)
@EVERY_DATABASE
def test_a_crash_during_the_first_step_leaves_the_attempt_its_claim_started_interrupted(
    store: Store,
    registry: ActionRegistry,
    actions: dict[str, Quick],
    make_engine: MakeEngine,
    action: str,
    after: tuple[str, str, list[str]],
) -> None:
    (run_id,) = queue_runs(make_engine, playbook(quick(action=action)), ["node-a"])

    def die(ctx: StepContext) -> None:
        raise Crash

    actions[action].during = die
    with pytest.raises(Crash):
        Executor(store=store, registry=registry).run_once()
    actions[action].during = None

    # Recovery after the process died: its claim is taken over, what was in flight is `interrupted`.
    claims = store.leases.running_claims()
    assert [c.id for c in claims] == [run_id]
    assert store.leases.requeue_claims(claims, now=T0 + 1, own=True) == [run_id]
    (detail,) = step_details(store, run_id)
    assert (detail["status"], detail["plan"], [a["outcome"] for a in detail["attempts"]]) == (
        "interrupted",
        {"would": "node-a"},
        ["interrupted"],
    )

    Executor(store=store, registry=registry).drain()

    run_status, step_status, attempts = after
    (detail,) = step_details(store, run_id)
    assert (rows(store, "runs", id=run_id)[0].status, detail["status"]) == (run_status, step_status)
    assert [a["outcome"] for a in detail["attempts"]] == attempts
    assert len(actions[action].executions) == (2 if action == "test.quick" else 1)


# --------------------------------------------------------------------------- the queue's order


@EVERY_DATABASE
def test_a_fresh_alerts_run_is_claimed_before_a_storms_backlog(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(quick()))
    storm = ingest_alerts(
        engine, *[alert_payload("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(12)], at=T0
    )
    fresh = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "fresh"}), at=T0 + 1)
    (fresh_run,) = [d.run_id for d in fresh.decisions]
    storm_runs = [d.run_id for d in storm.decisions]

    assert [rows(store, "runs", id=r)[0].priority for r in (fresh_run, storm_runs[0])] == [0, 1]
    claimed = [store.queue.claim("w:1", T0 + 2) for _ in range(13)]
    assert [c.id for c in claimed if c is not None] == [fresh_run, *storm_runs]


@EVERY_DATABASE
def test_a_resolved_run_still_waits_for_its_firing_run_in_a_storms_backlog(
    store: Store, make_engine: MakeEngine
) -> None:
    """Priority never overtakes `after_run_id`: the fresh resolved run waits until its firing run is final."""
    engine = make_engine(playbook(quick(), on_resolved=[quick()]))
    alerts = [alert_payload("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(12)]
    storm = [d.run_id for d in ingest_alerts(engine, *alerts, at=T0).decisions]
    resolved = alert_payload("GpuXidError", labels={"Hostname": "s0"}, status="resolved")
    (resolved_run,) = [d.run_id for d in ingest_alerts(engine, resolved, at=T0 + 1).decisions]
    assert resolved_run is not None

    first = store.queue.claim("w:1", T0 + 2)
    second = store.queue.claim("w:1", T0 + 2)
    assert (first and first.id, second and second.id) == (storm[0], storm[1])
    third = store.queue.claim("w:2", T0 + 2)  # the third storm run, not the resolved run whose firing run runs
    assert third is not None and rows(store, "runs", id=third.id)[0].phase == "firing"
    assert first is not None
    store.queue.record(RunWrite(first.lease, run_end=RunEnd(storm[0], RunStatus.SUCCEEDED)), T0 + 3)
    fourth = store.queue.claim("w:1", T0 + 4)
    assert fourth is not None and fourth.id == resolved_run


@EVERY_DATABASE
def test_a_fresh_alert_reaches_its_first_step_while_a_storm_drains(
    store: Store,
    actions: dict[str, Quick],
    executor_factory: Callable[..., Executor],
    make_engine: MakeEngine,
) -> None:
    """A started executor with a storm's backlog queued: a fresh alert's run is among the next claims."""
    engine = make_engine(playbook(quick()))
    ingest_alerts(engine, *[alert_payload("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(300)], at=T0)
    executor = executor_factory(threads=2)
    executions = actions["test.quick"].executions
    executor.start()
    try:
        wait_until(lambda: executions, WAIT, 0.005, "the storm drains")
        fresh = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "fresh"}), at=T0 + 1)
        before = len(executions)
        (fresh_run,) = [d.run_id for d in fresh.decisions]
        executor.wake()
        wait_until(lambda: any(r == fresh_run for r, _ in list(executions)), WAIT, 0.005, "the fresh run ran")
        position = [r for r, _ in executions].index(fresh_run)
    finally:
        executor.stop()
    # Only a few runs ran before it, not the storm's backlog: per thread the run in hand when it was stored and
    # one whose head it had read just before the commit. A loaded host widens that window (seen at +3 and, on a
    # 2-core machine running other suites, +9), so the bound is the backlog's: first among the runs still queued
    # when it arrived, give or take a small share of them (a queue in arrival order would run it last).
    backlog = 300 - before
    assert backlog > 2 * 2
    assert position - before <= 2 * 2 + backlog // 10


@EVERY_DATABASE
def test_two_threads_plan_and_execute_each_run_once(
    store: Store, actions: dict[str, Quick], executor_factory: Callable[..., Executor], make_engine: MakeEngine,
) -> None:  # fmt: skip
    """Each thread reads the head of the queue in turn and skips the run the other has in hand."""
    run_ids = queue_runs(make_engine, playbook(quick()), [f"h{i}" for i in range(40)])
    actions["test.quick"].planning = lambda _ctx: time.sleep(0.002)  # widen the window between read and claim
    executor = executor_factory(threads=2)
    executor.start()
    try:
        wait_until(lambda: set(statuses(store, run_ids)) == {"succeeded"}, WAIT, 0.01, "every run succeeded")
    finally:
        executor.stop()
    planned = sorted(r for r, _ in actions["test.quick"].plans)
    executed = sorted(r for r, _ in actions["test.quick"].executions)
    assert planned == executed == sorted(run_ids)


@EVERY_DATABASE
def test_a_slow_step_does_not_keep_the_other_thread_from_draining_the_queue(
    store: Store,
    actions: dict[str, Quick],
    executor_factory: Callable[..., Executor],
    make_engine: MakeEngine,
) -> None:
    slow = queue_runs(make_engine, playbook(quick(action="test.quickonce"), name="slow"), ["s"])
    quick_runs = queue_runs(make_engine, playbook(quick(), name="quick"), [f"h{i}" for i in range(30)])
    release = threading.Event()
    actions["test.quickonce"].during = lambda _ctx: release.wait(WAIT)
    executor = executor_factory(threads=2)
    executor.start()
    try:
        wait_until(lambda: set(statuses(store, quick_runs)) == {"succeeded"}, WAIT, 0.01, "the quick runs drained")
        drained_while_slow_ran = statuses(store, slow) == ["running"]
    finally:
        release.set()
        executor.stop()
    assert drained_while_slow_ran
    assert statuses(store, slow) == ["succeeded"]
