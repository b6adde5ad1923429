"""`Store`: the one object the engine, executor, HTTP server and CLI hold, whatever the database.

Its methods are thin: each opens the transaction it needs on the `database.Database` and leaves the
statements to the module of its concept (`queue`, `ingest`, `history`, `pause`, `breaker_rows`,
`memory`). It knows nothing about Flask, playbooks or actions: it stores what it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa

from remediate.errors import AlreadyPaused
from remediate.runs import (
    AttemptOutcome,
    ClaimedRun,
    LadderState,
    PendingOutcome,
    RunLease,
    RunningClaim,
    RunWrite,
    StepEnd,
    StepRecord,
)
from remediate.store import history as _history
from remediate.store import report as _report
from remediate.store import ui_sessions as _ui_sessions
from remediate.store.announcements import Announcements, AwaitingRun
from remediate.store.breaker_rows import BreakerRows
from remediate.store.database import Database
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT, DEFAULT_POOL, PoolLimits
from remediate.store.history import HistoryEntry, HistoryQuery, RunDetail
from remediate.store.ingest import GuardReader, IngestWriterContext
from remediate.store.ladders import guard_lock_name, list_ladders, reset_ladders
from remediate.store.memory import StoreMemory
from remediate.store.pause import PauseState, read_pause, write_pause
from remediate.store.queue import EXECUTOR_STOPPED, RunQueue
from remediate.store.report import Report, ReportQuery
from remediate.store.retention import DEFAULT_BATCH_SIZE, DEFAULT_MAX_HOLD, PRUNED_TABLES, PruneReport, prune


class Store:
    """The audit history and the durable run queue of one database."""

    def __init__(self, engine: sa.Engine | Database, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        """On an engine (as before the package) or an opened Database (`Store.open`)."""
        self.database = engine if isinstance(engine, Database) else Database(engine, busy_timeout=busy_timeout)
        self.engine = self.database.engine
        # The concept modules open their transactions through this object's write()/read(): every
        # transaction of the store passes one door, whichever module opens it.
        self.queue = RunQueue(self)
        self.announcements = Announcements(self, self.queue)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        pool: PoolLimits = DEFAULT_POOL,
        commit_checkpoints: bool = True,
    ) -> Store:
        """Open (and by default create or upgrade) the database; writers wait `busy_timeout` s for the lock
        (and, on a server database, for one of the `pool`'s connections). `commit_checkpoints=False`: SQLite's
        write-ahead log is checkpointed apart (`checkpoint`), not inside the commits (Database.open)."""
        return cls(
            Database.open(
                url, upgrade=upgrade, busy_timeout=busy_timeout, pool=pool, commit_checkpoints=commit_checkpoints
            )
        )

    def upgrade(self) -> int:
        """Create or upgrade the schema to SCHEMA_VERSION; returns the version found before."""
        return self.database.upgrade()

    def schema_version(self) -> int:
        return self.database.schema_version()

    def write(self) -> AbstractContextManager[sa.Connection]:
        """One write transaction; see Database.write."""
        return self.database.write()

    def read(self) -> AbstractContextManager[sa.Connection]:
        """One connection to read on."""
        return self.database.read()

    def checkpoint(self) -> bool:
        """See Database.checkpoint."""
        return self.database.checkpoint()

    def ping(self) -> None:
        self.database.ping()

    def probe_write(self) -> None:
        """Do what a webhook needs; see Database.probe_write."""
        self.database.probe_write()

    def check_file(self) -> None:
        """StoreFileReplaced if the database's file is no longer the one this process has open."""
        self.database.check_file()

    def close(self) -> None:
        self.database.close()

    # ------------------------------------------------------------------ ingest (used by the engine)

    def writer(self) -> IngestWriterContext:
        return IngestWriterContext(self, self.database.dialect)

    @contextmanager
    def guard_reader(self) -> Iterator[GuardReader]:
        with self.read() as conn:
            yield GuardReader(conn)

    # ------------------------------------------------------------------ pause

    def pause_state(self, conn: sa.Connection | None = None) -> PauseState:
        if conn is None:
            with self.read() as own:
                return read_pause(own)
        return read_pause(conn)

    def set_paused(self, paused: bool, *, by: str, reason: str, now: float, replace: bool = True) -> PauseState:
        """Set (or clear) the pause. With `replace` False a pause over a pause is AlreadyPaused: who paused
        and why are read in the same transaction, so two operators cannot overwrite each other unawares."""
        state = PauseState(paused, by, reason, now)
        with self.write() as conn:
            if paused and not replace:
                existing = read_pause(conn)
                if existing.paused:
                    raise AlreadyPaused(existing.by, existing.reason, existing.since)
            write_pause(conn, state)
        return state

    # ------------------------------------------------------------------ the web pages' sessions and logins

    def end_ui_session(self, sid: str, *, expires_at: float, now: float) -> None:
        """A page session's logout: refused by every worker and replica from now on (ui_sessions)."""
        with self.write() as conn:
            _ui_sessions.end_session(conn, sid, expires_at=expires_at, now=now)

    def ui_session_ended(self, sid: str) -> bool:
        with self.read() as conn:
            return _ui_sessions.session_ended(conn, sid)

    def record_login_failure(self, client: str, *, throttle: _ui_sessions.LoginThrottle, now: float) -> None:
        with self.write() as conn:
            _ui_sessions.record_login_failure(conn, client, throttle=throttle, now=now)

    def login_retry_after(self, client: str, *, throttle: _ui_sessions.LoginThrottle, now: float) -> float | None:
        """Seconds until `client` may try to log in again (the throttle's window), or None."""
        with self.read() as conn:
            return _ui_sessions.login_retry_after(conn, client, throttle=throttle, now=now)

    # ------------------------------------------------------------------ the run queue (executor, approval)

    def claim_run(self, worker: str, now: float) -> ClaimedRun | None:
        """Take the run at the head of the queue (priority, then id) for this worker, atomically across processes."""
        return self.queue.claim(worker, now)

    def next_run(self, worker: str, *, skip: Collection[int] = ()) -> ClaimedRun | None:
        """The head of the queue as `worker` will claim it, with its steps (RunQueue.next_run): a read."""
        return self.queue.next_run(worker, skip=skip)

    def claim_next(self, run: ClaimedRun, now: float, write: RunWrite | None = None) -> bool:
        """Claim `run` and record `write` in one transaction; False if taken since (RunQueue.claim_next)."""
        return self.queue.claim_next(run, now, write)

    def record(self, write: RunWrite, now: float) -> None:
        """One write transaction of a run's progress under its lease (RunQueue.record)."""
        self.queue.record(write, now)

    def steps_of(self, run_id: int) -> list[StepRecord]:
        return self.queue.steps_of(run_id)

    def check_lease(self, lease: RunLease, now: float) -> None:
        """ClaimLostError unless `lease` still holds its run (and refresh its heartbeat)."""
        self.queue.check_lease(lease, now)

    def finish_attempt(
        self,
        step_id: int,
        number: int,
        outcome: AttemptOutcome,
        error: str | None,
        now: float,
        *,
        lease: RunLease | None = None,
    ) -> None:
        self.queue.finish_attempt(step_id, number, outcome, error, now, lease=lease)

    def pending_outcomes(self, since: float, limit: int = 100) -> list[PendingOutcome]:
        return self.queue.pending_outcomes(since, limit)

    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool:
        return self.queue.settle_pending(step_id, late_outcome, note, now)

    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None:
        self.queue.heartbeat(run_ids, worker, now)

    def running_claims(self) -> list[RunningClaim]:
        """The running runs and who holds them (recovery decides which owners are gone)."""
        return self.queue.running_claims()

    def requeue_claims(
        self,
        claims: Sequence[RunningClaim],
        *,
        now: float,
        own: bool = False,
        ends: Mapping[int, StepEnd] | None = None,
        why: str = EXECUTOR_STOPPED,
    ) -> list[int]:
        """See RunQueue.requeue_claims."""
        return self.queue.requeue_claims(claims, now=now, own=own, ends=ends, why=why)

    def recover_stale(self, *, now: float, stale_after: float, is_dead: Any) -> list[int]:
        """Requeue runs whose executor died; their in-flight steps become `interrupted`."""
        return self.queue.recover_stale(now=now, stale_after=stale_after, is_dead=is_dead)

    def approve(self, run_id: int, *, by: str, now: float) -> None:
        self.queue.approve(run_id, by=by, now=now)

    def queue_depth(self) -> dict[str, int]:
        return self.queue.queue_depth()

    def oldest_queued_at(self) -> float | None:
        return self.queue.oldest_queued_at()

    # ------------------------------------------------------------------ announcements of runs awaiting approval

    def take_announcement(self, now: float, actions: Sequence[str]) -> AwaitingRun | None:
        """The oldest run awaiting approval with a step of `actions` and not announced yet, marked taken."""
        return self.announcements.take(now, actions)

    def record_announcement(self, run_id: int, *, error: str | None) -> None:
        """How the announcement of a taken run went: None when sent."""
        self.announcements.record(run_id, error=error)

    # ------------------------------------------------------------------ action memory

    def memory(self) -> StoreMemory:
        """The ActionMemory actions use (see remediate.actions.base)."""
        return StoreMemory(self)

    # ------------------------------------------------------------------ circuit breaker (remediate.breaker)

    @contextmanager
    def breaker_ledger(self) -> Iterator[BreakerRows]:
        """The breaker's rows in ONE write transaction: its check and its count update are atomic across workers."""
        with self.write() as conn:
            self.database.dialect.lock_breaker(conn)
            yield BreakerRows(conn)

    @contextmanager
    def breaker_view(self) -> Iterator[BreakerRows]:
        """The breaker's rows, read only."""
        with self.read() as conn:
            yield BreakerRows(conn)

    def breaker_state(self, conn: sa.Connection | None = None) -> dict[str, Any] | None:
        if conn is None:
            with self.read() as own:
                return BreakerRows(own).state()
        return BreakerRows(conn).state()

    # ------------------------------------------------------------------ escalation ladders

    def ladders(self, *, target: str | None = None, playbook: str | None = None) -> list[LadderState]:
        """Where the escalation ladders stand (all, or a target's / a playbook's)."""
        with self.read() as conn:
            return list_ladders(conn, target=target, playbook=playbook)

    def reset_ladders(
        self, target: str, *, playbook: str | None = None, by: str, reason: str, now: float
    ) -> list[LadderState]:
        """Put a target's ladders back before rung 1 (store.ladders.reset_ladders); the rows reset.

        Under the guard locks of those ladders: an ingest judging one of them at the same moment either
        commits first (and is reset) or waits and climbs from the reset, never writes over it."""
        with self.write() as conn:
            found = list_ladders(conn, target=target, playbook=playbook)
            self.database.dialect.lock_guards(conn, [guard_lock_name(s.playbook, s.guard_key) for s in found])
            return reset_ladders(conn, target=target, playbook=playbook, by=by, reason=reason, now=now)

    # ------------------------------------------------------------------ reading the history

    def history(self, query: HistoryQuery) -> tuple[list[HistoryEntry], str | None]:
        """A page of the audit history, newest first, and the next page's cursor (None at the end)."""
        with self.read() as conn:
            return _history.history_page(conn, query, time_follows_id=self.database.dialect.decision_time_follows_id)

    def run_detail(self, run_id: int) -> RunDetail:
        """One run with its alert, decision, steps and attempts; UnknownRunError if there is none."""
        with self.read() as conn:
            return _history.run_detail(conn, run_id)

    def run_links(self, run_id: int) -> _history.RunLinks:
        """A run's firing run (when it is a resolved one) and its resolved runs (when it is a firing one)."""
        with self.read() as conn:
            return _history.run_links(conn, run_id)

    def counts(self) -> dict[str, int]:
        with self.read() as conn:
            return _history.counts(conn)

    def report(self, query: ReportQuery) -> Report:
        """The reliability figures of a window (store.report): incidents, remediations by rung, MTTR, held nodes."""
        with self.read() as conn:
            rows, held = _report.read_report_rows(conn, query)
        return _report.build_report(rows, held, query)

    # ------------------------------------------------------------------ retention

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
        """Delete finished history older than `older_than` seconds, in bounded batches (store.retention)."""
        self.database.refresh_statistics(PRUNED_TABLES)
        return prune(
            self,
            older_than,
            now=now,
            batch_size=batch_size,
            dry_run=dry_run,
            pause=pause,
            stopping=stopping,
            max_hold=max_hold,
        )
