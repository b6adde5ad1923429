"""The announcements' rows (remediate.store.announcements): a run awaiting approval with a chat step is taken
once, oldest first; nothing else is ever taken; the outcome is recorded and shown by /runs/<id>.
On both databases (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa

from remediate.store import Store
from remediate.store.announcements import SENDING
from tests.conftest import alert_payload, ingest_alerts
from tests.support.store_json import run_json_of
from tests.support.stores import EVERY_DATABASE, rows
from tests.unit.store.support import T0, MakeEngine

CHAT = ("notify.slack", "notify.teams")
SLACK = {"action": "notify.slack", "name": "tell on-call", "with": {"url": "http://chat.invalid/hook"}}
LOG = {"action": "log", "with": {"message": "cordon would go here"}}


def playbook(name: str, alertname: str, *, mode: str = "approve", steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "match": {"alertname": alertname}, "mode": mode, "steps": steps}


ASK_AND_TELL = playbook("ask-and-tell", "GpuXidError", steps=[LOG, SLACK])
ASK_QUIETLY = playbook("ask-quietly", "DiskFull", steps=[LOG])
TELL_AT_ONCE = playbook("tell-at-once", "NodeDown", mode="enforce", steps=[SLACK])


def waiting_runs(engine: Any, *hosts: str, at: float = T0) -> list[int]:
    alerts = [alert_payload("GpuXidError", labels={"Hostname": host}) for host in hosts]
    return [d.run_id for d in ingest_alerts(engine, *alerts, at=at).decisions if d.run_id is not None]


@EVERY_DATABASE
def test_a_waiting_run_with_a_chat_step_is_taken_once_with_what_its_message_says(
    store: Store, make_engine: MakeEngine
) -> None:
    first, second = waiting_runs(make_engine(ASK_AND_TELL), "node-a", "node-b")

    taken = store.announcements.take(T0 + 5, CHAT)

    assert taken is not None
    assert (taken.id, taken.playbook, taken.target, taken.phase, taken.mode) == (
        first, "ask-and-tell", "node-a", "firing", "approve",
    )  # fmt: skip
    assert taken.alert_context["labels"]["Hostname"] == "node-a"
    assert taken.alert_context["alertname"] == "GpuXidError"
    assert [(s.idx, s.action, s.status, s.params) for s in taken.steps] == [
        (0, "log", "pending", {"level": "info", "message": "cordon would go here"}),
        (1, "notify.slack", "pending", {"url": "http://chat.invalid/hook", "message": "", "timeout": 10.0}),
    ]
    assert [(r.id, r.status, r.announced_at, r.announce_error) for r in rows(store, "runs")] == [
        (first, "awaiting_approval", T0 + 5, SENDING),
        (second, "awaiting_approval", None, None),
    ]
    # Taken once: the next take is the next run, then nothing.
    again = store.announcements.take(T0 + 6, CHAT)
    assert again is not None and again.id == second
    assert store.announcements.take(T0 + 7, CHAT) is None
    assert [r.announced_at for r in rows(store, "runs")] == [T0 + 5, T0 + 6]


@EVERY_DATABASE
def test_runs_without_a_chat_step_not_waiting_approved_or_cancelled_are_never_taken(
    store: Store, make_engine: MakeEngine
) -> None:
    engine = make_engine(ASK_AND_TELL, ASK_QUIETLY, TELL_AT_ONCE)
    approved, cancelled = waiting_runs(engine, "node-a", "node-b")
    quiet = ingest_alerts(engine, alert_payload("DiskFull", labels={"Hostname": "node-c"}), at=T0).decisions[0].run_id
    queued = ingest_alerts(engine, alert_payload("NodeDown", labels={"Hostname": "node-d"}), at=T0).decisions[0].run_id
    store.queue.approve(approved, by="bob", now=T0 + 1)
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-b"}, status="resolved"), at=T0 + 2)

    assert store.announcements.take(T0 + 3, CHAT) is None
    assert store.announcements.take(T0 + 3, ()) is None
    by_id = {r.id: r for r in rows(store, "runs")}
    assert [by_id[i].status for i in (approved, cancelled, quiet, queued)] == [
        "queued", "cancelled", "awaiting_approval", "queued",
    ]  # fmt: skip
    assert {(r.announced_at, r.announce_error) for r in by_id.values()} == {(None, None)}
    # The run without a chat step awaits approval all the same: a chat action named for it would take it.
    log_run = store.announcements.take(T0 + 4, ("log",))
    assert log_run is not None and log_run.id == quiet


@EVERY_DATABASE
def test_the_outcome_of_a_taken_run_is_recorded_and_never_on_a_run_not_taken(
    store: Store, make_engine: MakeEngine
) -> None:
    sent, failed, untouched = waiting_runs(make_engine(ASK_AND_TELL), "node-a", "node-b", "node-c")
    for _ in range(2):
        store.announcements.take(T0 + 5, CHAT)

    store.announcements.record(sent, error=None)
    store.announcements.record(failed, error="step 1 tell-on-call (notify.slack): POST answered 404")
    store.announcements.record(untouched, error="not taken: not recorded")

    assert [(r.id, r.announced_at, r.announce_error) for r in rows(store, "runs")] == [
        (sent, T0 + 5, None),
        (failed, T0 + 5, "step 1 tell-on-call (notify.slack): POST answered 404"),
        (untouched, None, None),
    ]
    assert [
        (b["announced_at"], b["announce_error"]) for b in map(lambda i: run_json_of(store, i), (sent, untouched))
    ] == [
        (T0 + 5, None),
        (None, None),
    ]
    assert run_json_of(store, failed)["announce_error"].endswith("POST answered 404")


class _ApprovedInBetween:
    """The store's transactions, with an approval of `run_id` committed just before the first write: as when
    a person approves while the announcer is between its read and its take."""

    def __init__(self, store: Store, run_id: int) -> None:
        self.store, self.run_id, self.approved = store, run_id, False

    def read(self) -> AbstractContextManager[sa.Connection]:
        return self.store.read()

    def write(self) -> AbstractContextManager[sa.Connection]:
        if not self.approved:
            self.approved = True
            self.store.queue.approve(self.run_id, by="bob", now=T0 + 4)
        return self.store.write()


@EVERY_DATABASE
def test_a_run_approved_between_the_look_and_the_take_is_not_taken_the_next_one_is(
    store: Store, make_engine: MakeEngine
) -> None:
    first, second = waiting_runs(make_engine(ASK_AND_TELL), "node-a", "node-b")
    store.announcements.tx = _ApprovedInBetween(store, first)

    taken = store.announcements.take(T0 + 5, CHAT)

    assert taken is not None and taken.id == second
    assert [(r.status, r.announced_at) for r in rows(store, "runs")] == [
        ("queued", None),
        ("awaiting_approval", T0 + 5),
    ]


@EVERY_DATABASE
def test_two_stores_on_one_database_take_each_run_once(store: Store, db_url: str, make_engine: MakeEngine) -> None:
    """Two replicas' announcers, one database: every run is taken by exactly one of them."""
    runs = waiting_runs(make_engine(ASK_AND_TELL), *(f"node-{i}" for i in range(6)))
    other = Store.open(db_url)
    try:
        taken: list[int] = []
        for turn in _alternating(store, other):
            found = turn.announcements.take(T0 + 5, CHAT)
            if found is None:
                break
            taken.append(found.id)
        assert sorted(taken) == runs
        assert other.announcements.take(T0 + 6, CHAT) is None
    finally:
        other.close()


def _alternating(*stores: Store) -> Iterator[Store]:
    while True:
        yield from stores
