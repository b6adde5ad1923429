"""The store backends tests run on, and how a test reads their rows whichever it got.

`STORES` are the params of the `store` fixture (tests/conftest.py): "sqlite" (a real file, the
default) and "memory" (remediate.store.inmemory.InMemoryStore, the fake). A test that only goes
through the store's interface runs on both: `@BOTH_STORES`, or `pytestmark = BOTH_STORES`.
The next backend (PostgreSQL) is one more param here and one more branch in `open_store`.
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
BOTH_STORES = pytest.mark.parametrize("store", STORES, indirect=True)
DATABASES = ("sqlite", "postgresql")
"""The real databases: a test of SQL behaviour runs on each (`@EVERY_DATABASE`)."""
EVERY_DATABASE = pytest.mark.parametrize("store", DATABASES, indirect=True)
EVERY_STORE = pytest.mark.parametrize("store", ("sqlite", "memory", "postgresql"), indirect=True)

AnyStore = Store | InMemoryStore


def open_store(kind: str, db_url: str) -> AnyStore:
    if kind == "memory":
        return InMemoryStore()
    if kind in DATABASES:
        return Store.open(db_url)
    raise ValueError(f"no store backend {kind!r} (one of {STORES})")


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
                "params": json.loads(s.params),
                "plan": _loads(s.plan),
                "result": _loads(s.result),
                "attempts": [{k: getattr(a, k) for k in attempt_keys} for a in attempts],
            }
        )
    return details


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
