"""A run whose store failed under it (a SQLite file locked by another process) is handed back by the
executor that held it, with what its step really did: never taken over by that same executor's recovery
as if "the executor stopped", which would drop the step's recorded end and run a sent change again."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.schema import ParamSchema
from remediate.config.settings import ExecutorSettings
from remediate.errors import StoreUnavailable
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import step_details

T0 = 1_767_225_600.0


class LocksTheStore(Action):
    """Not idempotent (a POST): its request is sent, then another process locks the database file before
    the step's end can be written."""

    name: ClassVar[str] = "test.lockstore"
    idempotent: ClassVar[bool] = False
    schema: ClassVar[ParamSchema] = ParamSchema({})

    def __init__(self, db: Path) -> None:
        self.db = db
        self.calls = 0
        self.locker: sqlite3.Connection | None = None

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would": "send"}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            self.locker = sqlite3.connect(self.db, isolation_level=None, check_same_thread=False)
            self.locker.execute("BEGIN EXCLUSIVE")
        return {"sent": self.calls}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "r.db"


@pytest.fixture
def short_store(db: Path) -> Iterator[Store]:
    """A store whose writers wait 0.2 s for the file's lock: the locked file fails the write at once."""
    opened = Store.open(f"sqlite:///{db}", busy_timeout=0.2)
    yield opened
    opened.close()


def test_a_run_the_store_failed_under_keeps_its_steps_real_end_and_is_not_said_stopped(
    db: Path, short_store: Store
) -> None:
    action = LocksTheStore(db)
    registry = ActionRegistry([action])
    spec = {"name": "pb", "match": {"alertname": "GpuXidError"},
            "steps": [{"name": "send", "action": "test.lockstore", "retries": 0}]}  # fmt: skip
    engine = Engine(store=short_store, playbooks=PlaybookSet([parse_playbook(spec, registry, source="pb.yaml")]),
                    registry=registry)  # fmt: skip
    (decision,) = ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0).decisions
    run_id = decision.run_id
    assert run_id is not None
    # A lease shorter than the outage: this executor's own recovery sees the run's heartbeat stand still.
    executor = Executor(store=short_store, registry=registry, retry_wait_max=0.01,
                        settings=ExecutorSettings(poll_interval=0.05, lease=0.01))  # fmt: skip

    with pytest.raises(StoreUnavailable):
        executor.run_once()
    assert action.locker is not None
    with contextlib.suppress(StoreUnavailable):  # as the housekeeping thread does
        executor.recover()  # the heartbeat has not moved: seen once while the file is locked ...
    time.sleep(0.05)  # ... for longer than the lease
    action.locker.rollback()
    action.locker.close()
    executor.recover()  # ... and again once the file is free, before the executor's loop hands the run back
    executor.drain()

    (step,) = step_details(short_store, run_id)
    assert action.calls == 1  # sent once
    assert (step["status"], step["result"], step["error"]) == ("succeeded", {"sent": 1}, None)
    assert [a["outcome"] for a in step["attempts"]] == ["succeeded"]
    run = short_store.history.run_detail(run_id)
    assert run.status == "succeeded"
    assert "executor stopped" not in str(step_details(short_store, run_id))
