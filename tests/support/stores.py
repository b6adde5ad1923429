"""The databases tests run on, and how a test reads their rows.

The `store` fixture (tests/conftest.py) opens a real SQLite file (the default) or, where a test is
parametrized "postgresql", a fresh database on the session's real PostgreSQL 15 (tests/support/postgres.py);
`db_url` follows it, so a test that opens a second Store on `db_url` opens the same database. A test of the
store's behaviour runs on both (`@EVERY_DATABASE`, or `pytestmark = EVERY_DATABASE`).

A test that only one database can pass is not parametrized, and its module or a comment says why; the list
is in docs/architecture.md, "Backends" (SQLite: file modes, flock, BEGIN IMMEDIATE, the WAL, a replaced
file, the agent's state file; PostgreSQL: the pool bound, a server stopped and started under the store).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
import sqlalchemy as sa

from remediate.history.api import run_json
from remediate.runs import RunLease, RunWrite, StepStart
from remediate.store import Store
from remediate.store import schema as t

DATABASES = ("sqlite", "postgresql")
"""The real databases: a test of the store's behaviour runs on each (`@EVERY_DATABASE`)."""
EVERY_DATABASE = pytest.mark.parametrize("store", DATABASES, indirect=True)


def store_backend(request: pytest.FixtureRequest) -> str:
    """The database this test's `store` fixture is parametrized with ("sqlite" unless it is)."""
    callspec = getattr(request.node, "callspec", None)
    backend = str(callspec.params.get("store", "sqlite")) if callspec is not None else "sqlite"
    if backend not in DATABASES:
        raise ValueError(f"no store backend {backend!r} (one of {DATABASES})")
    return backend


def rows(store: Store, table: str, **equal: Any) -> list[Any]:
    """The rows of `table` whose columns equal `equal`, in id order, with their columns as attributes."""
    columns = t.metadata.tables[table].c
    statement = sa.select(t.metadata.tables[table]).where(*(columns[k] == v for k, v in equal.items()))
    with store.read() as conn:
        return list(conn.execute(statement.order_by(columns.id)).all())


def table_counts(store: Store, tables: Iterable[str] | None = None) -> dict[str, int]:
    """The rows of `tables` (every table of the schema by default), by table."""
    with store.read() as conn:
        return {
            name: conn.execute(sa.select(sa.func.count()).select_from(t.metadata.tables[name])).scalar_one()
            for name in (t.metadata.tables if tables is None else tables)
        }


def step_details(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The run's steps as the HTTP API shows them (run_detail(...)["steps"]), plans and results decoded."""
    return list(run_json(store.history.run_detail(run_id))["steps"])


def start_attempt(store: Store, lease: RunLease, step_id: int, number: int, at: float, plan: Any = None) -> None:
    """Attempt `number` of a step starts at `at` under `lease`, written as the executor writes it (RunQueue.record)."""
    store.queue.record(RunWrite(lease, starts=(StepStart(step_id, number, plan),)), at)
