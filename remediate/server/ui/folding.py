"""Duplicates folded into the row they repeat, on one page of the history.

AlertManager re-sends a firing alert every repeat_interval, and each re-send of the same occurrence is a
`duplicate` decision of each playbook it matches. On a page, a `duplicate` entry is folded into the
nearest older entry on the same page with the same alert fingerprint and playbook that made a run
(the decision that made the run it repeats); that row shows "+N duplicates" and their
times. A duplicate whose original is on an older page stays a row of its own, and newer duplicates of
the same fingerprint and playbook on the page fold into it. Nothing else is folded: a cooldown, a
rejected or a paused decision is news, not a repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remediate.runs import Decision
from remediate.store.history import HistoryEntry


@dataclass
class Row:
    """One line of the history page: an entry and the duplicates folded into it (newest first)."""

    entry: HistoryEntry
    duplicates: list[HistoryEntry] = field(default_factory=list)


def fold_duplicates(entries: list[HistoryEntry]) -> list[Row]:
    """`entries` newest first (a /history page) as rows, newest first, duplicates folded."""
    rows: list[Row] = []
    waiting: dict[tuple[str, str | None], list[HistoryEntry]] = {}
    for entry in entries:
        key = (entry.fingerprint, entry.playbook)
        if entry.decision == Decision.DUPLICATE:
            waiting.setdefault(key, []).append(entry)
            continue
        rows.append(Row(entry, waiting.pop(key, []) if entry.run_id is not None else []))
    # Duplicates with no original on the page: the oldest of each key is the row, the newer fold into it.
    for pending in waiting.values():
        rows.append(Row(pending[-1], pending[:-1]))
    rows.sort(key=lambda row: row.entry.id, reverse=True)
    return rows
