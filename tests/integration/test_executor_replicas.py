"""Executors of two replicas on one real PostgreSQL 15 share the run queue by leases.

Each replica is an `Executor` with its own `Store` (its own connection pool) and its own replica name,
as two `remediate serve` pods are; the processes-and-kill -9 version is tests/e2e/test_replicas.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.log import LogAction
from remediate.config.settings import ExecutorSettings
from remediate.executor.leases import heartbeat_interval
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled, wait_until

T0 = 1_767_225_600.0
LEASE = 2.0
"""The shortest lease the `lease` setting accepts: the worst case for an owner that must keep renewing."""


def replica_settings(name: str, *, threads: int, poll_interval: float) -> ExecutorSettings:
    """The settings of replica `name`'s executor, with the short LEASE."""
    return ExecutorSettings(threads=threads, poll_interval=poll_interval, lease=LEASE, replica_name=name)


ON_POSTGRESQL = pytest.mark.parametrize("store", ["postgresql"], indirect=True)


class LongStep(Action):
    """Idempotent=False on purpose: were its run taken over, the step would not run again but fail the run."""

    name: ClassVar[str] = "test.long"
    idempotent: ClassVar[bool] = False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.executions: list[str] = []
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would": "wait"}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        with self._lock:
            self.executions.append(threading.current_thread().name)
        self.entered.set()
        time.sleep(self.seconds)  # busy in the action: no progress write for longer than the lease
        return {"slept": self.seconds}


@pytest.fixture
def long_step() -> LongStep:
    return LongStep(seconds=2.5 * LEASE)


class Counted(Action):
    """Records the run of each execution: a run executed twice shows up twice."""

    name: ClassVar[str] = "test.counted"

    def __init__(self) -> None:
        self.runs: list[int] = []
        self._lock = threading.Lock()

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        time.sleep(0.01)  # long enough for the other replica's threads to look for work meanwhile
        with self._lock:
            self.runs.append(ctx.run_id)
        return {}


@pytest.fixture
def counted() -> Counted:
    return Counted()


@pytest.fixture
def registry(long_step: LongStep, counted: Counted) -> ActionRegistry:
    return ActionRegistry([LogAction(), long_step, counted])


def _queue_run(make_engine: Callable[..., Engine]) -> int:
    engine = make_engine(
        {
            "name": "slow",
            "match": {"alertname": "GpuXidError"},
            "steps": [{"action": "test.long", "timeout": "60s"}, {"action": "log", "with": {"message": "after"}}],
        }
    )
    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0).decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


def test_the_heartbeat_is_a_quarter_of_the_lease_within_half_a_second_and_five() -> None:
    assert heartbeat_interval(60.0) == 5.0  # the default lease: twelve renewals before it expires
    assert heartbeat_interval(8.0) == 2.0
    assert heartbeat_interval(LEASE) == 0.5
    assert heartbeat_interval(600.0) == 5.0
    assert heartbeat_interval(0.3) == 0.5  # tests' short leases: never a busy loop


@ON_POSTGRESQL
def test_an_owner_busy_in_a_step_longer_than_the_lease_keeps_its_run_and_the_other_replica_never_takes_it(
    store: Store,
    pg_url: str,
    registry: ActionRegistry,
    long_step: LongStep,
    make_engine: Callable[..., Engine],
) -> None:
    """A step 2.5x the lease, two replicas watching each other: the owner's heartbeat thread renews the lease
    while the step runs, so the other replica's recovery (every lease/4) never finds it silent; the step
    runs once and the run succeeds on its owner alone."""
    run_id = _queue_run(make_engine)
    other_store = Store.open(pg_url)
    replicas = [
        Executor(store=s, registry=registry, settings=replica_settings(name, threads=1, poll_interval=0.05))
        for s, name in ((store, "replica-a"), (other_store, "replica-b"))
    ]
    recovered: list[int] = []
    watcher = replicas[1]
    watch = watcher.recover

    def recording_recover() -> list[int]:
        found = watch()
        recovered.extend(found)
        return found

    watcher.recover = recording_recover  # type: ignore[method-assign]
    try:
        for replica in replicas:
            replica.start()
        assert long_step.entered.wait(scaled(10))
        owner = store.leases.running_claims()[0].claimed_by
        beats: set[float] = set()
        deadline = time.monotonic() + 2.5 * LEASE + scaled(5)
        while time.monotonic() < deadline and run_json_of(store, run_id)["status"] == "running":
            claims = store.leases.running_claims()
            beats.update(c.heartbeat_at for c in claims if c.heartbeat_at is not None)
            time.sleep(0.1)
        finished = run_json_of(store, run_id)
    finally:
        for replica in replicas:
            replica.stop(timeout=scaled(5))
        other_store.close()

    assert finished["status"] == "succeeded", finished["error"]
    assert len(long_step.executions) == 1
    assert recovered == []  # the other replica looked (every lease/4) and found an owner alive every time
    # Renewed while the step ran: at least once per lease (heartbeat every lease/4).
    assert len(beats) >= 2.5 * LEASE / heartbeat_interval(LEASE) - 3, sorted(beats)
    assert [a["ran_on"] for s in finished["steps"] for a in s["attempts"]] == [owner, owner]
    assert finished["ran_on"] == [owner]
    assert owner.split(":")[0] in ("replica-a", "replica-b")


@ON_POSTGRESQL
def test_two_replicas_with_four_threads_each_execute_every_queued_run_exactly_once(
    store: Store,
    pg_url: str,
    registry: ActionRegistry,
    counted: Counted,
    make_engine: Callable[..., Engine],
) -> None:
    """Eight executor threads claiming from one queue (FOR UPDATE SKIP LOCKED): no run is claimed twice."""
    engine = make_engine(
        {"name": "counted", "match": {"alertname": "GpuXidError"}, "target": "node",
         "steps": [{"action": "test.counted"}]}
    )  # fmt: skip
    alerts = [alert_payload("GpuXidError", labels={"Hostname": f"node-{i}"}) for i in range(40)]
    queued = [d.run_id for d in ingest_alerts(engine, *alerts, at=T0).decisions]
    assert len(queued) == 40 and None not in queued
    other_store = Store.open(pg_url)
    replicas = [
        Executor(store=s, registry=registry, settings=replica_settings(name, threads=4, poll_interval=0.02))
        for s, name in ((store, "replica-a"), (other_store, "replica-b"))
    ]
    try:
        for replica in replicas:
            replica.start()
        wait_until(lambda: len(counted.runs) >= len(queued) and store.queue.queue_depth()["running"] == 0, 20)
    finally:
        for replica in replicas:
            replica.stop(timeout=scaled(5))
        other_store.close()

    assert sorted(counted.runs) == sorted(queued)
    details = [run_json_of(store, run_id) for run_id in queued]
    assert {d["status"] for d in details} == {"succeeded"}
    assert all(len(d["ran_on"]) == 1 for d in details)


@ON_POSTGRESQL
def test_recovery_leaves_a_run_whose_owner_renewed_its_lease_after_recovery_looked(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    """The requeue is conditional on the heartbeat recovery watched: an owner that renews between the
    look and the requeue (alive after all, only slow) keeps its run."""
    run_id = _queue_run(make_engine)
    assert store.queue.claim("replica-a:7", T0) is not None
    looked = store.leases.running_claims()
    store.leases.heartbeat([run_id], "replica-a:7", T0 + 1)

    assert store.leases.requeue_claims(looked, now=T0 + 2) == []
    assert run_json_of(store, run_id)["status"] == "running"
    assert store.leases.requeue_claims(store.leases.running_claims(), now=T0 + 3) == [run_id]


def test_an_executor_claims_under_its_replica_name_and_records_it_on_every_attempt(
    store: Store, registry: ActionRegistry, make_engine: Callable[..., Engine],
) -> None:  # fmt: skip
    engine = make_engine(
        {"name": "quick", "match": {"alertname": "GpuXidError"}, "steps": [{"action": "log", "with": {"message": "x"}}]}
    )
    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0).decisions
    executor = Executor(store=store, registry=registry, settings=ExecutorSettings(replica_name="remediate-1"))

    assert executor.drain() == 1

    assert executor.worker.startswith("remediate-1:")
    detail = run_json_of(store, decision.run_id)
    assert detail["ran_on"] == [executor.worker]
    assert detail["steps"][0]["attempts"][0]["ran_on"] == executor.worker
