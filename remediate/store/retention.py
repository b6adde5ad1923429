"""Retention: delete old history in bounded batches, so a long-running server does not grow without bound.

What is pruned, `older_than` seconds before `now` (the cut):

- a finished run (`FINAL_RUN_STATUSES`) that finished before the cut, with its steps, attempts and the
  decision rows that name it, unless the alert occurrence it acted on (fingerprint + startsAt) was seen
  again in a notification received since the cut (AlertManager re-sends a firing alert every
  repeat_interval: its run is its dedupe record, and pruning it would run the fix again), or a run that
  is not finished names it in `after_run_id` (a resolved run waiting for it);
- a decision that made no run (duplicate, cooldown, paused, unmatched, ...) created before the cut;
- a notification received before the cut, with its alerts, once no decision or run that is kept needs them;
- a circuit-breaker claim released before the cut (an open claim holds its node: never).

Never pruned: runs queued, running or awaiting approval, and everything they need (their alert, its
notification, their decision); the action memory and `meta` (state, not history). A finished run that
is kept may name a pruned run in `after_run_id` or `superseded_by`; nothing but the history display
reads through those ids.

Every batch is two steps: the candidates (at most `batch_size` parent rows, by id) are chosen in a read
transaction, which takes no write lock; then one short write transaction deletes them with their
children (runs are checked again there: their occurrence may have been re-sent a moment ago).
SQLite's writers (ingest first of all) queue for at most one batch, and a batch that took longer than
`max_hold` halves the next. On PostgreSQL a prune locks only the rows it deletes: ingest never waits
for it. There, a delivery of an occurrence silent since the cut that arrives during the very batch
deleting its run leaves the run deleted: the next delivery runs again, as it would had the run been
pruned a moment earlier (on SQLite the batch's re-check, under the write lock, sees every delivery).

A dry run chooses the same rows and counts what would go, deleting nothing. The cut is for the caller
to keep above what the guards read back (24 h of runs for max_attempts, the longest cooldown, the
breaker window: serve.launcher.history_pruner).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import sqlalchemy as sa

from remediate.runs import FINAL_RUN_STATUSES, RunStatus
from remediate.store import schema as t
from remediate.store.checkpoints import Periodic
from remediate.store.database import Database, Transactions

DEFAULT_BATCH_SIZE = 500
UNFINISHED = tuple(status for status in RunStatus if status not in FINAL_RUN_STATUSES)


@dataclass(frozen=True)
class PruneReport:
    """Rows deleted (or, for a dry run, that would be) per table, and the write transactions it took."""

    notifications: int = 0
    alerts: int = 0
    decisions: int = 0
    runs: int = 0
    steps: int = 0
    attempts: int = 0
    breaker_claims: int = 0
    batches: int = 0
    dry_run: bool = False

    TABLES = ("notifications", "alerts", "decisions", "runs", "steps", "attempts", "breaker_claims")

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.TABLES}

    @property
    def total(self) -> int:
        return sum(self.counts().values())

    def __add__(self, other: PruneReport) -> PruneReport:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "dry_run"}
        return PruneReport(**summed, dry_run=self.dry_run or other.dry_run)

    def summary(self) -> str:
        """One line for the log: `runs=3 steps=6 ... (2 batches)`."""
        counts = " ".join(f"{name}={count}" for name, count in self.counts().items())
        return f"{counts} ({self.batches} batches{', dry run' if self.dry_run else ''})"


# --------------------------------------------------------------------------- what may go


def _run_prunable(run: Any, cut: Any) -> sa.ColumnElement[bool]:
    """The run `run` (the runs table or an alias) may go: see the module's docstring."""
    # Anonymous aliases: these subqueries nest in each other (a notification's runs) and must not
    # correlate with an outer query's own tables.
    alert, seen, seen_in, waiting = t.alerts.alias(), t.alerts.alias(), t.notifications.alias(), t.runs.alias()
    occurrence_seen_since = (
        sa.exists()
        .select_from(
            alert.join(
                seen, sa.and_(seen.c.fingerprint == alert.c.fingerprint, seen.c.starts_at == alert.c.starts_at)
            ).join(seen_in, seen_in.c.id == seen.c.notification_id)
        )
        .where(alert.c.id == run.c.alert_id, seen_in.c.received_at >= cut)
    )
    awaited_by_unfinished = sa.exists().where(waiting.c.status.in_(UNFINISHED), waiting.c.after_run_id == run.c.id)
    return sa.and_(
        run.c.status.in_(FINAL_RUN_STATUSES),
        sa.func.coalesce(run.c.finished_at, run.c.updated_at) < cut,
        ~occurrence_seen_since,
        ~awaited_by_unfinished,
    )


def _runless_decision_prunable(decision: Any, cut: Any) -> sa.ColumnElement[bool]:
    return sa.and_(decision.c.run_id.is_(None), decision.c.created_at < cut)


def _notification_old(cut: Any) -> sa.ColumnElement[bool]:
    return t.notifications.c.received_at < cut


def _notifications_needed(conn: sa.Connection, ids: list[int], cut: Any) -> set[int]:
    """Those of the notifications `ids` that a kept decision names (true before any deletion too: a dry
    run counts what the real prune deletes). A run is always written with its decision, so a kept run
    keeps its decision and with it the notification. One query per batch, not one per notification:
    `decisions.notification_id` has no index."""
    d, r = t.decisions, t.runs.alias()
    run_goes = sa.exists().where(r.c.id == d.c.run_id, _run_prunable(r, cut))
    kept = sa.and_(
        d.c.notification_id.in_(ids),
        ~_runless_decision_prunable(d, cut),
        sa.or_(d.c.run_id.is_(None), ~run_goes),
    )
    return set(conn.execute(sa.select(d.c.notification_id).distinct().where(kept)).scalars())


def _claim_prunable(cut: Any) -> sa.ColumnElement[bool]:
    c = t.breaker_claims.c
    return sa.and_(c.released_at.is_not(None), c.released_at < cut)


# --------------------------------------------------------------------------- the passes


@dataclass(frozen=True)
class _Pass:
    """One parent table pruned by id: how its candidates are chosen and how a batch of them is deleted."""

    table: sa.Table
    prunable: Callable[[Any], sa.ColumnElement[bool]]
    delete: Callable[[sa.Connection, list[int], Any, bool], dict[str, int]]
    needed: Callable[[sa.Connection, list[int], Any], set[int]] | None = None
    """Of the candidates, those that stay after all (checked per batch, in the read transaction)."""


def _count(conn: sa.Connection, table: sa.Table, condition: sa.ColumnElement[bool]) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(condition)).scalar_one())


def _delete(conn: sa.Connection, table: sa.Table, condition: sa.ColumnElement[bool], dry_run: bool) -> int:
    if dry_run:
        return _count(conn, table, condition)
    return int(conn.execute(sa.delete(table).where(condition)).rowcount)


def _delete_runs(conn: sa.Connection, ids: list[int], cut: Any, dry_run: bool) -> dict[str, int]:
    runs = t.runs
    # Checked again in the write transaction: a run chosen a moment ago may have been seen again since.
    ids = list(conn.execute(sa.select(runs.c.id).where(runs.c.id.in_(ids), _run_prunable(runs, cut))).scalars())
    if not ids:
        return {}
    step_ids = sa.select(t.steps.c.id).where(t.steps.c.run_id.in_(ids)).scalar_subquery()
    return {
        "attempts": _delete(conn, t.attempts, t.attempts.c.step_id.in_(step_ids), dry_run),
        "steps": _delete(conn, t.steps, t.steps.c.run_id.in_(ids), dry_run),
        "decisions": _delete(conn, t.decisions, t.decisions.c.run_id.in_(ids), dry_run),
        "runs": _delete(conn, runs, runs.c.id.in_(ids), dry_run),
    }


def _delete_decisions(conn: sa.Connection, ids: list[int], cut: Any, dry_run: bool) -> dict[str, int]:
    d = t.decisions
    return {"decisions": _delete(conn, d, sa.and_(d.c.id.in_(ids), _runless_decision_prunable(d, cut)), dry_run)}


def _delete_notifications(conn: sa.Connection, ids: list[int], cut: Any, dry_run: bool) -> dict[str, int]:
    # Chosen in the read transaction (_notifications_needed): nothing written since can name an old
    # notification (ingest only ever refers to its own), and the foreign keys stand guard regardless.
    n = t.notifications
    return {
        "alerts": _delete(conn, t.alerts, t.alerts.c.notification_id.in_(ids), dry_run),
        "notifications": _delete(conn, n, n.c.id.in_(ids), dry_run),
    }


def _delete_claims(conn: sa.Connection, ids: list[int], cut: Any, dry_run: bool) -> dict[str, int]:
    c = t.breaker_claims
    return {"breaker_claims": _delete(conn, c, sa.and_(c.c.id.in_(ids), _claim_prunable(cut)), dry_run)}


# Children before parents (the foreign keys): runs take their steps, attempts and decisions with them;
# then the decisions that made no run; then the notifications nothing names any more.
_PASSES: Sequence[_Pass] = (
    _Pass(t.runs, lambda cut: _run_prunable(t.runs, cut), _delete_runs),
    _Pass(t.decisions, lambda cut: _runless_decision_prunable(t.decisions, cut), _delete_decisions),
    _Pass(t.notifications, _notification_old, _delete_notifications, _notifications_needed),
    _Pass(t.breaker_claims, _claim_prunable, _delete_claims),
)


PRUNED_TABLES = ("runs", "steps", "attempts", "decisions", "alerts", "notifications", "breaker_claims")
"""Every table a prune reads or deletes from (their statistics are refreshed before it plans its queries)."""

DEFAULT_MAX_HOLD = 0.1
"""Seconds one batch's write transaction should take at most: a batch that took longer halves the next."""


@dataclass
class Retention:
    """The history's retention in a store (`Store.retention`)."""

    tx: Transactions
    database: Database

    def prune(
        self,
        older_than: float,
        *,
        now: float,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dry_run: bool = False,
        pause: float = 0.0,
        stopping: threading.Event | None = None,
        max_hold: float | None = DEFAULT_MAX_HOLD,
    ) -> PruneReport:
        """Delete the history older than `older_than` seconds before `now` (see the module's docstring).

        At most `batch_size` runs, decisions, notifications or claims (with their children) per write
        transaction, fewer while a batch's transaction takes longer than `max_hold` seconds (the foreign
        keys' checks grow with the tables: see docs/install.md, "Retention"); `pause` seconds between
        batches leave the lock to others; `stopping` set ends it between two batches (what was deleted
        stays deleted: a later prune goes on from there).
        """
        self.database.refresh_statistics(PRUNED_TABLES)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if older_than < 0:
            raise ValueError("older_than must not be negative")
        cut = now - older_than
        report = PruneReport(dry_run=dry_run)
        for step in _PASSES:
            after, size = 0, batch_size
            while not (stopping is not None and stopping.is_set()):
                limit = size
                scanned, ids = _candidates(self.tx, step, cut, after, limit)
                if not scanned:
                    break
                after = scanned[-1]
                if ids:
                    started = time.monotonic()
                    opened = self.tx.read() if dry_run else self.tx.write()
                    with opened as conn:
                        deleted = step.delete(conn, ids, cut, dry_run)
                    report = report + PruneReport(**deleted, batches=1)
                    size = _next_size(size, time.monotonic() - started, batch_size, max_hold)
                if len(scanned) < limit:
                    break
                if pause > 0 and ids:
                    if stopping is not None:
                        stopping.wait(pause)
                    else:
                        time.sleep(pause)
        return report


def _next_size(size: int, took: float, most: int, max_hold: float | None) -> int:
    """Halve a batch that held the lock too long; grow it back while batches are quick."""
    if max_hold is None:
        return size
    if took > max_hold:
        return max(1, size // 2)
    if took < max_hold / 4:
        return min(most, size * 2)
    return size


def _candidates(
    transactions: Transactions, step: _Pass, cut: float, after: int, limit: int
) -> tuple[list[int], list[int]]:
    """The next ids that may go (all scanned, and those of them that go), chosen without the write lock."""
    id_column = step.table.c.id
    statement = sa.select(id_column).where(id_column > after, step.prunable(cut)).order_by(id_column).limit(limit)
    with transactions.read() as conn:
        scanned = list(conn.execute(statement).scalars())
        if step.needed is None or not scanned:
            return scanned, scanned
        needed = step.needed(conn, scanned, cut)
    return scanned, [i for i in scanned if i not in needed]


# --------------------------------------------------------------------------- the server's periodic prune


@dataclass
class Pruner(Periodic):
    """Prunes a store every `every` seconds in a thread of its own (the server's executor process).

    `keep` seconds of history stay; small batches with a pause between them, so ingest never waits
    for more than one batch. Each prune that deleted something is one line in the log.
    """

    prune: Callable[..., PruneReport]
    keep: float
    every: float = 3600.0
    first_after: float = 60.0
    batch_size: int = 200
    pause: float = 0.05
    clock: Callable[[], float] = time.time
    log: Any = field(default_factory=lambda: logging.getLogger("remediate.retention"))
    stopping: threading.Event = field(default_factory=threading.Event)
    reports: list[PruneReport] = field(default_factory=list)
    thread_name = "remediate-prune"

    def prune_once(self) -> PruneReport:
        report = self.prune(
            self.keep, now=self.clock(), batch_size=self.batch_size, pause=self.pause, stopping=self.stopping
        )
        self.reports.append(report)
        if report.total:
            # The summary is this module's own `table=count` text, not data: in the format string, so that the
            # text log's escaping of data (remediate.logs.setup) leaves its fields readable.
            self.log.info("retention: pruned history older than %gs: " + report.summary().replace("%", "%%"), self.keep)
        return report

    def _loop(self) -> None:
        wait = self.first_after
        while not self.stopping.wait(wait):
            wait = self.every
            try:
                self.prune_once()
            except Exception:  # a failed prune must not end the thread: the next one tries again
                self.log.exception("retention: prune failed; trying again in %gs", self.every)
