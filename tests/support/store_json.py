"""The store's history as the HTTP API shows it, for tests that read a run or a page as JSON."""

from __future__ import annotations

from typing import Any

from remediate.history.api import entry_json, run_json
from remediate.store import HistoryQuery, Store


def run_json_of(store: Store, run_id: int) -> dict[str, Any]:
    """GET /runs/<run_id>'s body, read straight from the store."""
    return run_json(store.history.run_detail(run_id))


def history_json_of(store: Store, query: HistoryQuery) -> tuple[list[dict[str, Any]], str | None]:
    """GET /history's entries and next cursor, read straight from the store."""
    entries, cursor = store.history.page(query)
    return [entry_json(e) for e in entries], cursor
