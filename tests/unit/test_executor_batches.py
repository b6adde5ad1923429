"""remediate.executor's batches (runs made only of batchable steps) on SQLite, PostgreSQL and the fake.

Each durability guarantee of the one-run path holds for a batch: every attempt's start is committed (the
first round's with the claim) before any action of the batch runs, a crash after that leaves them
`interrupted` (re-run only for an idempotent action), a run whose claim was lost is written no more while
the others of its batch are, and a step's outcome follows the same rules (always, continue_on_error, dry
runs) as on the one-run path, which the last tests compare row for row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

from remediate.actions.base import Action, ActionRegistry, StepContext, Where
from remediate.actions.log import LogAction
from remediate.actions.schema import Param, ParamSchema
from remediate.engine import Engine, IngestResult
from remediate.errors import ActionError
from remediate.executor import Executor, ExecutorMetrics
from remediate.runs import RunningClaim, RunStatus
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE, rows, step_details

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]
Ingest = Callable[..., IngestResult]
MakeAlert = Callable[..., dict[str, Any]]


class Crash(BaseException):
    """The executor's process dies in the middle of an action (nothing of the executor catches it)."""


class Cheap(Action):
    """A batchable action: fails when its `note` is "boom", and may do something of the test's while it runs."""

    name: ClassVar[str] = "test.cheap"
    idempotent: ClassVar[bool] = True
    batchable: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema({"note": Param(str, default="")})

    def __init__(self) -> None:
        self.executions: list[tuple[int, str]] = []
        self.plans: list[tuple[int, str]] = []
        self.during: Callable[[StepContext], None] | None = None

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.plans.append((ctx.run_id, params["note"]))
        if params["note"] == "badplan":
            raise ActionError("cannot read the state")
        return {"would": params["note"]}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.executions.append((ctx.run_id, params["note"]))
        if self.during is not None:
            self.during(ctx)
        if params["note"] == "boom":
            raise ActionError("boom")
        return {"did": params["note"]}


class CheapOnce(Cheap):
    """The same, not idempotent: interrupted, it must not run again."""

    name: ClassVar[str] = "test.cheaponce"
    idempotent: ClassVar[bool] = False


class Costly(Cheap):
    """The same, not batchable: its runs take the one-run path."""

    name: ClassVar[str] = "test.costly"
    batchable: ClassVar[bool] = False


class CheapOnNode(Cheap):
    """The same, run on the node of its target (by its agent): never in a batch."""

    name: ClassVar[str] = "test.cheaponnode"
    where: ClassVar[Where] = Where.NODE


@pytest.fixture
def actions() -> dict[str, Cheap]:
    return {a.name: a for a in (Cheap(), CheapOnce(), Costly(), CheapOnNode())}


@pytest.fixture
def registry(actions: dict[str, Cheap]) -> ActionRegistry:
    """Overrides the shared fixture: the shipped log action plus the fakes above."""
    return ActionRegistry([LogAction(), *actions.values()])


class Metrics(ExecutorMetrics):
    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []
        self.runs: list[str] = []

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.steps.append((action, outcome))

    def run_finished(self, status: str, playbook: str) -> None:
        self.runs.append(status)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def executor(store: Store, registry: ActionRegistry, metrics: Metrics) -> Executor:
    return Executor(store=store, registry=registry, retry_wait_max=0.01, metrics=metrics, poll_interval=0.05)


def playbook(*steps: dict[str, Any], name: str = "pb", **changes: Any) -> dict[str, Any]:
    return {"name": name, "match": {"alertname": "GpuXidError"}, "steps": list(steps), **changes}


def cheap(note: str = "{{ labels.Hostname }}", action: str = "test.cheap", **spec: Any) -> dict[str, Any]:
    return {"action": action, "with": {"note": note}, **spec}


def queue_runs(
    make_engine: MakeEngine, ingest: Ingest, make_alert: MakeAlert, pb: dict[str, Any], hosts: list[str], **kw: Any
) -> list[int]:
    """One notification with an alert per host; the ids of their runs, in host order."""
    engine = make_engine(pb, **kw)
    alerts = [make_alert("GpuXidError", labels={"Hostname": host}) for host in hosts]
    result = ingest(engine, *alerts, at=T0)
    run_ids = [d.run_id for d in result.decisions]
    assert None not in run_ids, [d.reason for d in result.decisions]
    return [r for r in run_ids if r is not None]


def counting_transactions(store: Store) -> list[int]:
    """Count the store's write transactions from now on (every one goes through Store.write)."""
    counted: list[int] = []
    write = store.write

    def counting(**options: Any) -> Any:
        counted.append(1)
        return write(**options)

    store.write = counting  # type: ignore[method-assign]
    return counted


def statuses(store: Store, run_ids: list[int]) -> list[str]:
    return [rows(store, "runs", id=run_id)[0].status for run_id in run_ids]


# --------------------------------------------------------------------------- batches


@EVERY_DATABASE
def test_runs_of_batchable_steps_are_claimed_and_started_together_then_ended_together_two_transactions(
    store: Store,
    executor: Executor,
    actions: dict[str, Cheap],
    metrics: Metrics,
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    hosts = [f"node-{i}" for i in range(5)]
    run_ids = queue_runs(make_engine, ingest, make_alert, playbook(cheap()), hosts)
    transactions = counting_transactions(store)

    assert executor.drain() == 5

    # One claim with the plans and attempt starts, one transaction of their ends: for all five runs.
    # (The claim that then finds the queue empty only reads: no write lock for an idle poll.)
    assert len(transactions) == 2
    assert statuses(store, run_ids) == ["succeeded"] * 5
    for run_id, host in zip(run_ids, hosts, strict=True):
        (detail,) = step_details(store, run_id)
        assert (detail["status"], detail["plan"], detail["result"]) == ("succeeded", {"would": host}, {"did": host})
        assert [(a["number"], a["outcome"], a["error"]) for a in detail["attempts"]] == [(1, "succeeded", None)]
        run = rows(store, "runs", id=run_id)[0]
        assert (run.claimed_by, run.error, run.claim_generation) == (None, None, 1)
        assert [d.status for d in rows(store, "decisions", run_id=run_id)] == ["succeeded"]
    assert sorted(actions["test.cheap"].executions) == sorted(zip(run_ids, hosts, strict=True))
    assert metrics.runs == ["succeeded"] * 5
    assert metrics.steps == [("test.cheap", "succeeded")] * 5


@EVERY_DATABASE
def test_every_attempt_of_a_batch_is_durable_before_any_of_its_actions_runs(
    store: Store, executor: Executor, actions: dict[str, Cheap], make_engine: MakeEngine, ingest: Ingest,
    make_alert: MakeAlert,
) -> None:  # fmt: skip
    run_ids = queue_runs(make_engine, ingest, make_alert, playbook(cheap()), ["node-a", "node-b", "node-c"])
    seen: list[list[tuple[str, Any, list[Any]]]] = []

    def look(ctx: StepContext) -> None:
        if not seen:  # what recovery would find if the process died in the batch's first action
            details = [step_details(store, run_id)[0] for run_id in run_ids]
            seen.append([(d["status"], d["plan"], [a["outcome"] for a in d["attempts"]]) for d in details])

    actions["test.cheap"].during = look

    executor.drain()

    assert seen == [[("running", {"would": host}, [None]) for host in ("node-a", "node-b", "node-c")]]


@pytest.mark.parametrize(
    ("action", "after"),
    [
        # idempotent: run again by the next claim, on the one-run path; its first attempt stays `interrupted`
        ("test.cheap", ("succeeded", "succeeded", ["interrupted", "succeeded"])),
        # not idempotent: never run twice, the run fails with the reason
        ("test.cheaponce", ("failed", "interrupted", ["interrupted"])),
    ],
)
@EVERY_DATABASE
def test_a_crash_after_a_batch_started_its_attempts_leaves_them_interrupted_and_reruns_only_idempotent_actions(
    store: Store,
    registry: ActionRegistry,
    actions: dict[str, Cheap],
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
    action: str,
    after: tuple[str, str, list[str]],
) -> None:
    run_ids = queue_runs(make_engine, ingest, make_alert, playbook(cheap(action=action)), ["node-a", "node-b"])

    def die(ctx: StepContext) -> None:
        raise Crash

    actions[action].during = die
    dead = Executor(store=store, registry=registry)
    with pytest.raises(Crash):
        dead.run_once()
    actions[action].during = None
    assert len(actions[action].executions) == 1  # the batch's first action; the second never ran

    # Recovery after the process died: its claims are taken over, what was in flight is `interrupted`.
    claims = store.running_claims()
    assert sorted(c.id for c in claims) == run_ids
    assert sorted(store.requeue_claims(claims, now=T0 + 1, own=True)) == run_ids
    for run_id in run_ids:
        (detail,) = step_details(store, run_id)
        assert (detail["status"], [a["outcome"] for a in detail["attempts"]]) == ("interrupted", ["interrupted"])

    Executor(store=store, registry=registry).drain()

    run_status, step_status, attempts = after
    for run_id in run_ids:
        (detail,) = step_details(store, run_id)
        assert (rows(store, "runs", id=run_id)[0].status, detail["status"]) == (run_status, step_status)
        assert [a["outcome"] for a in detail["attempts"]] == attempts
    if action == "test.cheaponce":
        assert len(actions[action].executions) == 1
        assert "not idempotent" in (rows(store, "runs", id=run_ids[1])[0].error or "")
    else:
        assert len(actions[action].executions) == 3


@EVERY_DATABASE
def test_a_run_of_a_batch_whose_claim_was_lost_is_written_no_more_and_the_others_finish(
    store: Store,
    executor: Executor,
    actions: dict[str, Cheap],
    metrics: Metrics,
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    first, taken, third = queue_runs(make_engine, ingest, make_alert, playbook(cheap()), ["a", "b", "c"])

    def take_over(ctx: StepContext) -> None:
        if ctx.run_id == first:  # while the batch runs, recovery takes `taken` (its owner seemed silent)
            (claim,) = [c for c in store.running_claims() if c.id == taken]
            assert store.requeue_claims([RunningClaim(taken, claim.claimed_by, claim.generation, None)], now=T0,
                                        own=True) == [taken]  # fmt: skip

    actions["test.cheap"].during = take_over

    assert executor.run_once()

    assert statuses(store, [first, taken, third]) == ["succeeded", "queued", "succeeded"]
    (detail,) = step_details(store, taken)
    # What recovery wrote stays: the batch's end of this step was not written.
    assert (detail["status"], detail["result"], [a["outcome"] for a in detail["attempts"]]) == (
        "interrupted", None, ["interrupted"],
    )  # fmt: skip
    assert metrics.runs == ["succeeded", "succeeded"]
    # Taken over, it runs again (idempotent) on the next claim.
    actions["test.cheap"].during = None
    assert executor.drain() == 1
    assert statuses(store, [taken]) == ["succeeded"]


@EVERY_DATABASE
def test_a_failing_action_in_a_batch_fails_only_its_own_run(
    store: Store,
    executor: Executor,
    metrics: Metrics,
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    run_ids = queue_runs(make_engine, ingest, make_alert, playbook(cheap()), ["a", "boom", "c"])

    assert executor.drain() == 3

    assert statuses(store, run_ids) == ["succeeded", "failed", "succeeded"]
    failed = rows(store, "runs", id=run_ids[1])[0]
    assert failed.error == "step 0 1-test.cheap (test.cheap): boom"
    (detail,) = step_details(store, run_ids[1])
    assert (detail["status"], detail["error"]) == ("failed", "boom")
    assert [(a["outcome"], a["error"]) for a in detail["attempts"]] == [("failed", "boom")]
    assert [d.status for d in rows(store, "decisions", run_id=run_ids[1])] == ["failed"]
    assert sorted(metrics.runs) == ["failed", "succeeded", "succeeded"]


@EVERY_DATABASE
def test_a_dry_run_batch_only_plans(
    store: Store,
    executor: Executor,
    actions: dict[str, Cheap],
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    pb = playbook(cheap(), cheap("boom"))
    run_ids = queue_runs(make_engine, ingest, make_alert, pb, ["a", "b"], server_mode="dry-run")
    transactions = counting_transactions(store)

    assert executor.drain() == 2

    assert statuses(store, run_ids) == ["planned", "planned"]
    for run_id, host in zip(run_ids, ["a", "b"], strict=True):
        assert [(d["status"], d["plan"], d["attempts"]) for d in step_details(store, run_id)] == [
            ("planned", {"would": host}, []),
            ("planned", {"would": "boom"}, []),
        ]
    assert actions["test.cheap"].executions == []
    # The claim with the first steps' plans, then one transaction for the second's (nothing runs, nothing ends).
    assert len(transactions) == 2


@EVERY_DATABASE
def test_a_batch_takes_only_runs_of_batchable_cluster_steps_and_leaves_the_others_in_order(
    store: Store,
    executor: Executor,
    actions: dict[str, Cheap],
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    engine = make_engine(
        playbook(cheap(), name="cheap", match={"alertname": "Cheap"}),
        playbook(cheap(), cheap(action="test.costly"), name="mixed", match={"alertname": "Mixed"}),
        playbook(cheap(), cheap(action="test.cheaponnode"), name="node", match={"alertname": "Node"}),
    )
    names = ["Cheap", "Mixed", "Cheap", "Node", "Cheap"]
    result = ingest(engine, *[make_alert(n, labels={"Hostname": f"h{i}"}) for i, n in enumerate(names)], at=T0)
    run_ids = [d.run_id for d in result.decisions]

    # test.cheaponnode is named batchable here: its `where: node` keeps its run out of a batch all the same.
    batchable = {"test.cheap", "test.cheaponnode"}
    assert executor._batchable == {"log", "test.cheap", "test.cheaponce"}

    claimed = store.claim_runs("w:1", T0, limit=10, batchable=batchable)

    # The head is a batch's: the batchable runs of the window, in order, with their steps.
    assert [r.id for r in claimed] == [run_ids[0], run_ids[2], run_ids[4]]
    assert all(r.steps is not None and len(r.steps) == 1 for r in claimed)
    # Then the head is a run of another kind: it is claimed alone, without its steps.
    (mixed,) = store.claim_runs("w:1", T0, limit=10, batchable=batchable)
    assert (mixed.id, mixed.steps) == (run_ids[1], None)
    (node,) = store.claim_runs("w:1", T0, limit=10, batchable=batchable)
    assert (node.id, node.steps) == (run_ids[3], None)
    assert store.claim_runs("w:1", T0, limit=10, batchable=batchable) == []


def test_only_local_instant_actions_are_batchable() -> None:
    """A batch calls actions in the executor's thread without a deadline and never retries them: only an
    action that cannot wait on anything may say it is batchable (today: log)."""
    from remediate.actions import default_registry
    from remediate.config import load_settings

    registry = default_registry(load_settings(env={}))
    batchable = [n for n in registry.names() if registry.get(n).batchable]
    assert batchable == ["log"]
    assert all(registry.get(n).where == "cluster" and not registry.get(n).reports_run for n in batchable)


# --------------------------------------------------------------------------- the same outcome as one run at a time


def outcome(store: Store, run_ids: list[int]) -> list[Any]:
    """Each run's status, error and steps as recorded, without times and ids."""
    found = []
    for run_id in run_ids:
        run = rows(store, "runs", id=run_id)[0]
        steps = [
            (d["status"], d["error"], d["plan"], d["result"], [(a["number"], a["outcome"], a["error"])
                                                              for a in d["attempts"]])
            for d in step_details(store, run_id)
        ]  # fmt: skip
        decisions = [d.status for d in rows(store, "decisions", run_id=run_id)]
        found.append((run.status, run.error, bool(run.rerunnable), run.claimed_by, steps, decisions))
    return found


PLAYBOOKS = {
    "always after a failure": (
        cheap("boom"), cheap("skipped"), {**cheap("told"), "always": True}, cheap("skipped too"),
        {**cheap("boom"), "always": True}, {**cheap("last"), "always": True},
    ),
    "continue_on_error": (
        {**cheap("boom"), "continue_on_error": True}, cheap("next"), {**cheap("boom"), "continue_on_error": True},
    ),
    "a failing plan": (cheap("badplan"), cheap("skipped"), {**cheap("told"), "always": True}),
    "a failing last step": (cheap("first"), cheap("boom")),
    "three steps": (cheap("one"), cheap(), cheap("three")),
}  # fmt: skip


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
@pytest.mark.parametrize("steps", list(PLAYBOOKS.values()), ids=list(PLAYBOOKS))
@EVERY_DATABASE
def test_a_batch_records_what_the_one_run_path_records(
    store: Store,
    registry: ActionRegistry,
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
    steps: tuple[dict[str, Any], ...],
    mode: str,
) -> None:
    """The same playbook twice: run one at a time (batch_size 1: today's path) and in a batch; the same rows."""
    one = queue_runs(make_engine, ingest, make_alert, playbook(*steps, name="one"), ["a", "b"], server_mode=mode)
    assert Executor(store=store, registry=registry, batch_size=1).drain() == 2
    batched = queue_runs(make_engine, ingest, make_alert, playbook(*steps, name="two"), ["c", "d"], server_mode=mode)
    assert Executor(store=store, registry=registry).drain() == 2

    def named(found: list[Any], hosts: tuple[str, str]) -> list[Any]:
        return [repr(f).replace(f"'{h}'", "'HOST'") for f, h in zip(found, hosts, strict=True)]

    assert named(outcome(store, batched), ("c", "d")) == named(outcome(store, one), ("a", "b"))


# --------------------------------------------------------------------------- the queue's order


@EVERY_DATABASE
def test_a_fresh_alerts_run_is_claimed_before_a_storms_backlog(
    store: Store, make_engine: MakeEngine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    engine = make_engine(playbook(cheap(action="test.costly")))
    storm = ingest(engine, *[make_alert("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(12)], at=T0)
    fresh = ingest(engine, make_alert("GpuXidError", labels={"Hostname": "fresh"}), at=T0 + 1)
    (fresh_run,) = [d.run_id for d in fresh.decisions]
    storm_runs = [d.run_id for d in storm.decisions]

    assert [rows(store, "runs", id=r)[0].priority for r in (fresh_run, storm_runs[0])] == [0, 1]
    claimed = [store.claim_run("w:1", T0 + 2) for _ in range(13)]
    assert [c.id for c in claimed if c is not None] == [fresh_run, *storm_runs]


def third_is_waiting(store: Store) -> bool:
    """The next claim finds the third storm run, not the resolved run whose firing run is running."""
    third = store.claim_run("w:2", T0 + 2)
    assert third is not None
    return rows(store, "runs", id=third.id)[0].phase == "firing"


@EVERY_DATABASE
def test_a_batch_keeps_to_the_priority_of_the_queues_head(
    store: Store, make_engine: MakeEngine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    """A fresh alert's run is claimed in a batch of its own kind, not with a storm's runs it would wait for."""
    engine = make_engine(playbook(cheap()))
    storm = ingest(engine, *[make_alert("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(12)], at=T0)
    fresh = ingest(engine, make_alert("GpuXidError", labels={"Hostname": "fresh"}), at=T0 + 1)

    claims = [[r.id for r in store.claim_runs("w:1", T0 + 2, limit=10, batchable={"test.cheap"})] for _ in range(3)]

    storm_runs = [d.run_id for d in storm.decisions]
    assert claims == [[fresh.decisions[0].run_id], storm_runs[:10], storm_runs[10:]]


@EVERY_DATABASE
def test_a_resolved_run_still_waits_for_its_firing_run_in_a_storms_backlog(
    store: Store, make_engine: MakeEngine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    """Priority never overtakes `after_run_id`: the fresh resolved run waits until its firing run is final."""
    pb = playbook(cheap(action="test.costly"), on_resolved=[cheap(action="test.costly")])
    engine = make_engine(pb)
    alerts = [make_alert("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(12)]
    storm = [d.run_id for d in ingest(engine, *alerts, at=T0).decisions]
    resolved = make_alert("GpuXidError", labels={"Hostname": "s0"}, status="resolved")
    (resolved_run,) = [d.run_id for d in ingest(engine, resolved, at=T0 + 1).decisions]
    assert resolved_run is not None

    first = store.claim_run("w:1", T0 + 2)
    second = store.claim_run("w:1", T0 + 2)
    assert (first and first.id, second and second.id) == (storm[0], storm[1])
    assert first is not None and third_is_waiting(store)
    store.finish_run(storm[0], RunStatus.SUCCEEDED, now=T0 + 3, lease=first.lease)
    third = store.claim_run("w:1", T0 + 4)
    assert third is not None and third.id == resolved_run


@EVERY_DATABASE
def test_a_fresh_alert_reaches_its_first_step_while_a_storm_drains(
    store: Store,
    registry: ActionRegistry,
    actions: dict[str, Cheap],
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    """A started executor with a storm's backlog queued: a fresh alert's run is among the next claims."""
    engine = make_engine(playbook(cheap()))
    ingest(engine, *[make_alert("GpuXidError", labels={"Hostname": f"s{i}"}) for i in range(300)], at=T0)
    executor = Executor(store=store, registry=registry, batch_size=20, poll_interval=0.05)
    executor.start()
    try:
        while not actions["test.cheap"].executions:  # the storm is draining
            time.sleep(0.005)
        fresh = ingest(engine, make_alert("GpuXidError", labels={"Hostname": "fresh"}), at=T0 + 1)
        before = len(actions["test.cheap"].executions)
        (fresh_run,) = [d.run_id for d in fresh.decisions]
        executor.wake()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(r == fresh_run for r, _ in actions["test.cheap"].executions):
            time.sleep(0.005)
        position = [r for r, _ in actions["test.cheap"].executions].index(fresh_run)
    finally:
        executor.stop()
    # Only the batches in flight when it was stored (one per thread) ran before it, not the storm's backlog.
    assert before < 300 - 2 * 20
    assert position <= before + 2 * 20


@EVERY_DATABASE
def test_the_executors_threads_take_turns_through_a_batch(
    store: Store, registry: ActionRegistry, make_engine: MakeEngine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    """Two threads draining a backlog never claim beside a batch in flight (they would only wait for the GIL
    and the one writer): each claim and each batch's record happens while no other thread is in either."""
    run_ids = queue_runs(make_engine, ingest, make_alert, playbook(cheap()), [f"h{i}" for i in range(120)])
    inside = {"now": 0, "most": 0}
    guard = threading.Lock()

    def exclusive(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with guard:
                inside["now"] += 1
                inside["most"] = max(inside["most"], inside["now"])
            try:
                time.sleep(0.002)  # widen the window another thread would claim in
                return method(*args, **kwargs)
            finally:
                with guard:
                    inside["now"] -= 1

        return wrapped

    store.claim_runs = exclusive(store.claim_runs)  # type: ignore[method-assign]
    store.record_batch = exclusive(store.record_batch)  # type: ignore[method-assign]
    executor = Executor(store=store, registry=registry, threads=2, batch_size=10, poll_interval=0.05)
    executor.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(s != "succeeded" for s in statuses(store, run_ids)):
            time.sleep(0.01)
    finally:
        executor.stop()
    assert statuses(store, run_ids) == ["succeeded"] * len(run_ids)
    assert inside["most"] == 1


@EVERY_DATABASE
def test_a_single_run_gives_the_turn_back_while_its_step_runs(
    store: Store,
    registry: ActionRegistry,
    actions: dict[str, Cheap],
    make_engine: MakeEngine,
    ingest: Ingest,
    make_alert: MakeAlert,
) -> None:
    """A run of the one-run path (its step may wait on I/O for minutes) does not keep the other thread from
    draining batches meanwhile."""
    slow = queue_runs(make_engine, ingest, make_alert, playbook(cheap(action="test.costly"), name="slow"), ["s"])
    cheap_runs = queue_runs(
        make_engine, ingest, make_alert, playbook(cheap(), name="quick"), [f"h{i}" for i in range(30)]
    )
    release = threading.Event()
    actions["test.costly"].during = lambda _ctx: release.wait(30)
    executor = Executor(store=store, registry=registry, threads=2, batch_size=10, poll_interval=0.05)
    executor.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(s != "succeeded" for s in statuses(store, cheap_runs)):
            time.sleep(0.01)
        drained_while_slow_ran = statuses(store, slow) == ["running"]
    finally:
        release.set()
        executor.stop()
    assert statuses(store, cheap_runs) == ["succeeded"] * len(cheap_runs)
    assert drained_while_slow_ran
    assert statuses(store, slow) == ["succeeded"]
