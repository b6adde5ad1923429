"""SQLite's plan of a history page for each filter and each pair of filters: an index seek on every filter,
or a walk of an index that holds every filtered column (no table row read per entry), in id order.

Without statistics (remediate never runs ANALYZE) SQLite picks among equally good-looking indexes blindly:
with one (column, id) index per filter, a playbook and a target together walked the playbook's index and
read each of its rows for the target (a busy playbook on a quiet node: 30-800 ms on 1M runs,
bench/history.py). The plans are those of the statement `history_page` itself sends.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from remediate.store import HistoryQuery, Store
from remediate.store.history import history_page

FILTERS = {"playbook": "gpu-xid", "alertname": "GpuXidError", "target": "node-a", "status": "failed"}
COMBINATIONS = [combo for size in (1, 2) for combo in itertools.combinations(FILTERS, size)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    opened = Store.open(f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.db'}")
    yield opened
    opened.close()


def page_plan(store: Store, query: HistoryQuery) -> list[str]:
    """EXPLAIN QUERY PLAN of the page statement `history_page` runs for `query`."""
    sent: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        sent.append((statement, parameters))

    with store.read() as conn:
        sa.event.listen(conn.engine, "before_cursor_execute", record)
        try:
            history_page(conn, query, time_follows_id=True)
        finally:
            sa.event.remove(conn.engine, "before_cursor_execute", record)
        ((statement, parameters),) = sent
        return [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]


@pytest.mark.parametrize("combination", COMBINATIONS, ids="+".join)
@pytest.mark.parametrize("bounds", [{}, {"since": 1.0e9}], ids=["any time", "since"])
def test_each_filter_and_each_pair_of_filters_is_an_index_seek_or_an_index_only_walk(
    store: Store, combination: tuple[str, ...], bounds: dict[str, float]
) -> None:
    plan = page_plan(store, HistoryQuery(**{name: FILTERS[name] for name in combination}, **bounds))

    # The page's ids: the step that searches decisions by a filter (the outer query reads rows by id).
    searches = [s for s in plan if s.startswith("SEARCH decisions USING") and "created" not in s]
    (step,) = [s for s in searches if "(rowid=?)" not in s]
    sought = [name for name in combination if f"{name}=?" in step]
    assert sought == list(combination) or "COVERING INDEX" in step, plan
    assert not [s for s in plan if "TEMP B-TREE" in s], plan  # the index's order is the page's: no sort


def test_the_plan_test_sees_what_the_database_runs(store: Store) -> None:
    """A page without a filter walks the primary key (no index of a filter), and its plan says so."""
    plan = page_plan(store, HistoryQuery())
    assert any(s.startswith("SCAN decisions") for s in plan), plan
