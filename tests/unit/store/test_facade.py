"""remediate.store.facade.Store: one interface whatever the database."""

from __future__ import annotations

from typing import Any

from remediate.judging.engine import Engine
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0


@EVERY_DATABASE
def test_every_write_transaction_passes_the_stores_write(store: Store, engine: Engine) -> None:
    opened: list[str] = []
    write = store.write

    def counting_write() -> Any:
        opened.append("write")
        return write()

    store.write = counting_write  # type: ignore[method-assign]

    ingest_alerts(engine, alert_payload("GpuXidError"), at=T0)  # the ingest writer
    claimed = store.queue.claim("w:1", T0 + 1)  # the run queue
    store.memory.remember("k", {"v": 1}, run_id=1)  # action memory
    store.pause.set(True, by="alice", reason="", now=T0 + 2)  # the pause flag
    with store.breaker.ledger() as ledger:  # the breaker's rows
        ledger.save_state({"open": False})
    store.ui_sessions.end("sid", expires_at=T0 + 60, now=T0 + 3)  # the web pages' sessions
    store.ladders.reset("node-a", by="alice", reason="", now=T0 + 4)  # the ladders

    assert claimed is not None
    assert opened == ["write"] * 7
