"""remediate.store.facade.Store: one interface whatever the database."""

from __future__ import annotations

import inspect
from typing import Any

import remediate.store
from remediate.engine import Engine
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0, Ingest, MakeAlert

INTERFACE = {
    "claim_run", "next_run", "claim_next", "record", "steps_of", "start_attempt", "finish_attempt", "record_plan",
    "finish_step", "finish_run",
    "skip_steps", "heartbeat", "running_claims", "requeue_claims", "recover_stale", "pending_outcomes",
    "settle_pending", "check_lease", "approve", "queue_depth", "oldest_queued_at", "pause_state", "set_paused",
    "writer", "guard_reader", "breaker_ledger", "breaker_view", "breaker_state", "memory", "history", "run_detail",
    "run_links",
    "counts", "open", "upgrade", "schema_version", "write", "read", "ping", "probe_write", "check_file", "close",
    "checkpoint",
    "prune", "ladders", "reset_ladders", "report",
    "take_announcement", "record_announcement",
    "end_ui_session", "ui_session_ended", "record_login_failure", "login_retry_after",
}  # fmt: skip


def test_the_store_has_exactly_the_interface_its_callers_rely_on() -> None:
    public = {name for name, _ in inspect.getmembers(Store, callable) if not name.startswith("_")}

    assert public == INTERFACE


def test_every_name_of_the_package_is_exported() -> None:
    assert set(remediate.store.__all__) <= set(dir(remediate.store))
    imported_today = (
        "Store", "HistoryQuery", "PauseState", "DEFAULT_BUSY_TIMEOUT", "worker_identity", "encode_cursor",
        "decode_cursor", "EmptyGuardReader", "GuardReader", "IngestWriter", "StoreMemory", "MemoryStore",
    )  # fmt: skip
    for name in imported_today:
        assert name in remediate.store.__all__, name


@EVERY_DATABASE
def test_every_write_transaction_passes_the_stores_write(
    store: Store, engine: Engine, ingest: Ingest, make_alert: MakeAlert
) -> None:
    opened: list[str] = []
    write = store.write

    def counting_write() -> Any:
        opened.append("write")
        return write()

    store.write = counting_write  # type: ignore[method-assign]

    ingest(engine, make_alert("GpuXidError"), at=T0)  # the ingest writer
    claimed = store.claim_run("w:1", T0 + 1)  # the run queue
    store.memory().remember("k", {"v": 1}, run_id=1)  # action memory
    store.set_paused(True, by="alice", reason="", now=T0 + 2)  # the pause flag
    with store.breaker_ledger() as ledger:  # the breaker's rows
        ledger.save_state({"open": False})

    assert claimed is not None
    assert opened == ["write"] * 5
