"""The store backends tests run on, and how a test reads their rows whichever it got.

The `store` fixture (tests/conftest.py) takes an indirect param: "sqlite" (a real file, the default),
"memory" (remediate.store.inmemory.InMemoryStore, the fake) or "postgresql" (a fresh database on the
session's real PostgreSQL 15, tests/support/postgres.py); `db_url` follows it, so a test that opens a
second Store on `db_url` opens the same database. A test that only goes through the store's interface
runs on all three (`@EVERY_STORE`; `@BOTH_STORES` is the older name of the same mark); a test of SQL
behaviour runs on both databases (`@EVERY_DATABASE`, or `pytestmark = EVERY_DATABASE`).

A test that only one database can pass is not parametrized, and its module or a comment says why; the list
is in docs/architecture.md, "Backends" (SQLite: file modes, flock, BEGIN IMMEDIATE, the WAL, a replaced
file, the agent's state file; PostgreSQL: the pool bound, a server stopped and started under the store).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from remediate import schema as t
from remediate.history_api import run_json
from remediate.store import Store
from remediate.store.inmemory import InMemoryStore

STORES = ("sqlite", "memory")
"""The SQLite reference and the fake that must behave like it (compared table by table in test_contract)."""
DATABASES = ("sqlite", "postgresql")
"""The real databases: a test of SQL behaviour runs on each (`@EVERY_DATABASE`)."""
BACKENDS = ("sqlite", "memory", "postgresql")
EVERY_DATABASE = pytest.mark.parametrize("store", DATABASES, indirect=True)
EVERY_STORE = pytest.mark.parametrize("store", BACKENDS, indirect=True)
BOTH_STORES = EVERY_STORE
"""The name from before PostgreSQL (SQLite and the fake): the engine's and executor's tests now run on all three."""

AnyStore = Store | InMemoryStore


def open_store(kind: str, db_url: str) -> AnyStore:
    if kind == "memory":
        return InMemoryStore()
    if kind in DATABASES:
        return Store.open(db_url)
    raise ValueError(f"no store backend {kind!r} (one of {BACKENDS})")


def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend this test's `store` fixture is parametrized with ("sqlite" unless it is)."""
    callspec = getattr(request.node, "callspec", None)
    return str(callspec.params.get("store", "sqlite")) if callspec is not None else "sqlite"


def rows(store: AnyStore, table: str, **equal: Any) -> list[Any]:
    """The rows of `table` whose columns equal `equal`, in id order, with their columns as attributes."""
    if isinstance(store, InMemoryStore):
        return [SimpleNamespace(**r) for r in store.select(table, **equal)]
    columns = t.metadata.tables[table].c
    statement = sa.select(t.metadata.tables[table]).where(*(columns[k] == v for k, v in equal.items()))
    with store.read() as conn:
        return list(conn.execute(statement.order_by(columns.id)).all())


def step_details(store: AnyStore, run_id: int) -> list[dict[str, Any]]:
    """The run's steps as the HTTP API shows them (Store.run_detail(...)["steps"]), plans and results decoded."""
    if not isinstance(store, InMemoryStore):
        return list(run_json(store.run_detail(run_id))["steps"])
    attempt_keys = ("number", "started_at", "finished_at", "outcome", "error")
    details = []
    for s in sorted(rows(store, "steps", run_id=run_id), key=lambda s: s.idx):
        attempts = sorted(rows(store, "attempts", step_id=s.id), key=lambda a: a.number)
        details.append(
            {
                "index": s.idx,
                **{k: getattr(s, k) for k in ("name", "action", "where", "status", "error", "timeout", "retries")},
                **{k: getattr(s, k) for k in ("started_at", "finished_at")},
                "always": bool(s.always),
                "continue_on_error": bool(s.continue_on_error),
                "params": json.loads(s.params),
                "plan": _loads(s.plan),
                "result": _loads(s.result),
                "attempts": [{k: getattr(a, k) for k in attempt_keys} for a in attempts],
            }
        )
    return details


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
