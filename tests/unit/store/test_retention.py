"""Retention (remediate.store.retention): what `Store.retention.prune` deletes and keeps, in bounded batches, on
SQLite and a real PostgreSQL; ingest goes on while it runs; the database stops growing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.judging.engine import Engine, IngestResult
from remediate.runs import RunEnd, RunStatus, RunWrite, StepEnd, StepStatus
from remediate.store import Store
from remediate.store import schema as t
from remediate.store.retention import Pruner, PruneReport
from tests.conftest import alert_payload, ingest_alerts
from tests.support.retention import fill
from tests.support.stores import EVERY_DATABASE, start_attempt, table_counts
from tests.support.waiting import scaled

T0 = 1_767_225_600.0
DAY = 86400.0
NOW = T0 + 100 * DAY
KEEP = 90 * DAY
MakeEngine = Callable[..., Engine]

pytestmark = EVERY_DATABASE

XID = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "steps": [{"action": "log", "with": {"message": "one"}}, {"action": "log", "with": {"message": "two"}}],
    "on_resolved": [{"action": "log", "with": {"message": "undo"}}],
}
GATED = {**XID, "name": "gated", "match": {"alertname": "NeedsApproval"}, "mode": "approve"}


def ids(store: Store, table: str) -> list[int]:
    table_ = t.metadata.tables[table]
    with store.read() as conn:
        return list(conn.execute(sa.select(table_.c.id).order_by(table_.c.id)).scalars())


def finish_next(store: Store, at: float, finished: float, status: RunStatus = RunStatus.SUCCEEDED) -> int:
    """Claim the oldest queued run and finish it (one attempt of its first step) at `finished`."""
    claimed = store.queue.claim("w", at)
    assert claimed is not None
    first, *rest = store.queue.steps_of(claimed.id)
    start_attempt(store, claimed.lease, first.id, 1, at)
    store.queue.record(RunWrite(claimed.lease, ends=(StepEnd(first.id, StepStatus.SUCCEEDED, attempt=1),)), at)
    end = RunWrite(claimed.lease, skip=tuple(s.id for s in rest), skip_reason="x", run_end=RunEnd(claimed.id, status))
    store.queue.record(end, finished)
    return claimed.id


def finish_by_hand(store: Store, run: int, at: float) -> None:
    """Finish a run that is not the oldest queued one (claim_run takes the oldest)."""
    with store.write() as conn:
        conn.execute(
            sa.update(t.runs).where(t.runs.c.id == run).values(status=RunStatus.FAILED, finished_at=at, updated_at=at)
        )


def run_of(result: IngestResult) -> int:
    (decision,) = result.decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


class History(SimpleNamespace):
    pass


def build_history(store: Store, make_engine: MakeEngine) -> History:
    """Old history (100 days ago) of every kind, and a little of yesterday's."""
    engine = make_engine(XID, GATED)

    def xid(host: str, **kwargs: Any) -> dict[str, Any]:
        return alert_payload("GpuXidError", labels={"Hostname": host}, **kwargs)

    h = History()
    # A finished run, and a duplicate delivery of it: both go, with the notifications.
    h.old = run_of(ingest_alerts(engine, xid("node-a"), at=T0))
    finish_next(store, T0 + 1, T0 + 10)
    ingest_alerts(engine, xid("node-a"), at=T0 + 20)
    # A finished run whose occurrence AlertManager re-sent yesterday: still firing, its run is its dedupe record.
    h.resent = run_of(ingest_alerts(engine, xid("node-d"), at=T0 + 30))
    finish_next(store, T0 + 31, T0 + 40)
    h.resent_notification = ingest_alerts(engine, xid("node-d"), at=NOW - DAY).notification_id
    # A finished firing run whose resolved run is still queued (after_run_id): kept while that waits.
    h.awaited = run_of(ingest_alerts(engine, xid("node-e"), at=T0 + 50))
    finish_next(store, T0 + 51, T0 + 60)
    h.resolving = run_of(ingest_alerts(engine, xid("node-e", status="resolved"), at=T0 + 70))
    # A run created long ago that finished (failed) yesterday: "older than" is from its end.
    h.late = run_of(ingest_alerts(engine, xid("node-f"), at=T0 + 80))
    finish_by_hand(store, h.late, NOW - DAY)
    # Never pruned, however old: a queued run and one awaiting approval.
    h.queued = run_of(ingest_alerts(engine, xid("node-b"), at=T0 + 90))
    h.awaiting = run_of(
        ingest_alerts(engine, alert_payload("NeedsApproval", labels={"Hostname": "node-c"}), at=T0 + 100)
    )
    # A notification of two alerts: one run finished, one still queued; the notification stays whole.
    mixed = ingest_alerts(engine, xid("node-g"), xid("node-h"), at=T0 + 110)
    h.mixed_notification = mixed.notification_id
    h.mixed_runs = [d.run_id for d in mixed.decisions]
    finish_by_hand(store, h.mixed_runs[0], T0 + 120)
    # Recent: kept.
    h.recent_unmatched = ingest_alerts(engine, alert_payload("Unmatched"), at=NOW - DAY).notification_id
    # Breaker claims: one released long ago (goes), one still open (stays).
    with store.breaker.ledger() as ledger:
        for node, run in (("node-x", h.old), ("node-y", h.queued)):
            ledger.add_claim(SimpleNamespace(node=node, kind="cordon", run_id=run, claimed_at=T0))
        ledger.release("node-x", now=T0 + 5, reason="uncordoned")
    return h


def run_ids(store: Store) -> set[int]:
    return set(ids(store, "runs"))


def test_prune_deletes_old_finished_history_and_keeps_what_is_unfinished_recent_or_needed(
    store: Store, make_engine: MakeEngine
) -> None:
    h = build_history(store, make_engine)
    before = table_counts(store, PruneReport.TABLES)
    all_runs = run_ids(store)

    dry = store.retention.prune(KEEP, now=NOW, dry_run=True)
    assert table_counts(store, PruneReport.TABLES) == before, "a dry run deletes nothing"
    report = store.retention.prune(KEEP, now=NOW)

    assert dry.counts() == report.counts() and dry.dry_run and not report.dry_run
    kept = {h.resent, h.awaited, h.resolving, h.late, h.queued, h.awaiting, h.mixed_runs[1]}
    assert run_ids(store) == kept
    pruned_runs = all_runs - kept
    assert pruned_runs == {h.old, h.mixed_runs[0]}
    with store.read() as conn:
        statuses = dict(conn.execute(sa.select(t.runs.c.id, t.runs.c.status)).all())
        # Every kept run keeps its alert, notification, decision and steps.
        for run in run_ids(store):
            detail = store.history.run_detail(run)
            assert detail.steps, run
        left_decisions = conn.execute(sa.select(t.decisions.c.run_id, t.decisions.c.decision)).all()
        notifications = set(conn.execute(sa.select(t.notifications.c.id)).scalars())
        open_claims = conn.execute(sa.select(t.breaker_claims.c.node)).scalars().all()
    assert statuses[h.awaiting] == RunStatus.AWAITING_APPROVAL and statuses[h.queued] == RunStatus.QUEUED
    assert {run for run, _ in left_decisions if run is not None} == run_ids(store)
    # The old duplicate went; yesterday's two (node-d re-sent, an unmatched alert) stay.
    assert sorted(d for r, d in left_decisions if r is None) == ["duplicate", "unmatched"]
    assert {h.resent_notification, h.mixed_notification, h.recent_unmatched} <= notifications
    assert open_claims == ["node-y"]
    assert report.counts() == {
        "notifications": before["notifications"] - table_counts(store, PruneReport.TABLES)["notifications"],
        "alerts": before["alerts"] - table_counts(store, PruneReport.TABLES)["alerts"],
        "decisions": before["decisions"] - table_counts(store, PruneReport.TABLES)["decisions"],
        "runs": len(pruned_runs),
        "steps": before["steps"] - table_counts(store, PruneReport.TABLES)["steps"],
        "attempts": before["attempts"] - table_counts(store, PruneReport.TABLES)["attempts"],
        "breaker_claims": 1,
    }
    # node-a's run and its duplicate's notifications; node-g's run, not its notification (node-h is queued).
    assert (report.notifications, report.alerts, report.runs, report.attempts, report.decisions) == (2, 2, 2, 1, 3)

    # Nothing more to prune: a second prune deletes nothing; a shorter retention reaches yesterday's.
    assert store.retention.prune(KEEP, now=NOW).total == 0
    assert store.retention.prune(0.5 * DAY, now=NOW).runs >= 1


def test_once_the_queued_resolved_run_finishes_the_firing_run_it_waited_for_goes_too(
    store: Store, make_engine: MakeEngine
) -> None:
    h = build_history(store, make_engine)
    store.retention.prune(KEEP, now=NOW)
    assert h.awaited in run_ids(store)
    with store.write() as conn:
        conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id == h.resolving)
            .values(status=RunStatus.SUCCEEDED, finished_at=T0 + 200, updated_at=T0 + 200)
        )
    store.retention.prune(KEEP, now=NOW)
    assert not {h.awaited, h.resolving} & run_ids(store)


@contextmanager
def counting_writes(store: Store) -> Iterator[list[float]]:
    """Every write transaction's time holding the store's write door, in seconds."""
    holds: list[float] = []
    original = store.write

    @contextmanager
    def timed() -> Iterator[sa.Connection]:
        with original() as conn:
            started = time.perf_counter()
            yield conn
            holds.append(time.perf_counter() - started)

    store.write = timed  # type: ignore[method-assign]
    try:
        yield holds
    finally:
        store.write = original  # type: ignore[method-assign]


def test_prune_works_in_batches_of_at_most_batch_size_rows_each_its_own_write_transaction(store: Store) -> None:
    fill(store, 230, T0)
    with counting_writes(store) as holds:
        report = store.retention.prune(KEEP, now=NOW, batch_size=50, max_hold=None)
    assert report.runs == report.notifications == report.steps == report.attempts == 230
    assert report.decisions == 230
    # runs: 5 batches (50 x 4 + 30), notifications: 5; no runless decisions, no claims.
    assert report.batches == len(holds) == 10
    assert table_counts(store, PruneReport.TABLES) == dict.fromkeys(PruneReport.TABLES, 0)


def test_a_batch_that_held_the_write_lock_too_long_halves_the_next(store: Store) -> None:
    fill(store, 100, T0)
    sizes: list[int] = []
    original = store.write

    @contextmanager
    def counted() -> Iterator[sa.Connection]:
        before = sum(table_counts(store, ("runs", "notifications")).values())
        with original() as conn:
            yield conn
        sizes.append(before - sum(table_counts(store, ("runs", "notifications")).values()))

    store.write = counted  # type: ignore[method-assign]
    report = store.retention.prune(KEEP, now=NOW, batch_size=64, max_hold=1e-9)  # every batch is "too long"
    store.write = original  # type: ignore[method-assign]
    # Runs 64, 32, then the last 4; the notifications start again from batch_size.
    assert sizes == [64, 32, 4, 64, 32, 4] and report.batches == 6
    assert table_counts(store, PruneReport.TABLES) == dict.fromkeys(PruneReport.TABLES, 0)


def test_ingest_goes_on_while_a_big_prune_runs(store: Store, make_engine: MakeEngine) -> None:
    fill(store, 3000, T0)
    engine = make_engine(XID)
    done: list[float] = []
    finished: list[float] = []
    pruning = threading.Event()

    def alerts() -> None:
        pruning.wait(10)
        for i in range(20):
            started = time.perf_counter()
            ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": f"live-{i}"}), at=NOW)
            done.append(time.perf_counter() - started)
            finished.append(time.perf_counter())

    thread = threading.Thread(target=alerts)
    thread.start()
    with counting_writes(store) as holds:
        pruning.set()
        report = store.retention.prune(KEEP, now=NOW, batch_size=200, pause=0.005)
        pruned_at = time.perf_counter()
    thread.join(30)
    assert report.runs == 3000 and len(done) == 20
    longest_hold, longest_ingest = max(holds), max(done)
    dialect = store.database.engine.dialect.name
    print(f"\n{dialect}: 3000 runs pruned in {report.batches} batches; longest write-lock hold "
          f"{longest_hold * 1000:.1f} ms; slowest of 20 concurrent ingests {longest_ingest * 1000:.1f} ms "
          f"({sum(1 for f in finished if f < pruned_at)} done before the prune ended)")  # fmt: skip
    # A batch of 200 runs with their children holds the lock for a few tens of ms; an ingest waits
    # for at most one batch, never for the whole prune.
    assert finished and finished[0] < pruned_at, "ingest went on during the prune, not after it"
    assert longest_hold < 2.0
    assert longest_ingest < 2.0
    assert len(ids(store, "runs")) == 20


TABLES = ("notifications", "alerts", "decisions", "runs", "steps", "attempts")


def size(store: Store) -> dict[str, int]:
    """SQLite: the file's pages and how many are free. PostgreSQL: bytes of the tables and of their indexes."""
    with store.read() as conn:
        if store.database.engine.dialect.name == "sqlite":
            return {
                "pages": int(conn.exec_driver_sql("PRAGMA page_count").scalar_one()),
                "free": int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()),
            }
        heap, indexes = conn.execute(
            sa.text(
                "SELECT sum(pg_table_size(n::regclass)), sum(pg_indexes_size(n::regclass)) "
                "FROM unnest(CAST(:names AS text[])) n"
            ),
            {"names": list(TABLES)},
        ).one()
        return {"tables": int(heap), "indexes": int(indexes)}


def test_the_database_stops_growing_pruned_space_is_used_again(store: Store) -> None:
    fill(store, 1500, T0)
    full = size(store)
    report = store.retention.prune(KEEP, now=NOW)
    assert report.runs == 1500 and table_counts(store, PruneReport.TABLES) == dict.fromkeys(PruneReport.TABLES, 0)
    pruned = size(store)
    if store.database.engine.dialect.name == "sqlite":
        # The pages are free, not given back to the file system; the next 1,500 runs reuse them.
        assert pruned["pages"] == full["pages"] and pruned["free"] > 0.8 * full["pages"]
        fill(store, 1500, NOW, first=1500)
        refilled = size(store)
        print(f"\nsqlite pages: full {full}, pruned {pruned}, refilled {refilled}")
        assert refilled["pages"] <= full["pages"] * 1.02
        assert refilled["free"] < 0.2 * full["pages"]
    else:
        # The rows are gone; once VACUUM has run (autovacuum, in production) the tables' space is used
        # again. Index pages emptied by the prune come back only after a later VACUUM: they may grow once.
        with store.database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")
        fill(store, 1500, NOW, first=1500)
        refilled = size(store)
        print(f"\npostgresql bytes: full {full}, pruned {pruned}, refilled after VACUUM {refilled}")
        assert refilled["tables"] <= full["tables"] * 1.05


def test_a_prune_stops_between_batches_when_asked(store: Store) -> None:
    fill(store, 120, T0)
    stopping = threading.Event()
    batches: list[int] = []
    original = store.write

    @contextmanager
    def stop_after_two() -> Iterator[sa.Connection]:
        with original() as conn:
            yield conn
        batches.append(1)
        if len(batches) == 2:
            stopping.set()

    store.write = stop_after_two  # type: ignore[method-assign]
    # max_hold=None: batches keep their size however slow this host is (a slow one halved the second: 30 runs).
    report = store.retention.prune(KEEP, now=NOW, batch_size=20, stopping=stopping, max_hold=None)
    assert report.runs == 40 and report.batches == 2
    store.write = original  # type: ignore[method-assign]
    assert store.retention.prune(KEEP, now=NOW, batch_size=20, max_hold=None).runs == 80, (
        "a later prune goes on from there"
    )


def test_prune_refuses_a_batch_size_below_one_and_a_negative_age(store: Store) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        store.retention.prune(KEEP, now=NOW, batch_size=0)
    with pytest.raises(ValueError, match="older_than"):
        store.retention.prune(-1, now=NOW)


def test_the_pruner_prunes_periodically_and_logs_one_line(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    fill(store, 30, T0)
    clock = [NOW]
    pruner = Pruner(
        store.retention.prune, KEEP, every=0.05, first_after=0.0, batch_size=10, pause=0.0, clock=lambda: clock[0]
    )
    caplog.set_level("INFO", logger="remediate.retention")
    pruner.start()
    try:
        deadline = time.monotonic() + scaled(10)
        while len(pruner.reports) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [r.runs for r in pruner.reports[:2]] == [30, 0]
        fill(store, 5, NOW - 91 * DAY, first=30)
        while sum(r.runs for r in pruner.reports) < 35 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        pruner.stop()
    assert sum(r.runs for r in pruner.reports) == 35
    lines = [r.getMessage() for r in caplog.records if r.name == "remediate.retention"]
    assert lines[0].startswith("retention: pruned history older than 7.776e+06s: notifications=30 alerts=30")
    assert len(lines) == 2, "a prune that deleted nothing says nothing"


def test_the_executor_process_prunes_with_the_retention_setting_but_never_below_a_cooldown(
    store: Store, registry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from remediate.config.settings import Settings
    from remediate.playbooks.loading import parse_playbook
    from remediate.playbooks.model import PlaybookSet
    from remediate.serve.launcher import history_pruner

    def playbooks(cooldown: str) -> PlaybookSet:
        return PlaybookSet([parse_playbook({**XID, "cooldown": cooldown}, registry, source="xid.yaml")])

    assert history_pruner(Settings.of(retention=0.0), store, playbooks("1h")) is None
    # A 120-day cooldown reads back runs of 120 days: they stay, whatever `retention` says.
    longest = history_pruner(Settings.of(retention=KEEP), store, playbooks("120d"))
    assert longest is not None and longest.keep == 120 * DAY
    fill(store, 40, time.time() - 100 * DAY)
    fill(store, 3, time.time() - DAY, first=40)
    pruner = history_pruner(Settings.of(retention=KEEP), store, playbooks("1h"), every=0.02)
    assert pruner is not None and pruner.keep == KEEP and pruner.first_after == 0.02
    caplog.set_level("INFO", logger="remediate.retention")
    pruner.start()
    try:
        deadline = time.monotonic() + scaled(10)
        while not pruner.reports and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        pruner.stop()
    assert pruner.reports[0].runs == 40 and table_counts(store, PruneReport.TABLES)["runs"] == 3
    assert any("notifications=40" in r.getMessage() for r in caplog.records)


def test_two_replicas_pruning_at_once_delete_each_row_once(store: Store) -> None:
    fill(store, 600, T0)
    other = Store.open(store.database.engine.url.render_as_string(hide_password=False))
    reports: list[PruneReport] = []
    errors: list[BaseException] = []

    def prune(on: Store) -> None:
        try:
            reports.append(on.retention.prune(KEEP, now=NOW, batch_size=50))
        except BaseException as exc:  # the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=prune, args=(s,)) for s in (store, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    other.close()
    assert errors == []
    total = reports[0] + reports[1]
    assert (total.runs, total.steps, total.attempts, total.decisions, total.alerts, total.notifications) == (600,) * 6
    assert table_counts(store, PruneReport.TABLES) == dict.fromkeys(PruneReport.TABLES, 0)
