"""Duplicates folded into the row they repeat (remediate.server.ui.folding)."""

from __future__ import annotations

from remediate.server.ui.folding import fold_duplicates
from remediate.store.history import HistoryEntry


def entry(id: int, decision: str, fingerprint: str = "f1", playbook: str | None = "pb") -> HistoryEntry:
    run_id = id if decision == "accepted" else None
    return HistoryEntry(id, float(id), "A", fingerprint, "firing", playbook, "node", decision, None, "x", run_id, None)


def shape(entries: list[HistoryEntry]) -> list[tuple[int, list[int]]]:
    return [(row.entry.id, [d.id for d in row.duplicates]) for row in fold_duplicates(entries)]


def test_duplicates_fold_into_the_nearest_older_entry_of_the_same_alert_and_playbook() -> None:
    page = [
        entry(7, "duplicate"),
        entry(6, "duplicate", playbook="other"),
        entry(5, "duplicate"),
        entry(4, "accepted", fingerprint="f2"),
        entry(3, "accepted"),
        entry(2, "accepted", playbook="other"),
        entry(1, "duplicate"),
    ]
    assert shape(page) == [(4, []), (3, [7, 5]), (2, [6]), (1, [])]


def test_duplicates_whose_original_is_on_an_older_page_gather_on_the_oldest_of_them() -> None:
    page = [entry(9, "duplicate"), entry(8, "cooldown"), entry(7, "duplicate"), entry(6, "duplicate", "f3")]
    assert shape(page) == [(8, []), (7, [9]), (6, [])]


def test_only_duplicate_decisions_fold() -> None:
    page = [entry(3, "cooldown"), entry(2, "paused"), entry(1, "accepted")]
    assert shape(page) == [(3, []), (2, []), (1, [])]
