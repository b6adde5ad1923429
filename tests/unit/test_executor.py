"""remediate.executor on a SQLite file and (@EVERY_DATABASE) PostgreSQL too, with small fake actions."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.log import LogAction
from remediate.actions.schema import Param, ParamSchema
from remediate.config.settings import ExecutorSettings
from remediate.errors import ActionError, ClaimLostError, RetryableActionError
from remediate.executor.loop import Executor
from remediate.executor.metrics import ExecutorMetrics
from remediate.judging.engine import Engine
from remediate.runs import FinishedRun, RunWrite, StepEnd, StepStatus
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.store_json import run_json_of
from tests.support.stores import EVERY_DATABASE, rows, start_attempt, step_details
from tests.support.waiting import scaled

T0 = 1_767_225_600.0
MakeEngine = Callable[..., Engine]

FAST = ExecutorSettings(poll_interval=0.05)
"""An executor that looks for runs every 50 ms."""


class Recording(Action):
    """Counts its plan and execute calls; subclasses decide what execute does."""

    schema: ClassVar[ParamSchema] = ParamSchema(
        {"fail_times": Param(int, default=0), "seconds": Param(float, default=0.0), "note": Param(str, default="")}
    )

    def __init__(self) -> None:
        self.plans: list[Mapping[str, Any]] = []
        self.executions: list[Mapping[str, Any]] = []
        self.contexts: list[StepContext] = []

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.plans.append(params)
        return {"would": self.name, "note": params["note"]}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.executions.append(params)
        self.contexts.append(ctx)
        return self.act(params, len(self.executions))

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        return {"call": call}


class Flaky(Recording):
    name: ClassVar[str] = "test.flaky"

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        if call <= params["fail_times"]:
            raise RetryableActionError(f"busy, call {call}")
        return {"call": call}


class Broken(Recording):
    name: ClassVar[str] = "test.broken"

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        raise ActionError("permission denied")


class Slow(Recording):
    name: ClassVar[str] = "test.slow"

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        time.sleep(params["seconds"])
        return {"slept": params["seconds"]}


class Buggy(Recording):
    name: ClassVar[str] = "test.buggy"

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        return {"value": {}["missing"]}


class BadPlan(Recording):
    name: ClassVar[str] = "test.badplan"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        raise ActionError("cannot read the current state")


class PlanUnavailable(Recording):
    """Its plan cannot read the current state for now (an API outage): a retryable error."""

    name: ClassVar[str] = "test.planunavailable"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.plans.append(params)
        raise RetryableActionError("the API answered 503")


class Once(Recording):
    name: ClassVar[str] = "test.once"
    idempotent: ClassVar[bool] = False


class Again(Recording):
    name: ClassVar[str] = "test.again"
    idempotent: ClassVar[bool] = True


class LostAnswer(RetryableActionError):
    """A retryable error raised after the request may have reached its target."""

    maybe_applied = True


class SentOnce(Recording):
    """Not idempotent; its request may have arrived before each error."""

    name: ClassVar[str] = "test.sentonce"

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        raise LostAnswer(f"no answer to call {call}")


class SentAgain(SentOnce):
    name: ClassVar[str] = "test.sentagain"
    idempotent: ClassVar[bool] = True


class Gate(Recording):
    """Idempotent; its first execution waits until `release` is set (an executor stalled inside a step)."""

    name: ClassVar[str] = "test.gate"
    idempotent: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        if call == 1:
            self.entered.set()
            assert self.release.wait(10)
        return {"call": call}


class Observing(Recording):
    """Reads, while it executes, what the store already holds of its step (as recovery after a crash would)."""

    name: ClassVar[str] = "test.observing"
    store: Store
    run_id: int
    seen: tuple[str, Any, list[tuple[Any, Any]]]

    def act(self, params: Mapping[str, Any], call: int) -> dict[str, Any]:
        (seen,) = step_details(self.store, self.run_id)
        self.seen = (seen["status"], seen["plan"], [(a["outcome"], a["finished_at"]) for a in seen["attempts"]])
        return {"call": call}


@pytest.fixture
def actions() -> dict[str, Recording]:
    made = [Flaky(), Broken(), Slow(), Buggy(), BadPlan(), PlanUnavailable(), Once(), Again(), Observing()]
    made += [SentOnce(), SentAgain(), Gate()]
    return {a.name: a for a in made}


@pytest.fixture
def registry(actions: dict[str, Recording]) -> ActionRegistry:
    """Overrides the shared fixture: the shipped log action plus the fakes above."""
    return ActionRegistry([LogAction(), *actions.values()])


class Metrics(ExecutorMetrics):
    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []
        self.runs: list[str] = []
        self.run_done = threading.Event()

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.steps.append((action, outcome))

    def run_finished(self, status: str, playbook: str) -> None:
        self.runs.append(status)
        self.run_done.set()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def executor(store: Store, registry: ActionRegistry, metrics: Metrics) -> Executor:
    return Executor(store=store, registry=registry, retry_wait_max=0.01, metrics=metrics, settings=FAST)


def playbook(*steps: dict[str, Any], name: str = "pb", **changes: Any) -> dict[str, Any]:
    return {"name": name, "match": {"alertname": "GpuXidError"}, "steps": list(steps), **changes}


def step(action: str, retries: int = 2, timeout: str | None = None, **params: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, "with": params, "retries": retries}
    if timeout:
        spec["timeout"] = timeout
    return spec


def queue(make_engine: MakeEngine, pb: dict[str, Any], **kw: Any) -> int:
    engine = make_engine(pb, **kw)
    result = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0)
    (decision,) = result.decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


def run_row(store: Store, run_id: int) -> Any:
    (run,) = rows(store, "runs", id=run_id)
    return run


def outcomes(step_detail: dict[str, Any]) -> list[str]:
    return [a["outcome"] for a in step_detail["attempts"]]


# --------------------------------------------------------------------------- success and retries


@EVERY_DATABASE
def test_a_run_executes_its_steps_in_order_and_records_plan_and_result(
    store: Store, executor: Executor, metrics: Metrics, make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("log", message="hi {{ labels.Hostname }}"), step("test.once", note="x")))

    assert executor.drain() == 1

    run = run_row(store, run_id)
    assert (run.status, run.error, run.claimed_by) == ("succeeded", None, None)
    first, second = step_details(store, run_id)
    assert (first["status"], first["plan"], first["result"]) == (
        "succeeded",
        {"would_log": "hi node-a", "level": "info"},
        {"logged": "hi node-a", "level": "info"},
    )
    assert (second["status"], second["plan"], second["result"]) == (
        "succeeded",
        {"would": "test.once", "note": "x"},
        {"call": 1},
    )
    assert outcomes(second) == ["succeeded"]
    assert metrics.steps == [("log", "succeeded"), ("test.once", "succeeded")]
    assert metrics.runs == ["succeeded"]
    assert len(rows(store, "decisions", run_id=run_id)) == 1
    assert executor.drain() == 0


@EVERY_DATABASE
def test_a_one_step_run_takes_two_write_transactions_and_its_attempt_is_durable_before_the_action_runs(
    store: Store, executor: Executor, actions: dict[str, Recording], metrics: Metrics, make_engine: MakeEngine
) -> None:
    observing = actions["test.observing"]
    assert isinstance(observing, Observing)
    observing.store = store
    run_id = queue(make_engine, playbook(step("test.observing", note="n")))
    observing.run_id = run_id
    transactions = []
    write = store.write  # every write transaction of the store goes through it

    def counting_write(**options: Any) -> Any:
        transactions.append(1)
        return write(**options)

    store.write = counting_write  # type: ignore[method-assign]

    assert executor.run_once()

    # The claim with the plan and the start of the attempt; the end of the attempt, the step and the run.
    assert len(transactions) == 2
    # While the action ran, its plan and its started (unfinished) attempt were committed already.
    assert observing.seen == ("running", {"would": "test.observing", "note": "n"}, [(None, None)])
    run = run_row(store, run_id)
    assert (run.status, run.error, run.claimed_by) == ("succeeded", None, None)
    (detail,) = step_details(store, run_id)
    assert (detail["status"], detail["result"], outcomes(detail)) == ("succeeded", {"call": 1}, ["succeeded"])
    (decision,) = rows(store, "decisions", run_id=run_id)
    assert decision.status == "succeeded"
    assert metrics.runs == ["succeeded"]


@EVERY_DATABASE
def test_the_action_gets_the_runs_context(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.once")))

    executor.drain()

    (ctx,) = actions["test.once"].contexts
    assert (ctx.run_id, ctx.step_index, ctx.playbook, ctx.target) == (run_id, 0, "pb", "node-a")
    assert ctx.alert.labels["Hostname"] == "node-a"
    assert 0 < ctx.remaining() <= 300


@EVERY_DATABASE
def test_retryable_errors_are_retried_with_one_attempt_row_each(
    store: Store,
    executor: Executor,
    actions: dict[str, Recording],
    make_engine: MakeEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = queue(make_engine, playbook(step("test.flaky", retries=2, fail_times=2)))
    waits: list[float] = []
    sleep = time.sleep

    def recorded_sleep(seconds: float) -> None:
        waits.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", recorded_sleep)  # tenacity waits through time.sleep

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert detail["status"] == "succeeded"
    assert detail["result"] == {"call": 3}
    assert outcomes(detail) == ["retryable_error", "retryable_error", "succeeded"]
    assert [a["error"] for a in detail["attempts"]] == ["busy, call 1", "busy, call 2", None]
    assert [a["number"] for a in detail["attempts"]] == [1, 2, 3]
    assert all(a["finished_at"] is not None for a in detail["attempts"])
    assert run_row(store, run_id).status == "succeeded"
    assert len(actions["test.flaky"].executions) == 3
    # retry_wait_max=0.01 really shortens the backoff (tenacity's min would be 0.2 s): the waits tenacity asked
    # for, not how long they took on this machine.
    assert len(waits) >= 2 and max(waits) <= 0.01, waits


@EVERY_DATABASE
def test_retries_stop_after_the_steps_retries_and_fail_the_run(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.flaky", retries=1, fail_times=5), step("test.once")))

    executor.drain()

    flaky, after = step_details(store, run_id)
    assert outcomes(flaky) == ["retryable_error", "retryable_error"]
    assert (flaky["status"], flaky["error"]) == ("failed", "busy, call 2")
    # Finding 7: a step after a failed one is skipped, and says why (it stayed `pending` forever).
    assert (after["status"], after["error"]) == ("skipped", "skipped: step 0 1-test.flaky (test.flaky) failed")
    assert actions["test.once"].executions == []
    run = run_row(store, run_id)
    assert run.status == "failed"
    assert run.error == "step 0 1-test.flaky (test.flaky): busy, call 2"


@pytest.mark.parametrize(("action", "tries"), [("test.sentonce", 1), ("test.sentagain", 3)])
@EVERY_DATABASE
def test_an_error_after_the_request_may_have_arrived_is_retried_only_for_idempotent_actions(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine, action: str, tries: int
) -> None:
    """Finding 16: the executor never retries a non-idempotent step on an ambiguous (maybe applied) error."""
    run_id = queue(make_engine, playbook(step(action, retries=2)))

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert len(actions[action].executions) == tries
    expected = ["maybe_applied"] if tries == 1 else ["retryable_error"] * 3
    assert outcomes(detail) == expected
    assert run_row(store, run_id).status == "failed"


@EVERY_DATABASE
def test_after_a_failed_step_only_always_steps_run_and_the_run_stays_failed(
    store: Store, executor: Executor, actions: dict[str, Recording], metrics: Metrics, make_engine: MakeEngine
) -> None:
    """Finding 15: `always: true` runs a step (a notification) even when an earlier one failed."""
    run_id = queue(
        make_engine,
        playbook(
            step("test.broken"),
            step("test.once", note="skipped"),
            {**step("test.again", note="tell"), "always": True},
            step("log", message="skipped too"),
        ),
    )

    assert executor.drain() == 1

    broken, once, told, logged = step_details(store, run_id)
    assert (broken["status"], broken["error"]) == ("failed", "permission denied")
    reason = "skipped: step 0 1-test.broken (test.broken) failed"
    assert [(s["status"], s["error"]) for s in (once, logged)] == [("skipped", reason)] * 2
    assert (told["status"], told["result"], told["always"]) == ("succeeded", {"call": 1}, True)
    assert actions["test.once"].executions == []
    run = run_row(store, run_id)
    assert (run.status, run.error, run.claimed_by) == (
        "failed",
        "step 0 1-test.broken (test.broken): permission denied",
        None,
    )
    assert metrics.runs == ["failed"]


@EVERY_DATABASE
def test_a_continue_on_error_step_that_fails_is_recorded_and_the_run_goes_on_to_succeed(
    store: Store, executor: Executor, actions: dict[str, Recording], metrics: Metrics, make_engine: MakeEngine
) -> None:
    """A best-effort step (checkpoint the node's jobs before a drain) must not stop the drain."""
    run_id = queue(
        make_engine,
        playbook(
            {**step("test.broken"), "continue_on_error": True},
            step("test.once", note="runs"),
            {**step("test.broken"), "continue_on_error": True},
        ),
    )

    assert executor.drain() == 1

    first, once, last = step_details(store, run_id)
    assert [(s["status"], s["error"], s["continue_on_error"]) for s in (first, last)] == [
        ("failed", "permission denied", True)
    ] * 2
    assert (once["status"], once["continue_on_error"]) == ("succeeded", False)
    assert len(actions["test.once"].executions) == 1
    run = run_row(store, run_id)
    assert (run.status, run.error, run.claimed_by) == ("succeeded", None, None)
    assert metrics.runs == ["succeeded"]


@EVERY_DATABASE
def test_a_run_resumed_after_a_continue_on_error_failure_goes_on_with_its_next_step(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    """A restart between a best-effort step's failure and the next step: the failure is not the run's."""
    run_id = queue(
        make_engine, playbook({**step("test.broken"), "continue_on_error": True}, step("test.once", note="runs"))
    )
    claimed = store.queue.claim("other:1", T0)
    assert claimed is not None and claimed.id == run_id
    (broken, _) = store.queue.steps_of(run_id)
    start_attempt(store, claimed.lease, broken.id, 1, T0)
    failed = StepEnd(broken.id, StepStatus.FAILED, error="permission denied")
    store.queue.record(RunWrite(claimed.lease, ends=(failed,)), T0)
    store.leases.requeue_claims(store.leases.running_claims(), now=T0, own=True)

    executor.drain()

    assert len(actions["test.once"].executions) == 1
    assert run_row(store, run_id).status == "succeeded"


@EVERY_DATABASE
def test_an_always_step_that_fails_after_a_failure_keeps_the_first_error(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    run_id = queue(
        make_engine, playbook(step("test.broken"), {**step("test.flaky", retries=0, fail_times=1), "always": True})
    )

    executor.drain()

    _, flaky = step_details(store, run_id)
    assert (flaky["status"], flaky["error"]) == ("failed", "busy, call 1")
    assert run_row(store, run_id).error == "step 0 1-test.broken (test.broken): permission denied"


@EVERY_DATABASE
def test_zero_retries_means_one_attempt(store: Store, executor: Executor, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine, playbook(step("test.flaky", retries=0, fail_times=1)))

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert outcomes(detail) == ["retryable_error"]
    assert detail["status"] == "failed"


@EVERY_DATABASE
def test_a_non_retryable_error_fails_the_step_at_once(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.broken", retries=5)))

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert (detail["status"], detail["error"]) == ("failed", "permission denied")
    assert outcomes(detail) == ["failed"]
    assert len(actions["test.broken"].executions) == 1
    assert run_row(store, run_id).error == "step 0 1-test.broken (test.broken): permission denied"


@EVERY_DATABASE
def test_a_step_that_overruns_its_timeout_fails_as_timed_out(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.slow", timeout="200ms", seconds=0.6)))

    started = time.monotonic()
    executor.drain()

    assert time.monotonic() - started < 0.55
    (detail,) = step_details(store, run_id)
    assert detail["status"] == "failed"
    assert "timed out" in detail["error"]
    assert outcomes(detail) == ["timeout"]
    assert run_row(store, run_id).status == "failed"


@EVERY_DATABASE
def test_retries_end_at_the_step_deadline(store: Store, registry: ActionRegistry, make_engine: MakeEngine) -> None:
    # Ten retries with waits of 0.5 s then 1 s would take ~9.5 s; the 300 ms deadline stops them after the
    # first wait. The bound leaves a loaded host seconds of slack and still tells the two apart.
    executor = Executor(store=store, registry=registry, retry_wait_max=1.0)
    run_id = queue(make_engine, playbook(step("test.flaky", retries=10, timeout="300ms", fail_times=99)))

    started = time.monotonic()
    executor.drain()

    assert time.monotonic() - started < 5.0
    (detail,) = step_details(store, run_id)
    assert detail["status"] == "failed"
    assert 1 <= len(detail["attempts"]) < 11


@EVERY_DATABASE
def test_a_failing_plan_fails_the_step_without_executing(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.badplan")))

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert (detail["status"], detail["error"]) == ("failed", "plan failed: cannot read the current state")
    assert detail["attempts"] == []
    assert actions["test.badplan"].executions == []


@EVERY_DATABASE
def test_an_unexpected_exception_fails_the_step_and_the_executor_keeps_going(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(step("test.buggy", retries=3)), playbook(step("test.once"), name="after"))
    result = ingest_alerts(engine, alert_payload("GpuXidError"), at=T0)
    buggy_id, after_id = (d.run_id for d in result.decisions)

    assert executor.drain() == 2

    (detail,) = step_details(store, buggy_id)
    assert detail["status"] == "failed"
    assert detail["error"].startswith("unexpected KeyError: 'missing' at ")
    assert "test_executor.py" in detail["error"]
    assert outcomes(detail) == ["failed"]
    assert run_row(store, buggy_id).status == "failed"
    assert run_row(store, after_id).status == "succeeded"


@EVERY_DATABASE
def test_an_action_missing_at_execution_fails_the_step(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine, playbook(step("test.once")))
    executor = Executor(store=store, registry=ActionRegistry([LogAction()]), retry_wait_max=0.01)

    executor.drain()

    (detail,) = step_details(store, run_id)
    assert detail["status"] == "failed"
    assert "unknown action 'test.once'" in detail["error"]


# --------------------------------------------------------------------------- rerunnable runs


@EVERY_DATABASE
def test_a_run_whose_plan_fails_transiently_before_any_change_is_rerunnable(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.planunavailable", retries=0)))

    executor.drain()

    run = run_row(store, run_id)
    assert (run.status, bool(run.rerunnable)) == ("failed", True)


@EVERY_DATABASE
def test_a_run_whose_second_step_fails_transiently_after_the_first_changed_something_is_not_rerunnable(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    """Live: cordon succeeded, then the taint's plan failed in an API outage; the run was marked "failed before
    changing anything" (the steps read at the start still said no attempt), so the next delivery ran again."""
    pb = playbook(step("test.once"), step("test.planunavailable", retries=0), cooldown="30m")
    engine = make_engine(pb)
    alert = alert_payload("GpuXidError", labels={"Hostname": "node-a"})
    (decision,) = ingest_alerts(engine, alert, at=T0).decisions
    assert decision.run_id is not None

    executor.drain()

    run = run_row(store, decision.run_id)
    assert run.status == "failed" and "plan failed" in run.error
    assert bool(run.rerunnable) is False
    assert len(actions["test.once"].executions) == 1
    # The next delivery of the same occurrence is a duplicate, as for any run that changed something.
    (again,) = ingest_alerts(engine, alert, at=T0 + 60).decisions
    assert again.decision.value == "duplicate", again.reason
    assert executor.drain() == 0
    assert len(actions["test.once"].executions) == 1


# --------------------------------------------------------------------------- dry-run


@EVERY_DATABASE
def test_a_dry_run_run_only_plans(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.once", note="a"), step("test.broken")), mode="dry-run")

    executor.drain()

    assert run_row(store, run_id).status == "planned"
    once, broken = step_details(store, run_id)
    assert (once["status"], once["plan"], once["result"], once["attempts"]) == (
        "planned",
        {"would": "test.once", "note": "a"},
        None,
        [],
    )
    assert broken["status"] == "planned"
    assert actions["test.once"].executions == []
    assert actions["test.broken"].executions == []
    assert len(actions["test.once"].plans) == 1


# --------------------------------------------------------------------------- resolved runs


@EVERY_DATABASE
def test_on_resolved_steps_run_after_the_firing_run(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(step("test.once", note="fire"), on_resolved=[step("test.again", note="undo")]))
    ingest_alerts(engine, alert_payload("GpuXidError"), at=T0)
    ingest_alerts(engine, alert_payload("GpuXidError", status="resolved"), at=T0 + 1)

    assert executor.drain() == 2

    assert [p["note"] for p in actions["test.once"].executions] == ["fire"]
    assert [p["note"] for p in actions["test.again"].executions] == ["undo"]
    statuses = [(r.phase, r.status) for r in rows(store, "runs")]
    assert statuses == [("firing", "succeeded"), ("resolved", "succeeded")]


# --------------------------------------------------------------------------- recovery


def crash_during_first_step(store: Store, run_id: int) -> None:
    """What a killed executor leaves behind: a claimed run and a step with an open attempt."""
    claimed = store.queue.claim("crashed-host:1", T0)
    assert claimed is not None
    assert claimed.id == run_id
    (first, *_) = store.queue.steps_of(run_id)
    start_attempt(store, claimed.lease, first.id, 1, T0 + 1, plan={"would": "something"})
    assert store.leases.requeue_claims(store.leases.running_claims(), now=T0 + 2) == [run_id]


@EVERY_DATABASE
def test_an_interrupted_step_of_a_non_idempotent_action_fails_the_run(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.once"), step("log", message="later")))
    crash_during_first_step(store, run_id)

    executor.drain()

    interrupted, later = step_details(store, run_id)
    assert interrupted["status"] == "interrupted"
    assert "test.once is not idempotent, so it is not run again" in interrupted["error"]
    assert outcomes(interrupted) == ["interrupted"]
    assert (later["status"], later["error"]) == ("skipped", "skipped: step 0 1-test.once (test.once) failed")
    assert actions["test.once"].executions == []
    run = run_row(store, run_id)
    assert run.status == "failed"
    assert run.error.startswith(
        "step 0 1-test.once (test.once): interrupted during attempt 1 "
        "(the executor stopped while this step was running)"
    )


@EVERY_DATABASE
def test_an_interrupted_step_of_an_idempotent_action_runs_again(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.again"), step("log", message="later")))
    crash_during_first_step(store, run_id)

    executor.drain()

    again, later = step_details(store, run_id)
    assert (again["status"], again["error"]) == ("succeeded", None)
    assert outcomes(again) == ["interrupted", "succeeded"]
    assert later["status"] == "succeeded"
    assert len(actions["test.again"].executions) == 1
    assert run_row(store, run_id).status == "succeeded"


@EVERY_DATABASE
def test_steps_finished_before_a_crash_are_not_run_again(
    store: Store, executor: Executor, actions: dict[str, Recording], make_engine: MakeEngine
) -> None:
    run_id = queue(make_engine, playbook(step("test.once", note="done"), step("test.again")))
    claimed = store.queue.claim("crashed-host:1", T0)
    assert claimed is not None
    done, running = store.queue.steps_of(run_id)
    store.queue.record(
        RunWrite(claimed.lease, ends=(StepEnd(done.id, StepStatus.SUCCEEDED, {"already": True}),)), T0 + 1
    )
    start_attempt(store, claimed.lease, running.id, 1, T0 + 2)
    store.leases.requeue_claims(store.leases.running_claims(), now=T0 + 3)

    executor.drain()

    assert actions["test.once"].executions == []
    assert len(actions["test.again"].executions) == 1
    first, _ = step_details(store, run_id)
    assert first["result"] == {"already": True}
    assert run_row(store, run_id).status == "succeeded"


@EVERY_DATABASE
def test_the_executor_recovers_runs_of_a_dead_process_on_this_host(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_owner = f"{socket.gethostname()}:{int(child.stdout)}"
    run_id = queue(make_engine, playbook(step("test.again")))
    assert store.queue.claim(dead_owner, time.time()) is not None
    alive = queue(make_engine, playbook(step("test.again"), name="other"))
    assert store.queue.claim(f"{socket.gethostname()}:1", time.time()) is not None  # pid 1 lives

    assert executor.recover() == [run_id]
    assert run_row(store, alive).status == "running"


# --------------------------------------------------------------------------- background threads


@EVERY_DATABASE
def test_a_started_executor_runs_what_ingest_queues_and_stops(
    store: Store, registry: ActionRegistry, metrics: Metrics, make_engine: MakeEngine
) -> None:
    two_threads = ExecutorSettings(threads=2, poll_interval=0.05)
    executor = Executor(store=store, registry=registry, metrics=metrics, settings=two_threads)
    executor.start()
    try:
        engine = make_engine(playbook(step("log", message="x")), on_queued=executor.wake)
        (decision,) = ingest_alerts(engine, alert_payload("GpuXidError"), at=T0).decisions
        assert metrics.run_done.wait(scaled(10))
    finally:
        executor.stop(timeout=scaled(5))

    assert metrics.runs == ["succeeded"]
    assert run_row(store, decision.run_id).status == "succeeded"
    assert step_details(store, decision.run_id)[0]["status"] == "succeeded"


# --------------------------------------------------------------------------- ownership of a run


@EVERY_DATABASE
def test_a_stalled_executor_whose_run_was_taken_over_writes_nothing_more_and_runs_no_further_step(
    store: Store,
    db_url: str,
    registry: ActionRegistry,
    actions: dict[str, Recording],
    make_engine: MakeEngine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two executors on one database; the first, on "another host", stalls inside step 0 long enough for
    its lease to expire. The second takes the run over and finishes it; when the first wakes up it finds
    its claim gone, stops, and overwrites nothing (it used to record its step and run step 1 again)."""
    gate = actions["test.gate"]
    assert isinstance(gate, Gate)
    run_id = queue(make_engine, playbook(step("test.gate"), step("test.once", note="once")))
    stalled = Executor(store=store, registry=registry, retry_wait_max=0.01)
    stalled.worker = "other-host:4242"  # not this host: no pid to look at, only its lease
    first = threading.Thread(target=stalled.run_once)
    first.start()
    assert gate.entered.wait(scaled(5))
    other_store = Store.open(db_url)
    taker = Executor(store=other_store, registry=registry, retry_wait_max=0.01, settings=ExecutorSettings(lease=0.3))
    try:
        assert taker.recover() == []  # first sight of the claim: the lease runs from now
        time.sleep(0.4)
        assert taker.recover() == [run_id]  # no heartbeat for stale_after: the owner is gone
        assert taker.drain() == 1
        finished = run_json_of(store, run_id)
        assert finished["status"] == "succeeded"

        with caplog.at_level("WARNING", logger="remediate.executor"):
            gate.release.set()
            first.join(5)
    finally:
        gate.release.set()
        other_store.close()

    assert not first.is_alive()
    assert run_json_of(store, run_id) == finished  # not a single write from the stalled executor
    assert len(actions["test.once"].executions) == 1  # step 1 ran once, by the executor that took over
    assert len(gate.executions) == 2  # step 0 is idempotent: run again after the take-over
    assert outcomes(finished["steps"][0]) == ["interrupted", "succeeded"]
    assert any("is no longer claimed by other-host:4242" in r.getMessage() for r in caplog.records)


@EVERY_DATABASE
def test_a_run_whose_live_owner_on_this_host_stopped_renewing_its_lease_is_taken_over(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    """An owner alive on this host whose heartbeat stopped (SIGSTOPped, hung, its writes
    failing on a full disk) kept its run `running` forever. Now the lease decides, as for any other owner."""
    run_id = queue(make_engine, playbook(step("test.again")))
    owner = f"{socket.gethostname()}:1"  # pid 1 lives
    assert store.queue.claim(owner, time.time()) is not None
    executor.settings = dataclasses.replace(executor.settings, lease=0.3)

    assert executor.recover() == []  # first seen now: watched for a lease from here
    time.sleep(0.2)
    store.leases.heartbeat([run_id], owner, time.time())  # renewed: alive and well
    assert executor.recover() == []
    time.sleep(0.2)
    assert executor.recover() == []  # renewed less than a lease ago
    time.sleep(0.2)
    assert executor.recover() == [run_id]  # silent for more than a lease
    assert run_row(store, run_id).status == "queued"


@EVERY_DATABASE
def test_a_claim_older_than_the_process_now_holding_its_pid_is_recovered(
    store: Store, executor: Executor, make_engine: MakeEngine
) -> None:
    """A restarted container numbers its processes as before: a live pid may not be the claim's owner."""
    run_id = queue(make_engine, playbook(step("test.again")))
    newcomer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert store.queue.claim(f"{socket.gethostname()}:{newcomer.pid}", time.time() - 60) is not None

        assert executor.recover() == [run_id]
    finally:
        newcomer.kill()
        newcomer.wait()


@EVERY_DATABASE
def test_a_heartbeat_never_goes_backwards_when_the_wall_clock_does(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine, playbook(step("test.again")))
    assert store.queue.claim("host:7", T0) is not None

    store.leases.heartbeat([run_id], "host:7", T0 - 600)  # the clock was stepped back ten minutes

    assert run_row(store, run_id).heartbeat_at > T0


@EVERY_DATABASE
def test_progress_writes_check_the_claim_and_its_generation(store: Store, make_engine: MakeEngine) -> None:
    run_id = queue(make_engine, playbook(step("test.again")))
    first = store.queue.claim("host:7", T0)
    assert first is not None
    (record,) = store.queue.steps_of(run_id)
    start_attempt(store, first.lease, record.id, 1, T0 + 1)
    store.leases.requeue_claims(store.leases.running_claims(), now=T0 + 2)
    second = store.queue.claim("host:7", T0 + 3)  # the same worker name, a new claim
    assert second is not None
    assert second.generation == first.generation + 1

    with pytest.raises(ClaimLostError, match=f"run {run_id} is no longer claimed by host:7"):
        store.queue.record(
            RunWrite(first.lease, ends=(StepEnd(record.id, StepStatus.SUCCEEDED, {"stale": True}),)), T0 + 4
        )
    store.queue.record(
        RunWrite(second.lease, ends=(StepEnd(record.id, StepStatus.SUCCEEDED, {"fresh": True}),)), T0 + 4
    )

    assert step_details(store, run_id)[0]["result"] == {"fresh": True}


# --------------------------------------------------------------------------- run-finished listeners


@EVERY_DATABASE
def test_listeners_hear_of_each_run_end_once_recorded_and_a_broken_one_changes_nothing(
    store: Store, registry: ActionRegistry, make_engine: MakeEngine
) -> None:
    heard: list[FinishedRun] = []

    def broken(run: FinishedRun) -> None:
        raise RuntimeError("a listener's bug")

    def listener(run: FinishedRun) -> None:
        heard.append(run)
        assert run_row(store, run.run_id).status == run.status  # the store has it already

    executor = Executor(store=store, registry=registry, retry_wait_max=0.01, on_run_finished=[broken, listener])
    ok = queue(make_engine, playbook(step("log", message="hi"), name="fine"))
    assert executor.drain() == 1
    bad = queue(make_engine, playbook(step("test.broken", retries=0), name="bad"))
    assert executor.drain() == 1

    assert [(r.run_id, r.playbook, r.target, r.alertname, r.status, r.mode) for r in heard] == [
        (ok, "fine", "node-a", "GpuXidError", "succeeded", "enforce"),
        (bad, "bad", "node-a", "GpuXidError", "failed", "enforce"),
    ]
    assert heard[1].error is not None and "test.broken" in heard[1].error
    for run in heard:
        row = run_row(store, run.run_id)
        assert run.started_at == row.started_at
        assert run.started_at is not None and run.started_at <= run.finished_at
