"""remediate.store.queue and leases: claiming, the order of runs, recovery of a run whose executor died."""

from __future__ import annotations

import threading

from remediate.judging.engine import Engine
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows
from tests.unit.store.support import T0, queue_runs

pytestmark = EVERY_DATABASE


def test_oldest_queued_at_is_the_creation_of_the_first_run_still_queued(store: Store, engine: Engine) -> None:
    assert store.queue.oldest_queued_at() is None
    queue_runs(engine, 1, at=T0)
    later = [alert_payload("GpuXidError", labels={"Hostname": "node-late"})]
    ingest_alerts(engine, *later, at=T0 + 30)
    assert store.queue.oldest_queued_at() == T0

    claimed = store.queue.claim("host:1", T0 + 40)

    assert claimed is not None and claimed.started_at == T0 + 40
    assert store.queue.oldest_queued_at() == T0 + 30
    assert store.queue.claim("host:1", T0 + 41) is not None
    assert store.queue.oldest_queued_at() is None


def test_claim_run_returns_none_when_nothing_is_queued(store: Store) -> None:
    assert store.queue.claim("w", T0) is None


def test_claim_run_is_exclusive_across_stores_and_threads(store: Store, db_url: str, engine: Engine) -> None:
    run_ids = queue_runs(engine, 60)
    other = Store.open(db_url)
    claims: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(name: str, mine: Store) -> None:
        got: list[int] = []
        try:
            start.wait()
            while (claimed := mine.queue.claim(name, T0)) is not None:
                got.append(claimed.id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        claims[name] = got

    threads = [threading.Thread(target=worker, args=(f"worker-{i}", store if i % 2 else other)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        other.close()

    assert errors == []
    everything = [run_id for got in claims.values() for run_id in got]
    assert sorted(everything) == sorted(run_ids)  # every run once, none twice
    for name, got in claims.items():
        for run_id in got:
            assert rows(store, "runs", id=run_id)[0].claimed_by == name
