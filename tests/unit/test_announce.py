"""remediate.executor.announce: the Announcer sends each run awaiting approval's message once, to each distinct webhook
of its chat steps; never for a run approved or cancelled first; a failure is recorded and not sent again;
only a POST that provably sent nothing is tried again. On a SQLite file."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from remediate.actions import default_registry
from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.log import LogAction
from remediate.actions.notify_sink import NotifyAction
from remediate.actions.schema import Param, ParamSchema
from remediate.config.values import to_sinks
from remediate.errors import ActionError, AmbiguousActionError, RetryableActionError
from remediate.executor.announce import FAILED, SENT, Announcer, announcing_actions
from remediate.judging.engine import Engine, IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.realsystems import WebhookRecorder
from tests.support.stores import rows
from tests.support.waiting import wait_until

T0 = 1_800_000_000.0


class FakeChat(Action):
    """A chat action whose announcements are recorded here, answering what `script` says (an error to raise)."""

    name: ClassVar[str] = "chat.fake"
    reports_run: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema({"url": Param(str, required=True, static=True)})

    def __init__(self) -> None:
        self.announced: list[tuple[str, StepContext]] = []
        self.script: list[Exception | None] = []

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}

    def announce(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.announced.append((params["url"], ctx))
        error = self.script.pop(0) if self.script else None
        if error is not None:
            raise error
        return {"posted_to": params["url"]}


class Outcomes(list[str]):
    def __call__(self, outcome: str) -> None:
        self.append(outcome)


def chat(url: str, name: str = "tell") -> dict[str, Any]:
    return {"action": "chat.fake", "name": name, "with": {"url": url}}


PLAYBOOK = {
    "name": "ask",
    "match": {"alertname": "GpuXidError"},
    "mode": "approve",
    "steps": [
        {"action": "log", "name": "note", "with": {"message": "xid"}},
        chat("http://chat/a", "tell a"),
        chat("http://chat/a", "tell a again"),
        chat("http://chat/b", "tell b"),
    ],
}


@pytest.fixture
def fake() -> FakeChat:
    return FakeChat()


@pytest.fixture
def chat_registry(fake: FakeChat) -> ActionRegistry:
    return ActionRegistry([LogAction(), fake])


@pytest.fixture
def engine(store: Store, chat_registry: ActionRegistry) -> Engine:
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, chat_registry, source="ask.yaml")])
    return Engine(store=store, playbooks=playbooks, registry=chat_registry)


@pytest.fixture
def outcomes() -> Outcomes:
    return Outcomes()


@pytest.fixture
def announcer(store: Store, chat_registry: ActionRegistry, outcomes: Outcomes) -> Announcer:
    return Announcer(
        store=store, registry=chat_registry, clock=lambda: T0 + 5, on_outcome=outcomes, retry_wait=0.01, tries=3
    )


def drain(announcer: Announcer) -> int:
    """Announce every run waiting to be, in this thread; how many."""
    return sum(1 for _ in iter(announcer.run_once, False))


def waiting(engine: Engine, *hosts: str) -> list[int]:
    result: IngestResult = ingest_alerts(
        engine, *(alert_payload("GpuXidError", labels={"Hostname": h}) for h in hosts), at=T0
    )
    return [d.run_id for d in result.decisions if d.run_id is not None]


def test_each_waiting_run_is_announced_once_to_each_distinct_webhook(
    store: Store,
    engine: Engine,
    announcer: Announcer,
    fake: FakeChat,
    outcomes: Outcomes,
) -> None:
    (run_id,) = waiting(engine, "node-a")

    assert drain(announcer) == 1
    assert drain(announcer) == 0  # taken once: never again

    assert [url for url, _ in fake.announced] == ["http://chat/a", "http://chat/b"]
    ctx = fake.announced[0][1]
    assert (ctx.run_id, ctx.step_index, ctx.playbook, ctx.target, ctx.mode, ctx.phase) == (
        run_id, 1, "ask", "node-a", "approve", "firing",
    )  # fmt: skip
    assert ctx.alert.labels["Hostname"] == "node-a" and ctx.alert.alertname == "GpuXidError"
    assert [(s.name, s.status) for s in ctx.steps] == [
        ("note", "pending"), ("tell a", "pending"), ("tell a again", "pending"), ("tell b", "pending"),
    ]  # fmt: skip
    assert fake.announced[1][1].step_index == 3
    assert outcomes == [SENT]
    (run,) = rows(store, "runs")
    assert (run.status, run.announced_at, run.announce_error) == ("awaiting_approval", T0 + 5, None)


def test_a_run_approved_or_cancelled_before_its_announcement_is_not_announced(
    store: Store,
    engine: Engine,
    announcer: Announcer,
    fake: FakeChat,
    outcomes: Outcomes,
) -> None:
    approved, cancelled, announced = waiting(engine, "node-a", "node-b", "node-c")
    store.queue.approve(approved, by="bob", now=T0 + 1)
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-b"}, status="resolved"), at=T0 + 2)

    assert drain(announcer) == 1

    assert {ctx.run_id for _, ctx in fake.announced} == {announced}
    assert [(r.id, r.status, r.announced_at) for r in rows(store, "runs")] == [
        (approved, "queued", None), (cancelled, "cancelled", None), (announced, "awaiting_approval", T0 + 5),
    ]  # fmt: skip
    assert outcomes == [SENT]


@pytest.mark.parametrize(
    "error",
    [
        AmbiguousActionError("POST answered 503: the receiver may have got it"),
        ActionError("POST answered 404: no_service"),
    ],
    ids=["maybe-sent", "refused"],
)
def test_a_failure_is_recorded_counted_and_not_sent_again(
    store: Store,
    engine: Engine,
    announcer: Announcer,
    fake: FakeChat,
    outcomes: Outcomes,
    error: Exception,
) -> None:
    waiting(engine, "node-a")
    fake.script = [error]  # webhook a fails; b is sent

    assert drain(announcer) == 1
    assert drain(announcer) == 0

    assert [url for url, _ in fake.announced] == ["http://chat/a", "http://chat/b"]  # a: one try only
    assert outcomes == [FAILED]
    (run,) = rows(store, "runs")
    assert run.announced_at == T0 + 5
    assert run.announce_error == f"step 1 tell a (chat.fake): {error}"


def test_a_post_that_sent_nothing_is_tried_again_up_to_tries(
    store: Store,
    engine: Engine,
    announcer: Announcer,
    fake: FakeChat,
    outcomes: Outcomes,
) -> None:
    first, second = waiting(engine, "node-a", "node-b")
    refused = RetryableActionError("POST failed: connection refused")
    # Run 1: a refused twice, then sent; b sent. Run 2: a refused three times (given up); b sent.
    fake.script = [refused, refused, None, None, refused, refused, refused, None]

    assert drain(announcer) == 2

    assert [(ctx.run_id, url) for url, ctx in fake.announced] == [
        (first, "http://chat/a"), (first, "http://chat/a"), (first, "http://chat/a"), (first, "http://chat/b"),
        (second, "http://chat/a"), (second, "http://chat/a"), (second, "http://chat/a"), (second, "http://chat/b"),
    ]  # fmt: skip
    assert outcomes == [SENT, FAILED]
    assert [r.announce_error for r in rows(store, "runs")] == [
        None,
        "step 1 tell a (chat.fake): POST failed: connection refused",
    ]


def test_the_thread_announces_when_woken_without_waiting_for_its_poll(
    store: Store, chat_registry: ActionRegistry, engine: Engine, fake: FakeChat
) -> None:
    announcer = Announcer(store=store, registry=chat_registry, poll_interval=60.0)
    (before,) = waiting(engine, "node-a")
    announcer.start()
    try:
        # Its first look, at start, finds the run stored before; then it sleeps up to its poll (60 s)...
        wait_until(lambda: rows(store, "runs")[0].announce_error is None and rows(store, "runs")[0].announced_at, 5)
        (after,) = waiting(engine, "node-b")
        announcer.wake()  # ... unless woken, as the ingest's on_queued does
        wait_until(lambda: len(fake.announced) == 4, 5, message="not announced after the wake-up")
        assert [ctx.run_id for _, ctx in fake.announced] == [before, before, after, after]
        wait_until(lambda: rows(store, "runs")[1].announce_error is None, 5)
    finally:
        announcer.stop()


def test_a_storm_of_wake_ups_costs_a_few_looks_not_one_each(
    store: Store, chat_registry: ActionRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[float] = []
    take = store.announcements.take

    def counting(now: float, actions: Any) -> Any:
        looks.append(now)
        return take(now, actions)

    monkeypatch.setattr(store.announcements, "take", counting)
    announcer = Announcer(store=store, registry=chat_registry, poll_interval=60.0, min_look_gap=0.2)
    announcer.start()
    try:
        wait_until(lambda: len(looks) == 1, 5)  # its first look, at start
        started = time.monotonic()
        for _ in range(100):  # an ingest storm: every notification that queued runs wakes it
            announcer.wake()
            time.sleep(0.005)
        wait_until(lambda: len(looks) >= 2, 5, message="a wake-up made no look")
        elapsed = time.monotonic() - started
        assert len(looks) <= 2 + elapsed / 0.2, (len(looks), elapsed)
    finally:
        announcer.stop()


def test_the_chat_actions_announce_and_no_other_shipped_action_does(store: Store) -> None:
    assert announcing_actions(default_registry()) == ("notify", "notify.slack", "notify.teams")


def test_a_notify_step_to_a_slack_sink_is_announced_once_and_a_webhook_sink_is_told_nothing(store: Store) -> None:
    with WebhookRecorder(path="/slack") as slack, WebhookRecorder(path="/bridge") as bridge:
        sinks = to_sinks(
            {"oncall": {"type": "slack", "url": slack.url}, "bridge": {"type": "webhook", "url": bridge.url}}
        )
        registry = ActionRegistry([LogAction(), NotifyAction(sinks, public_url="https://remediate.example.com")])
        tell = [{"action": "notify", "name": n, "with": {"sink": sink}} for n, sink in (
            ("page", "oncall"), ("page again", "oncall"), ("bridge", "bridge"),
        )]  # fmt: skip
        playbook = parse_playbook({**PLAYBOOK, "steps": [PLAYBOOK["steps"][0], *tell]}, registry, source="ask.yaml")
        engine = Engine(store=store, playbooks=PlaybookSet([playbook]), registry=registry)
        (run_id,) = waiting(engine, "node-a")

        assert drain(Announcer(store=store, registry=registry, clock=lambda: T0 + 5)) == 1

        (request,) = slack.requests  # two steps to one sink: one message
        assert request.header("Idempotency-Key") == f"remediate-run-{run_id}-awaiting-approval-1"
        assert f"https://remediate.example.com/ui/runs/{run_id}" in json.dumps(request.json)
        assert bridge.requests == []
        (run,) = rows(store, "runs")
        assert (run.announced_at, run.announce_error) == (T0 + 5, None)
