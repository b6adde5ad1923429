"""A decision's time that never decreases with its id, and the history's time filters as id ranges.

`decisions.created_at` is the notification's receive time, taken before the write lock: two workers
could commit in the other order, and a wall clock can step back. Where the database has one writer
at a time (`Dialect.decision_time_follows_id`: SQLite, BEGIN IMMEDIATE), `stamp` raises each new
decision's time to the newest one stored (one seek on ix_decisions_created) inside the ingest's write
transaction, so that created_at never decreases with the id. A `since`/`until` bound then equals an
id bound (`time_conditions`: one seek each), and the page of a time filter is an id range on the
primary key or on a (column, id) index: a page's worth of rows read, however wide or old the window.

PostgreSQL takes ids from a sequence and commits concurrent transactions in any order: a later id can
carry an earlier time there, so its time filters stay plain comparisons (its planner has statistics).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from remediate.store import schema as t
from remediate.store.rows import MAX_ID

_d = t.decisions
_NEWEST = sa.select(sa.func.max(t.decisions.c.created_at))


def _first_id_at_or_after(at: float) -> sa.ScalarSelect[Any]:
    """The smallest id of a decision at `at` or later (NULL if none): the first row of ix_decisions_created
    from `at`, whose entries are ordered by (created_at, id)."""
    return sa.select(_d.c.id).where(_d.c.created_at >= at).order_by(_d.c.created_at, _d.c.id).limit(1).scalar_subquery()


def monotonic(rows: Sequence[Mapping[str, Any]], newest: float | None) -> list[Mapping[str, Any]]:
    """`rows` in order, each created_at raised to the newest one before it (stored: `newest`, or in `rows`)."""
    stamped: list[Mapping[str, Any]] = []
    for row in rows:
        at = row["created_at"]
        if newest is not None and at < newest:
            row = {**row, "created_at": newest}
        else:
            newest = at
        stamped.append(row)
    return stamped


def stamp(conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The decisions `rows` about to be inserted, none earlier than the newest decision stored.

    Only correct inside a transaction that is the database's only writer until it commits: the rows get
    the next ids, and no other writer can store a later time with a smaller id in between. A time moves
    by at most the skew between the workers' clocks plus the wait for the write lock (milliseconds),
    or by a step back of the wall clock."""
    if not rows:
        return []
    # The max is the last entry of ix_decisions_created.
    newest = conn.execute(_NEWEST).scalar()
    return monotonic(rows, newest)


def time_conditions(since: float | None, until: float | None, *, follows_id: bool) -> list[sa.ColumnElement[bool]]:
    """The WHERE conditions of `since <= created_at < until` (either bound may be absent).

    With `follows_id` (every decision's time >= the time of every smaller id), the decisions at `since`
    or later are exactly those from the first such id on, and those before `until` exactly those before
    the first id at `until` or later: two seeks on ix_decisions_created, and the conditions are on the id.
    """
    conditions: list[sa.ColumnElement[bool]] = []
    # A NaN bound (`?until=nan` parses) compares as NULL: no row. Kept as the plain comparison.
    if since is not None:
        if follows_id and not math.isnan(since):
            # NULL when no decision is that recent: `id >= NULL` is no row, as it must be.
            conditions.append(_d.c.id >= _first_id_at_or_after(since))
        else:
            conditions.append(_d.c.created_at >= since)
    if until is not None:
        if follows_id and not math.isnan(until):
            # Every id when no decision is that recent (MAX_ID: a bound of 2**63 would not fit the column).
            conditions.append(_d.c.id <= sa.func.coalesce(_first_id_at_or_after(until) - 1, MAX_ID))
        else:
            conditions.append(_d.c.created_at < until)
    return conditions
