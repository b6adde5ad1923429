"""remediate.store.decision_time: decision times that never decrease with the id, and time filters as id ranges.

The id-range form of `since`/`until` must give exactly the rows of the plain comparison on every store
whose times follow the ids: compared on random data (equal times, bounds at a row's time, empty
ranges, bounds outside the data) with every filter and cursor, page by page.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import HistoryQuery, Store
from remediate.store import schema as t
from remediate.store.decision_time import monotonic, time_conditions
from remediate.store.history import history_page
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows, store_backend
from tests.support.waiting import scaled
from tests.unit.store.support import PLAYBOOK, T0

PLAYBOOKS = ("xid", "disk", None)
TARGETS = ("node-a", "node-b", None)
STATUSES = ("succeeded", "failed", "duplicate")
ALERTNAMES = ("A", "B")


@pytest.fixture(scope="module")
def history_db() -> Iterator[sa.Engine]:
    """An empty SQLite database with remediate's schema, rewritten by each example."""
    engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    t.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO notifications (id, received_at, receiver, status, group_key, alert_count, raw) "
                "VALUES (1, 1, 'r', 'firing', 'g', 1, '{}')"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO alerts (id, notification_id, fingerprint, alertname, status, starts_at, labels, "
                "annotations, generator_url) VALUES (1, 1, 'f', 'A', 'firing', 's', '{}', '{}', '')"
            )
        )
    yield engine
    engine.dispose()


row_strategy = st.tuples(
    st.sampled_from([1, 1, 2]),  # the step of the id: gaps where rows were pruned
    st.sampled_from([0, 0, 0, 1, 2, 5]),  # the step of the time: often none (equal times)
    st.sampled_from(PLAYBOOKS),
    st.sampled_from(TARGETS),
    st.sampled_from(STATUSES),
    st.sampled_from(ALERTNAMES),
)


@st.composite
def bound(draw: st.DrawFn, times: list[float]) -> float | None:
    """No bound, a row's time exactly, just beside one, before the first / after the last row, or not
    a finite number (the API parses `nan` and `inf` as UNIX seconds)."""
    choices: list[Any] = [None, 50.0, 10_000.0, math.nan, math.inf, -math.inf]
    if times:
        at = draw(st.sampled_from(times))
        choices += [at, at + 0.25, at - 0.25]
    return draw(st.sampled_from(choices))


def _all_pages(conn: sa.Connection, query: HistoryQuery, follows_id: bool) -> list[list[tuple[int, float]]]:
    pages, cursor = [], None
    while True:
        entries, cursor = history_page(
            conn, HistoryQuery(**{**query.__dict__, "cursor": cursor}), time_follows_id=follows_id
        )
        pages.append([(e.id, e.time) for e in entries])
        if cursor is None:
            return pages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), steps=st.lists(row_strategy, max_size=40), first_id=st.integers(1, 5))
def test_time_filters_as_id_ranges_give_the_rows_of_the_plain_comparison(
    history_db: sa.Engine, data: st.DataObject, steps: list[tuple[Any, ...]], first_id: int
) -> None:
    at, decision_id, decisions = 100.0, first_id, []
    for id_step, step, playbook, target, status, alertname in steps:
        at += step
        decision_id += id_step
        decisions.append(
            {
                "id": decision_id,
                "created_at": at,
                "notification_id": 1,
                "alert_id": 1,
                "alertname": alertname,
                "fingerprint": "f",
                "alert_status": "firing",
                "playbook": playbook,
                "target": target,
                "decision": status,
                "reason": "r",
                "status": status,
            }
        )
    times = [d["created_at"] for d in decisions]
    with history_db.begin() as conn:
        conn.execute(sa.delete(t.decisions))
        if decisions:
            conn.execute(sa.insert(t.decisions), decisions)
    query = HistoryQuery(
        playbook=data.draw(st.sampled_from((None, *PLAYBOOKS[:2]))),
        alertname=data.draw(st.sampled_from((None, *ALERTNAMES))),
        target=data.draw(st.sampled_from((None, *TARGETS[:2]))),
        status=data.draw(st.sampled_from((None, *STATUSES))),
        since=data.draw(bound(times)),
        until=data.draw(bound(times)),
        limit=data.draw(st.sampled_from([1, 3, 50])),
    )

    with history_db.connect() as conn:
        plain = _all_pages(conn, query, follows_id=False)
        by_id = _all_pages(conn, query, follows_id=True)

    assert by_id == plain
    expected = [  # NaN compares as SQL NULL: no row
        d["id"]
        for d in decisions
        if (query.since is None or d["created_at"] >= query.since)
        and (query.until is None or d["created_at"] < query.until)
        and all(
            getattr(query, key) is None or d[key] == getattr(query, key)
            for key in ("playbook", "alertname", "target", "status")
        )
    ]
    assert [entry_id for page in plain for entry_id, _ in page] == sorted(expected, reverse=True)


@pytest.mark.parametrize("since", [None, math.nan, math.inf, -math.inf, 101.0])
@pytest.mark.parametrize("until", [None, math.nan, math.inf, -math.inf, 102.0])
def test_bounds_that_are_not_finite_numbers_give_the_rows_of_the_plain_comparison(
    history_db: sa.Engine, since: float | None, until: float | None
) -> None:
    """`?until=nan` parses as UNIX seconds: NaN compares as SQL NULL (no row), inf and -inf as numbers."""
    with history_db.begin() as conn:
        conn.execute(sa.delete(t.decisions))
        conn.execute(
            sa.insert(t.decisions),
            [
                {"id": i, "created_at": at, "notification_id": 1, "alert_id": 1, "alertname": "A",
                 "fingerprint": "f", "alert_status": "firing", "decision": "x", "reason": "r", "status": "x"}
                for i, at in ((1, 100.0), (2, 101.0), (3, 101.0), (4, 103.0))
            ],
        )  # fmt: skip
    query = HistoryQuery(since=since, until=until, limit=2)

    with history_db.connect() as conn:
        by_id = _all_pages(conn, query, follows_id=True)
        plain = _all_pages(conn, query, follows_id=False)

    assert by_id == plain
    expected = [i for i, at in ((4, 103.0), (3, 101.0), (2, 101.0), (1, 100.0))
                if (since is None or at >= since) and (until is None or at < until)]  # fmt: skip
    assert [entry_id for page in plain for entry_id, _ in page] == expected


def test_monotonic_raises_a_time_to_the_newest_before_it() -> None:
    rows_in = [{"created_at": 5.0}, {"created_at": 4.0}, {"created_at": 6.0}, {"created_at": 5.5}]

    assert [r["created_at"] for r in monotonic(rows_in, None)] == [5.0, 5.0, 6.0, 6.0]
    assert [r["created_at"] for r in monotonic(rows_in, 5.8)] == [5.8, 5.8, 6.0, 6.0]
    assert rows_in[1] == {"created_at": 4.0}  # the caller's rows are not changed
    assert monotonic([], 1.0) == []


@EVERY_DATABASE
def test_a_notification_received_earlier_but_stored_later_gets_the_newest_decision_time(
    request: pytest.FixtureRequest, store: Store, engine: Engine
) -> None:
    """The receive time is taken before the write lock: a worker can store a notification received 2 ms
    before the one another worker stored first. SQLite then stamps its decisions with the
    newest time stored; PostgreSQL keeps the receive time (its history does not rely on the order).
    The run keeps its receive time everywhere: cooldowns count from it."""
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0 + 0.002)
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-b"}), at=T0)
    ingest_alerts(engine, alert_payload("DiskFull", labels={"Hostname": "node-c"}), at=T0 + 1)

    times = [d.created_at for d in rows(store, "decisions")]

    if store_backend(request) == "postgresql":
        assert times == [T0 + 0.002, T0, T0 + 1]
    else:
        assert times == [T0 + 0.002, T0 + 0.002, T0 + 1]
    assert [r.created_at for r in rows(store, "runs")][:2] == [T0 + 0.002, T0]


def test_a_late_decision_is_in_the_window_of_its_stamped_time(store: Store, engine: Engine) -> None:
    """SQLite: `until` at the receive time of a late notification does not hide the decisions stored
    before it, and shows the late one where its stamped time is (after the first)."""
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-a"}), at=T0 + 10)
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-b"}), at=T0 + 5)
    ingest_alerts(engine, alert_payload("GpuXidError", labels={"Hostname": "node-c"}), at=T0 + 20)

    def targets(**bounds: float) -> list[str | None]:
        entries, _ = store.history.page(HistoryQuery(**bounds))
        return [e.target for e in entries]

    assert store.database.dialect.decision_time_follows_id
    assert targets(until=T0 + 10) == []
    assert targets(since=T0 + 10) == ["node-c", "node-b", "node-a"]
    assert targets(since=T0 + 10, until=T0 + 11) == ["node-b", "node-a"]
    assert targets(since=T0 + 21) == []
    assert targets(until=T0 + 21) == ["node-c", "node-b", "node-a"]


def test_the_time_bounds_of_a_page_are_index_seeks(store: Store) -> None:
    """SQLite: the page of a time filter is a range of an index on the id, the bounds one seek each on
    ix_decisions_created; no scan of the time index's range (what made a 30-day window 80 ms). A status
    with a playbook or alertname reads the status index alone (covering: no row read per entry)."""
    d = t.decisions
    for where, seek in (
        ((), "USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        ((d.c.playbook == "xid",), "USING COVERING INDEX ix_decisions_playbook (playbook=? AND id>? AND id<?)"),
        ((d.c.target == "a", d.c.status == "failed"), "ix_decisions_target_status (target=? AND status=? AND id>?"),
        ((d.c.playbook == "xid", d.c.status == "failed"), "COVERING INDEX ix_decisions_status (status=? AND id>? AND"),
        ((d.c.alertname == "A", d.c.status == "failed"), "COVERING INDEX ix_decisions_status (status=? AND id>? AND"),
    ):
        page = (
            sa.select(d.c.id)
            .where(*where, *time_conditions(T0, T0 + 3600, follows_id=True))
            .order_by(d.c.id.desc())
            .limit(51)
        )
        sql = str(page.compile(store.database.engine, compile_kwargs={"literal_binds": True}))
        with store.read() as conn:
            plan = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
        assert any(seek in step for step in plan), plan
        assert not [step for step in plan if "TEMP B-TREE" in step or step.startswith("SCAN")], plan
        assert [step for step in plan if "ix_decisions_created" in step] == [
            "SEARCH decisions USING COVERING INDEX ix_decisions_created (created_at>?)"
        ] * 2, plan


def test_two_workers_storing_at_once_keep_decision_times_in_id_order(db_url: str, registry: Any) -> None:
    """Two stores on one SQLite file (two gunicorn workers: each its own write lock handle, queued on the
    file's flock), each ingesting notifications whose receive times run behind the other's: whichever
    commits first, the decisions' times never decrease with the id, and each is the newest receive
    time stored up to it."""
    stores = [Store.open(db_url), Store.open(db_url)]
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, registry)])
    engines = [Engine(store=s, playbooks=playbooks, registry=registry) for s in stores]
    start = threading.Barrier(2)

    def worker(number: int) -> None:
        start.wait()
        for i in range(40):  # worker 1's receive times run 3 s behind worker 0's
            alert = alert_payload("GpuXidError", labels={"Hostname": f"node-{number}-{i}"})
            ingest_alerts(engines[number], alert, at=T0 + i - 3 * number)

    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=scaled(60))
        decisions = rows(stores[0], "decisions")
        received = {n.id: n.received_at for n in rows(stores[0], "notifications")}
    finally:
        for store in stores:
            store.close()

    assert len(decisions) == 80
    times = [d.created_at for d in decisions]
    assert times == sorted(times)
    newest = [max(received[n] for n in received if n <= d.notification_id) for d in decisions]
    assert times == newest
    assert any(d.created_at != received[d.notification_id] for d in decisions)  # some were raised
