"""The store: audit history and durable run queue, on SQLAlchemy Core (SQLite by default).

Who calls it: the engine (ingest, inside one write transaction per notification),
the executor (claim runs, record steps and attempts, recover after a crash), the
HTTP server and the CLI (history, run details, approve, pause). It knows nothing
about Flask, playbooks or actions: it stores what it is given.

SQLite is used with WAL, a busy timeout and `BEGIN IMMEDIATE` for every write
transaction, so several gunicorn workers serialise their writes instead of
failing; reads never block writers. Before `BEGIN IMMEDIATE`, writers of one
database file also queue on a lock file beside it (`<database>-writelock`,
flock): a waiting writer then starts as soon as the previous one commits,
instead of sleeping in SQLite's busy handler (1, 2, 5, 10, ... 100 ms steps).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from remediate import schema as t
from remediate.errors import (
    ClaimLostError,
    ConfigError,
    RunStateError,
    StoreBusy,
    StoreFileReplaced,
    UnknownRunError,
)
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    PendingOutcome,
    RunEnd,
    RunLease,
    RunningClaim,
    RunStatus,
    StepRecord,
    StepStatus,
)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class HistoryQuery:
    playbook: str | None = None
    alertname: str | None = None
    target: str | None = None
    status: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 50
    cursor: str | None = None


@dataclass(frozen=True)
class PauseState:
    paused: bool
    by: str = ""
    reason: str = ""
    since: float | None = None


MAX_ID = 2**63 - 1
"""Largest row id a database integer column holds; a larger id can only be unknown."""


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"d:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = text.partition(":")
        if kind != "d":
            raise ValueError(cursor)
        last_id = int(number)
        if not 0 <= last_id <= MAX_ID:
            raise ValueError(cursor)
        return last_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid cursor (pass back the next_cursor of a previous page)") from exc


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# The statements of the hot paths (ingest, claim, step bookkeeping), built once with bind
# parameters: building a Core statement and its cache key costs more than running it on SQLite.
def _claim_statement(skip_locked: bool) -> sa.Update:
    prior = t.runs.alias("prior")
    prior_unfinished = sa.exists().where(prior.c.id == t.runs.c.after_run_id, prior.c.status.not_in(FINAL_RUN_STATUSES))
    oldest = (
        sa.select(t.runs.c.id)
        .where(t.runs.c.status == RunStatus.QUEUED, sa.not_(prior_unfinished))
        .order_by(t.runs.c.id)
        .limit(1)
    )
    if skip_locked:
        oldest = oldest.with_for_update(skip_locked=True)
    now = sa.bindparam("p_now", type_=sa.Float)
    return (
        sa.update(t.runs)
        .where(t.runs.c.id == oldest.scalar_subquery(), t.runs.c.status == RunStatus.QUEUED)
        .values(
            status=RunStatus.RUNNING,
            claimed_by=sa.bindparam("p_worker", type_=sa.String),
            claim_generation=t.runs.c.claim_generation + 1,
            heartbeat_at=now,
            updated_at=now,
            started_at=sa.func.coalesce(t.runs.c.started_at, now),
        )
        .returning(t.runs.c.id, t.runs.c.claim_generation)
    )


_CLAIM = {False: _claim_statement(False), True: _claim_statement(True)}
_ALERT_CONTEXT_COLUMNS = (
    t.alerts.c.labels,
    t.alerts.c.annotations,
    t.alerts.c.fingerprint,
    t.alerts.c.starts_at,
    t.alerts.c.ends_at,
    t.alerts.c.generator_url,
    t.alerts.c.status.label("alert_status"),
)
"""The alert's columns a step's context is built from (`_alert_context`); the query also selects runs.alertname."""


def _alert_context(row: Any) -> dict[str, Any]:
    """The alert as actions see it (StepContext.alert), from a row holding _ALERT_CONTEXT_COLUMNS and alertname."""
    return {
        "labels": json.loads(row.labels),
        "annotations": json.loads(row.annotations),
        "status": row.alert_status,
        "alertname": row.alertname,
        "fingerprint": row.fingerprint,
        "startsAt": row.starts_at,
        "endsAt": row.ends_at or "",
        "generatorURL": row.generator_url,
    }


_CLAIMED_RUN = (
    sa.select(t.runs, *_ALERT_CONTEXT_COLUMNS)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(t.runs.c.id == sa.bindparam("p_run_id"))
)
_STEPS_OF = sa.select(t.steps).where(t.steps.c.run_id == sa.bindparam("p_run_id")).order_by(t.steps.c.idx)
_START_ATTEMPT = (
    sa.update(t.steps)
    .where(t.steps.c.id == sa.bindparam("p_step_id"))
    .values(
        status=StepStatus.RUNNING,
        attempts=t.steps.c.attempts + 1,
        started_at=sa.func.coalesce(t.steps.c.started_at, sa.bindparam("p_now", type_=sa.Float)),
    )
    .returning(t.steps.c.attempts)
)
_INSERT_ATTEMPT = sa.insert(t.attempts)
_FINISH_ATTEMPT = (
    sa.update(t.attempts)
    .where(t.attempts.c.step_id == sa.bindparam("p_step_id"), t.attempts.c.number == sa.bindparam("p_number"))
    .values(
        finished_at=sa.bindparam("p_now", type_=sa.Float),
        outcome=sa.bindparam("p_outcome", type_=sa.String),
        error=sa.bindparam("p_error", type_=sa.Text),
    )
)
_UPDATE_STEP = sa.update(t.steps).where(t.steps.c.id == sa.bindparam("p_step_id"))
# The lease check of a progress write; it also refreshes the heartbeat (never backwards, whatever the wall clock).
_CHECK_LEASE = (
    sa.update(t.runs)
    .where(
        t.runs.c.id == sa.bindparam("p_run_id"),
        t.runs.c.claimed_by == sa.bindparam("p_worker", type_=sa.String),
        t.runs.c.claim_generation == sa.bindparam("p_generation", type_=sa.Integer),
        t.runs.c.status == RunStatus.RUNNING,
    )
    .values(
        heartbeat_at=sa.case(
            (
                t.runs.c.heartbeat_at >= sa.bindparam("p_now", type_=sa.Float),
                t.runs.c.heartbeat_at + 0.001,
            ),
            else_=sa.bindparam("p_now", type_=sa.Float),
        )
    )
)
_FINISH_RUN = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("p_run_id"))
    .values(
        status=sa.bindparam("p_status", type_=sa.String),
        finished_at=sa.bindparam("p_now", type_=sa.Float),
        updated_at=sa.bindparam("p_now", type_=sa.Float),
        error=sa.bindparam("p_error", type_=sa.Text),
        claimed_by=None,
    )
)
_SYNC_DECISION_STATUS = (
    sa.update(t.decisions)
    .where(t.decisions.c.run_id == sa.bindparam("p_run_id"))
    .values(status=sa.bindparam("p_status", type_=sa.String))
)
_PAUSE_STATE = sa.select(t.meta.c.value).where(t.meta.c.key == "pause")
_EXISTING_RUNS = sa.select(t.runs.c.dedupe_key, t.runs.c.id, t.runs.c.status).where(
    t.runs.c.dedupe_key.in_(sa.bindparam("p_keys", expanding=True))
)
_COUNTED_RUNS = (
    t.runs.c.playbook == sa.bindparam("p_playbook"),
    t.runs.c.guard_key == sa.bindparam("p_guard_key"),
    t.runs.c.phase == "firing",
    t.runs.c.status != RunStatus.REJECTED,
    # A run that failed for a transient reason before changing anything did nothing to count.
    t.runs.c.rerunnable == sa.false(),
)
_TARGET_WINDOW = sa.select(sa.func.max(t.runs.c.created_at), sa.func.count()).where(
    *_COUNTED_RUNS, t.runs.c.created_at >= sa.bindparam("p_since")
)
_TARGET_LAST = sa.select(t.runs.c.created_at).where(*_COUNTED_RUNS).order_by(t.runs.c.created_at.desc()).limit(1)
_REPORTED_OCCURRENCES = (
    sa.select(t.alerts.c.fingerprint, t.alerts.c.starts_at)
    .distinct()
    .where(
        t.alerts.c.fingerprint.in_(sa.bindparam("p_fingerprints", expanding=True)),
        t.alerts.c.status == sa.bindparam("p_status"),
    )
)
# Firing runs that changed (or will change) something: not refused, cancelled, waiting or only planned.
_ACTIVE_FIRING_RUNS = (
    sa.select(t.runs.c.id, t.alerts.c.starts_at)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(
        t.runs.c.playbook == sa.bindparam("p_playbook"),
        t.runs.c.guard_key == sa.bindparam("p_guard_key"),
        t.runs.c.phase == "firing",
        t.runs.c.mode != "dry-run",
        t.runs.c.status.not_in(
            (RunStatus.AWAITING_APPROVAL, RunStatus.CANCELLED, RunStatus.REJECTED, RunStatus.PLANNED)
        ),
        t.alerts.c.fingerprint == sa.bindparam("p_fingerprint"),
    )
)
_INSERT_NOTIFICATION = sa.insert(t.notifications).returning(t.notifications.c.id)


def _insert_returning_ids(table: sa.Table) -> sa.Insert:
    return sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)


_INSERT_ALERTS = _insert_returning_ids(t.alerts)
_INSERT_RUNS = _insert_returning_ids(t.runs)
_INSERT_STEPS = _insert_returning_ids(t.steps)
_INSERT_DECISIONS = _insert_returning_ids(t.decisions)


DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for the write lock where no one is waiting on an answer (executor, CLI)."""


class Store:
    def __init__(self, engine: sa.Engine, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._writer = engine.execution_options(remediate_begin="IMMEDIATE") if self.is_sqlite else engine
        self._write_lock = _WriteLock(_lock_path(engine.url) if self.is_sqlite else None, busy_timeout)
        self._file = _database_path(engine.url) if self.is_sqlite else None
        self._file_id: tuple[int, int] | None = None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Store:
        """Open (and by default create or upgrade) the database; writers wait `busy_timeout` s for the lock."""
        try:
            engine = _create_engine(url, busy_timeout)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise ConfigError(f"cannot use database URL {url!r}: {exc}") from exc
        store = cls(engine, busy_timeout=busy_timeout)
        store._protect_files()
        if upgrade:
            try:
                store.upgrade()
            except sa.exc.OperationalError as exc:
                raise ConfigError(f"cannot open database {url!r}: {exc.orig}") from exc
        store._remember_file()
        return store

    def _protect_files(self) -> None:
        """Create the SQLite file 0600 and take group/other access from it and its companions.

        SQLite gives the -wal and -shm files the mode of the database file, so creating that one
        0600 covers them; files from before (created 0644 under the usual umask) are tightened here.
        """
        if self._file is None:
            return
        # A read-only file or directory fails here: SQLite says what is wrong when it opens the file.
        with contextlib.suppress(OSError):
            os.close(os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        for path in (self._file, f"{self._file}-wal", f"{self._file}-shm", f"{self._file}-writelock"):
            try:
                mode = os.stat(path).st_mode & 0o7777
                if mode & 0o077:
                    os.chmod(path, mode & ~0o077)
            except OSError:
                pass  # absent, or not ours to change

    def _remember_file(self) -> None:
        if self._file is not None:
            try:
                stat = os.stat(self._file)
            except OSError:
                return
            self._file_id = (stat.st_dev, stat.st_ino)

    def check_file(self) -> None:
        """StoreFileReplaced if the database path no longer names the file this process has open.

        Deleting (or replacing) the file under a running server leaves every connection writing to
        the unlinked inode: commits succeed and are lost at the next restart. One stat() call.
        """
        if self._file_id is None or self._file is None:
            return
        try:
            stat = os.stat(self._file)
        except FileNotFoundError:
            raise StoreFileReplaced(f"the database file {self._file} was deleted while open") from None
        except OSError:
            return
        if (stat.st_dev, stat.st_ino) != self._file_id:
            raise StoreFileReplaced(f"the database file {self._file} was replaced by another file while open")

    def probe_write(self) -> None:
        """Do what a webhook needs: the file is ours, the write lock is free in time, a write commits."""
        self.check_file()
        with self.write() as conn:
            conn.execute(sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=t.meta.c.value))

    def close(self) -> None:
        self.engine.dispose()
        self._write_lock.close()

    def upgrade(self) -> int:
        """Create or upgrade the schema to SCHEMA_VERSION; returns the version found before."""
        current = self._current_version()
        if current == t.SCHEMA_VERSION:
            return current  # nothing to write: a locked database does not hold up start-up
        with self.write() as conn:
            inspector = sa.inspect(conn)
            if not inspector.has_table("meta"):
                t.metadata.create_all(conn)
                conn.execute(sa.insert(t.meta).values(key="schema_version", value=str(t.SCHEMA_VERSION)))
                return 0
            found = int(conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar_one())
            if found > t.SCHEMA_VERSION:
                raise ConfigError(
                    f"the database has schema version {found}, newer than this remediate ({t.SCHEMA_VERSION}): "
                    "upgrade remediate"
                )
            for version in range(found + 1, t.SCHEMA_VERSION + 1):
                t.MIGRATIONS[version](conn)
            conn.execute(sa.update(t.meta).where(t.meta.c.key == "schema_version").values(value=str(t.SCHEMA_VERSION)))
            return found

    def _current_version(self) -> int | None:
        """The schema version, read without the write lock; None if there is no schema yet."""
        try:
            return self.schema_version()
        except sa.exc.OperationalError:
            return None
        except sa.exc.NoResultFound:
            return None

    def schema_version(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar_one())

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE, so concurrent writers queue up).

        StoreBusy if the lock is not free within the store's busy timeout (also when another program
        holds SQLite's own lock that long), StoreFileReplaced if the file is no longer ours.
        """
        self.check_file()
        with self._write_lock.held():
            try:
                with self._writer.begin() as conn:
                    yield conn
            except sa.exc.OperationalError as exc:
                if self.is_sqlite and "locked" in str(exc.orig):
                    raise StoreBusy(f"the database stayed locked for {self._write_lock.timeout:g}s") from exc
                raise

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            yield conn

    def ping(self) -> None:
        with self.read() as conn:
            conn.execute(sa.select(t.meta.c.key).limit(1)).all()

    # ------------------------------------------------------------------ ingest (used by the engine)

    def writer(self) -> _IngestWriterContext:
        return _IngestWriterContext(self)

    @contextmanager
    def guard_reader(self) -> Iterator[GuardReader]:
        with self.read() as conn:
            yield GuardReader(conn, self)

    # ------------------------------------------------------------------ pause

    def pause_state(self, conn: sa.Connection | None = None) -> PauseState:
        if conn is None:
            with self.read() as own:
                return self.pause_state(own)
        row = conn.execute(_PAUSE_STATE).scalar_one_or_none()
        if not row:
            return PauseState(False)
        data = json.loads(row)
        return PauseState(bool(data.get("paused")), data.get("by", ""), data.get("reason", ""), data.get("since"))

    def set_paused(self, paused: bool, *, by: str, reason: str, now: float) -> PauseState:
        state = PauseState(paused, by, reason, now)
        value = dumps({"paused": paused, "by": by, "reason": reason, "since": now})
        with self.write() as conn:
            updated = conn.execute(sa.update(t.meta).where(t.meta.c.key == "pause").values(value=value)).rowcount
            if not updated:
                conn.execute(sa.insert(t.meta).values(key="pause", value=value))
        return state

    # ------------------------------------------------------------------ executor

    def claim_run(self, worker: str, now: float) -> ClaimedRun | None:
        """Take the oldest queued run for this worker, atomically across processes."""
        with self.write() as conn:
            claimed = conn.execute(_CLAIM[not self.is_sqlite], {"p_worker": worker, "p_now": now}).one_or_none()
            if claimed is None:
                return None
            run_id, generation = claimed
            self._sync_decision_status(conn, run_id, RunStatus.RUNNING)
            row = conn.execute(_CLAIMED_RUN, {"p_run_id": run_id}).one()
        context = _alert_context(row)
        return ClaimedRun(row.id, row.playbook, row.target, row.phase, row.mode, context, int(generation), worker)

    def steps_of(self, run_id: int) -> list[StepRecord]:
        with self.read() as conn:
            rows = conn.execute(_STEPS_OF, {"p_run_id": run_id}).all()
        return [
            StepRecord(
                r.id,
                r.run_id,
                r.idx,
                r.name,
                r.action,
                r.where,
                json.loads(r.params),
                r.timeout,
                r.retries,
                StepStatus(r.status),
                r.attempts,
                bool(r.always),
                r.error,
                r.finished_at is not None,
            )
            for r in rows
        ]

    @staticmethod
    def _check_lease(conn: sa.Connection, lease: RunLease | None, now: float) -> None:
        """Raise ClaimLostError (rolling the transaction back) unless `lease` still holds its run."""
        if lease is None:
            return
        params = {"p_run_id": lease.run_id, "p_worker": lease.worker, "p_generation": lease.generation, "p_now": now}
        if conn.execute(_CHECK_LEASE, params).rowcount != 1:
            raise ClaimLostError(
                f"run {lease.run_id} is no longer claimed by {lease.worker} (claim {lease.generation}): "
                "it was recovered or claimed by another executor; this one writes nothing more to it"
            )

    def check_lease(self, lease: RunLease, now: float) -> None:
        """ClaimLostError unless `lease` still holds its run (and refresh its heartbeat)."""
        with self.write() as conn:
            self._check_lease(conn, lease, now)

    def start_attempt(self, step_id: int, now: float, *, plan: Any = None, lease: RunLease | None = None) -> int:
        """Record that an attempt of the step starts, before the action runs; returns its number.

        With `plan` (the first attempt), the step's plan is recorded in the same transaction.
        If the executor dies during the attempt, `recover_stale` marks it interrupted.
        """
        with self.write() as conn:
            self._check_lease(conn, lease, now)
            if plan is not None:
                conn.execute(_UPDATE_STEP, {"p_step_id": step_id, "plan": dumps(plan)})
            number = conn.execute(_START_ATTEMPT, {"p_step_id": step_id, "p_now": now}).scalar_one()
            conn.execute(_INSERT_ATTEMPT, {"step_id": step_id, "number": number, "started_at": now})
        return int(number)

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
        with self.write() as conn:
            self._check_lease(conn, lease, now)
            self._finish_attempt(conn, step_id, number, outcome, error, now)

    def record_plan(self, step_id: int, plan: Any) -> None:
        with self.write() as conn:
            conn.execute(_UPDATE_STEP, {"p_step_id": step_id, "plan": dumps(plan)})

    def finish_step(
        self,
        step_id: int,
        status: StepStatus,
        *,
        now: float,
        result: Any = None,
        error: str | None = None,
        plan: Any = None,
        succeeded_attempt: int | None = None,
        run_end: RunEnd | None = None,
        lease: RunLease | None = None,
        skip: Sequence[int] = (),
        skip_reason: str = "",
        rerunnable: bool = False,
    ) -> None:
        """Record the step's outcome, durably, before the next step starts.

        In the same transaction: with `succeeded_attempt`, that attempt is closed as succeeded;
        with `run_end` (the run's last step, or the one that failed it), the run is finished.
        """
        values: dict[str, Any] = {"status": status, "finished_at": now, "error": error}
        if result is not None:
            values["result"] = dumps(result)
        if plan is not None:
            values["plan"] = dumps(plan)
        with self.write() as conn:
            self._check_lease(conn, lease, now)
            if succeeded_attempt is not None:
                self._finish_attempt(conn, step_id, succeeded_attempt, AttemptOutcome.SUCCEEDED, None, now)
            conn.execute(_UPDATE_STEP, {"p_step_id": step_id, **values})
            self._skip_steps(conn, skip, skip_reason, now)
            if run_end is not None:
                self._finish_run(conn, run_end.run_id, run_end.status, now, run_end.error, rerunnable=rerunnable)

    def pending_outcomes(self, since: float, limit: int = 100) -> list[PendingOutcome]:
        """Failed steps that handed a change over and gave up waiting for it (result ``{"pending": ...}``,
        from OutcomePending), finished at or after `since` and not settled yet: Executor.reconcile_pending's work."""
        query = (
            sa.select(
                t.steps,
                t.runs.c.playbook,
                t.runs.c.target,
                t.runs.c.phase,
                t.runs.c.mode,
                t.runs.c.alertname,
                *_ALERT_CONTEXT_COLUMNS,
            )
            .join(t.runs, t.runs.c.id == t.steps.c.run_id)
            .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
            .where(t.steps.c.status.in_((StepStatus.FAILED, StepStatus.INTERRUPTED)))
            .where(t.steps.c.finished_at >= since, t.steps.c.result.is_not(None))
            .order_by(t.steps.c.id)
            .limit(limit)
        )
        with self.read() as conn:
            rows = conn.execute(query).all()
        found = []
        for r in rows:
            result = _loads(r.result)
            if not isinstance(result, dict) or not isinstance(result.get("pending"), dict) or "late_outcome" in result:
                continue
            context = _alert_context(r)
            step = StepRecord(
                r.id, r.run_id, r.idx, r.name, r.action, r.where, json.loads(r.params), r.timeout, r.retries,
                StepStatus(r.status), r.attempts,
            )  # fmt: skip
            run = ClaimedRun(r.run_id, r.playbook, r.target, r.phase, r.mode, context)
            found.append(PendingOutcome(step, run, result["pending"], r.finished_at))
        return found

    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool:
        """Record what became of a pending step: `late_outcome` joins its result, `note` is appended to the
        step's and the run's error. False when another executor settled it first (nothing written)."""
        with self.write() as conn:
            row = conn.execute(
                sa.select(t.steps.c.result, t.steps.c.error, t.steps.c.run_id).where(t.steps.c.id == step_id)
            ).one()
            result = _loads(row.result)
            if not isinstance(result, dict) or "late_outcome" in result:
                return False
            result["late_outcome"] = dict(late_outcome)
            conn.execute(
                _UPDATE_STEP,
                {"p_step_id": step_id, "result": dumps(result), "error": f"{row.error or ''}; {note}".lstrip("; ")},
            )
            run_error = conn.execute(sa.select(t.runs.c.error).where(t.runs.c.id == row.run_id)).scalar_one()
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == row.run_id)
                .values(error=f"{run_error or ''}; {note}".lstrip("; "), updated_at=now)
            )
        return True

    def finish_run(
        self,
        run_id: int,
        status: RunStatus,
        *,
        now: float,
        error: str | None = None,
        lease: RunLease | None = None,
        skip: Sequence[int] = (),
        skip_reason: str = "",
        rerunnable: bool = False,
    ) -> None:
        with self.write() as conn:
            self._check_lease(conn, lease, now)
            self._skip_steps(conn, skip, skip_reason, now)
            self._finish_run(conn, run_id, status, now, error, rerunnable=rerunnable)

    def skip_steps(self, step_ids: Sequence[int], reason: str, *, now: float, lease: RunLease | None = None) -> None:
        """Mark steps `skipped` (an earlier step failed), with the reason."""
        with self.write() as conn:
            self._check_lease(conn, lease, now)
            self._skip_steps(conn, step_ids, reason, now)

    @staticmethod
    def _skip_steps(conn: sa.Connection, step_ids: Sequence[int], reason: str, now: float) -> None:
        if step_ids:
            conn.execute(
                sa.update(t.steps)
                .where(t.steps.c.id.in_(list(step_ids)), t.steps.c.status == StepStatus.PENDING)
                .values(status=StepStatus.SKIPPED, error=reason, finished_at=now)
            )

    @staticmethod
    def _finish_attempt(
        conn: sa.Connection, step_id: int, number: int, outcome: AttemptOutcome, error: str | None, now: float
    ) -> None:
        conn.execute(
            _FINISH_ATTEMPT,
            {"p_step_id": step_id, "p_number": number, "p_now": now, "p_outcome": outcome, "p_error": error},
        )

    @staticmethod
    def _finish_run(
        conn: sa.Connection, run_id: int, status: RunStatus, now: float, error: str | None, *, rerunnable: bool = False
    ) -> None:
        conn.execute(_FINISH_RUN, {"p_run_id": run_id, "p_status": status, "p_now": now, "p_error": error})
        if rerunnable:
            conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(rerunnable=True))
        Store._sync_decision_status(conn, run_id, status)

    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None:
        if not run_ids:
            return
        with self.write() as conn:
            # Never backwards: recovery watches the value change, so a wall clock stepped back is no silence.
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id.in_(run_ids), t.runs.c.claimed_by == worker, t.runs.c.status == RunStatus.RUNNING)
                .values(
                    heartbeat_at=sa.case(
                        (t.runs.c.heartbeat_at >= now, t.runs.c.heartbeat_at + 0.001), else_=sa.literal(now)
                    )
                )
            )

    def running_claims(self) -> list[RunningClaim]:
        """The running runs and who holds them (recovery decides which owners are gone)."""
        with self.read() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.id, t.runs.c.claimed_by, t.runs.c.claim_generation, t.runs.c.heartbeat_at).where(
                    t.runs.c.status == RunStatus.RUNNING
                )
            ).all()
        return [RunningClaim(r.id, r.claimed_by or "", int(r.claim_generation), r.heartbeat_at) for r in rows]

    def requeue_claims(self, claims: Sequence[RunningClaim], *, now: float) -> list[int]:
        """Requeue these runs, each only if it is still held by the same claim; their in-flight steps become
        `interrupted`. Returns the ids requeued."""
        if not claims:
            return []
        with self.write() as conn:
            still = [
                c.id
                for c in claims
                if conn.execute(
                    sa.select(t.runs.c.id).where(
                        t.runs.c.id == c.id,
                        t.runs.c.status == RunStatus.RUNNING,
                        t.runs.c.claim_generation == c.generation,
                    )
                ).first()
            ]
            self._requeue(conn, still, now)
        return still

    def recover_stale(self, *, now: float, stale_after: float, is_dead: Any) -> list[int]:
        """Requeue runs whose executor died; their in-flight steps become `interrupted`.

        `is_dead(claimed_by) -> bool` says whether an owner is known dead (same host, pid gone),
        otherwise a heartbeat older than `stale_after` decides. The executor then decides,
        per action, whether an interrupted step may run again.
        """
        with self.write() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.id, t.runs.c.claimed_by, t.runs.c.heartbeat_at).where(
                    t.runs.c.status == RunStatus.RUNNING
                )
            ).all()
            stale = [r.id for r in rows if is_dead(r.claimed_by or "") or (r.heartbeat_at or 0) < now - stale_after]
            if not stale:
                return []
            self._requeue(conn, stale, now)
        return stale

    def _requeue(self, conn: sa.Connection, stale: list[int], now: float) -> None:
        if stale:
            conn.execute(
                sa.update(t.steps)
                .where(t.steps.c.run_id.in_(stale), t.steps.c.status == StepStatus.RUNNING)
                .values(status=StepStatus.INTERRUPTED, error="the executor stopped while this step was running")
            )
            conn.execute(
                sa.update(t.attempts)
                .where(
                    t.attempts.c.finished_at.is_(None),
                    t.attempts.c.step_id.in_(sa.select(t.steps.c.id).where(t.steps.c.run_id.in_(stale))),
                )
                .values(
                    finished_at=now,
                    outcome=AttemptOutcome.INTERRUPTED,
                    error="the executor stopped during this attempt",
                )
            )
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id.in_(stale))
                .values(status=RunStatus.QUEUED, claimed_by=None, updated_at=now)
            )
            for run_id in stale:
                self._sync_decision_status(conn, run_id, RunStatus.QUEUED)

    def memory(self) -> StoreMemory:
        """The ActionMemory actions use (see remediate.actions.base)."""
        return StoreMemory(self)

    # ------------------------------------------------------------------ circuit breaker (remediate.breaker)

    @contextmanager
    def breaker_ledger(self) -> Iterator[BreakerRows]:
        """The breaker's rows in ONE write transaction: its check and its count update are atomic across workers."""
        with self.write() as conn:
            if not self.is_sqlite:
                # READ COMMITTED would let two claims see the same count; serialise the breaker's writers.
                conn.exec_driver_sql("LOCK TABLE breaker_claims IN SHARE ROW EXCLUSIVE MODE")
            yield BreakerRows(conn)

    @contextmanager
    def breaker_view(self) -> Iterator[BreakerRows]:
        """The breaker's rows, read only."""
        with self.read() as conn:
            yield BreakerRows(conn)

    def breaker_state(self, conn: sa.Connection | None = None) -> dict[str, Any] | None:
        if conn is None:
            with self.read() as own:
                return self.breaker_state(own)
        return BreakerRows(conn).state()

    def queue_depth(self) -> dict[str, int]:
        with self.read() as conn:
            rows = conn.execute(
                sa.select(t.runs.c.status, sa.func.count())
                .where(t.runs.c.status.in_([RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL]))
                .group_by(t.runs.c.status)
            ).all()
        depth = {RunStatus.QUEUED: 0, RunStatus.RUNNING: 0, RunStatus.AWAITING_APPROVAL: 0}
        depth.update({status: count for status, count in rows})
        return depth

    # ------------------------------------------------------------------ approval

    def approve(self, run_id: int, *, by: str, now: float) -> None:
        if not 0 < run_id <= MAX_ID:
            raise UnknownRunError(f"no run {run_id}")
        with self.write() as conn:
            status = conn.execute(sa.select(t.runs.c.status).where(t.runs.c.id == run_id)).scalar_one_or_none()
            if status is None:
                raise UnknownRunError(f"no run {run_id}")
            if status != RunStatus.AWAITING_APPROVAL:
                raise RunStateError(f"run {run_id} is {status}, not awaiting approval")
            conn.execute(
                sa.update(t.runs)
                .where(t.runs.c.id == run_id)
                .values(status=RunStatus.QUEUED, approved_by=by, approved_at=now, updated_at=now)
            )
            self._sync_decision_status(conn, run_id, RunStatus.QUEUED)

    # ------------------------------------------------------------------ reading the history

    def history(self, query: HistoryQuery) -> tuple[list[dict[str, Any]], str | None]:
        d = t.decisions
        conditions = []
        for column, value in (
            (d.c.playbook, query.playbook),
            (d.c.alertname, query.alertname),
            (d.c.target, query.target),
            (d.c.status, query.status),
        ):
            if value is not None:
                conditions.append(column == value)
        if query.since is not None:
            conditions.append(d.c.created_at >= query.since)
        if query.until is not None:
            conditions.append(d.c.created_at < query.until)
        if query.cursor:
            conditions.append(d.c.id < decode_cursor(query.cursor))
        # The page's ids first, from an index alone; then read and join only those rows. In one
        # statement, a since/until window made SQLite read and join every row of the window before
        # sorting by id (80 ms for a 7-day window of a 1M-run store; 10 ms this way: bench/history.py).
        page = sa.select(d.c.id).where(*conditions).order_by(d.c.id.desc()).limit(query.limit + 1)
        statement = (
            sa.select(
                d,
                t.runs.c.phase,
                t.runs.c.mode,
                t.runs.c.started_at,
                t.runs.c.finished_at,
                t.runs.c.error.label("run_error"),
            )
            .outerjoin(t.runs, t.runs.c.id == d.c.run_id)
            .where(d.c.id.in_(page.scalar_subquery()))
            .order_by(d.c.id.desc())
        )
        with self.read() as conn:
            rows = conn.execute(statement).all()
        more = len(rows) > query.limit
        rows = rows[: query.limit]
        entries = [
            {
                "id": r.id,
                "time": r.created_at,
                "alertname": r.alertname,
                "fingerprint": r.fingerprint,
                "alert_status": r.alert_status,
                "playbook": r.playbook,
                "target": r.target,
                "decision": r.decision,
                "reason": r.reason,
                "status": r.status,
                "run_id": r.run_id,
                "run": None
                if r.run_id is None
                else {
                    "id": r.run_id,
                    "phase": r.phase,
                    "mode": r.mode,
                    "status": r.status,
                    "started_at": r.started_at,
                    "finished_at": r.finished_at,
                    "error": r.run_error,
                },
            }
            for r in rows
        ]
        return entries, (encode_cursor(rows[-1].id) if more and rows else None)

    def run_detail(self, run_id: int) -> dict[str, Any]:
        if not 0 < run_id <= MAX_ID:
            raise UnknownRunError(f"no run {run_id}")
        with self.read() as conn:
            run = conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).one_or_none()
            if run is None:
                raise UnknownRunError(f"no run {run_id}")
            alert = conn.execute(sa.select(t.alerts).where(t.alerts.c.id == run.alert_id)).one()
            step_rows = conn.execute(sa.select(t.steps).where(t.steps.c.run_id == run_id).order_by(t.steps.c.idx)).all()
            attempt_rows = conn.execute(
                sa.select(t.attempts)
                .where(t.attempts.c.step_id.in_([s.id for s in step_rows]))
                .order_by(t.attempts.c.step_id, t.attempts.c.number)
            ).all()
            decision = conn.execute(sa.select(t.decisions).where(t.decisions.c.run_id == run_id)).first()
        attempts_by_step: dict[int, list[dict[str, Any]]] = {}
        for a in attempt_rows:
            attempts_by_step.setdefault(a.step_id, []).append(
                {
                    "number": a.number,
                    "started_at": a.started_at,
                    "finished_at": a.finished_at,
                    "outcome": a.outcome,
                    "error": a.error,
                }
            )
        return {
            "id": run.id,
            "playbook": run.playbook,
            "alertname": run.alertname,
            "target": run.target,
            "phase": run.phase,
            "mode": run.mode,
            "status": run.status,
            "created_at": run.created_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "approved_by": run.approved_by,
            "approved_at": run.approved_at,
            "error": run.error,
            "rerunnable": bool(run.rerunnable),
            "superseded_by": run.superseded_by,
            "decision": None if decision is None else {"decision": decision.decision, "reason": decision.reason},
            "alert": {
                "id": alert.id,
                "notification_id": alert.notification_id,
                "fingerprint": alert.fingerprint,
                "status": alert.status,
                "startsAt": alert.starts_at,
                "endsAt": alert.ends_at,
                "labels": json.loads(alert.labels),
                "annotations": json.loads(alert.annotations),
                "generatorURL": alert.generator_url,
            },
            "steps": [
                {
                    "index": s.idx,
                    "name": s.name,
                    "action": s.action,
                    "where": s.where,
                    "params": json.loads(s.params),
                    "status": s.status,
                    "plan": _loads(s.plan),
                    "result": _loads(s.result),
                    "error": s.error,
                    "attempts": attempts_by_step.get(s.id, []),
                    "timeout": s.timeout,
                    "retries": s.retries,
                    "always": bool(s.always),
                    "started_at": s.started_at,
                    "finished_at": s.finished_at,
                }
                for s in step_rows
            ],
        }

    def counts(self) -> dict[str, int]:
        with self.read() as conn:
            return {
                name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                for name, table in (
                    ("notifications", t.notifications),
                    ("alerts", t.alerts),
                    ("decisions", t.decisions),
                    ("runs", t.runs),
                    ("steps", t.steps),
                )
            }

    @staticmethod
    def _sync_decision_status(conn: sa.Connection, run_id: int, status: RunStatus) -> None:
        conn.execute(_SYNC_DECISION_STATUS, {"p_run_id": run_id, "p_status": status})


class _IngestWriterContext:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._cm: Any = None

    def __enter__(self) -> IngestWriter:
        self._cm = self._store.write()
        return IngestWriter(self._cm.__enter__(), self._store)

    def __exit__(self, *exc_info: Any) -> Any:
        return self._cm.__exit__(*exc_info)


class GuardReader:
    """The reads the guards need, on one connection: inside the ingest transaction, or read-only for dry-run."""

    def __init__(self, conn: sa.Connection, store: Store) -> None:
        self.conn = conn
        self._store = store

    def pause_state(self) -> PauseState:
        return self._store.pause_state(self.conn)

    def breaker_state(self) -> dict[str, Any] | None:
        """The circuit breaker's persisted state (remediate.breaker.BreakerState as a dict), if any."""
        return BreakerRows(self.conn).state()

    def existing_runs(self, keys: Iterable[str]) -> dict[str, tuple[int, str]]:
        """dedupe_key -> (run id, status) for keys that already have a run."""
        found: dict[str, tuple[int, str]] = {}
        key_list = list(dict.fromkeys(keys))
        for start in range(0, len(key_list), 500):
            chunk = key_list[start : start + 500]
            rows = self.conn.execute(_EXISTING_RUNS, {"p_keys": chunk}).all()
            found.update({r.dedupe_key: (r.id, r.status) for r in rows})
        return found

    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]:
        """run id -> its error, for those of `run_ids` that failed for a transient reason before changing
        anything and were not superseded yet: the next delivery of their occurrence runs again."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        rows = self.conn.execute(
            sa.select(t.runs.c.id, t.runs.c.error).where(
                t.runs.c.id.in_(ids),
                t.runs.c.status == RunStatus.FAILED,
                t.runs.c.rerunnable == sa.true(),
                t.runs.c.superseded_by.is_(None),
            )
        ).all()
        return {r.id: r.error or "" for r in rows}

    def target_history(self, playbook: str, guard_key: str, since: float) -> tuple[float | None, int]:
        """(time of the last counted firing run ever, number of counted firing runs since `since`),
        for one playbook and guard key (the target, or the target plus the playbook's `guard_by` labels).

        The last run is looked up beyond `since` too: a cooldown may be longer than the attempt window.
        """
        params = {"p_playbook": playbook, "p_guard_key": guard_key}
        row = self.conn.execute(_TARGET_WINDOW, {**params, "p_since": since}).one()
        last = row[0]
        if last is None:
            last = self.conn.execute(_TARGET_LAST, params).scalar_one_or_none()
        return last, int(row[1])

    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]:
        """(fingerprint, startsAt) of every occurrence of these alerts ever received with `status`
        (firing/resolved): every received alert is stored, so this is the record of what was reported."""
        wanted = sorted(set(fingerprints))
        found: set[tuple[str, str]] = set()
        for start in range(0, len(wanted), 500):
            params = {"p_fingerprints": wanted[start : start + 500], "p_status": status}
            found.update((r.fingerprint, r.starts_at) for r in self.conn.execute(_REPORTED_OCCURRENCES, params))
        return found

    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]:
        """(run id, alert startsAt) of the firing runs of one alert (fingerprint) for one playbook and guard
        key that acted or will act (queued, running, finished; not dry-run, refused or only waiting)."""
        params = {"p_playbook": playbook, "p_guard_key": guard_key, "p_fingerprint": fingerprint}
        return [(r.id, r.starts_at) for r in self.conn.execute(_ACTIVE_FIRING_RUNS, params)]


class EmptyGuardReader:
    """Guard facts of a store with no history (dry-run against a database that does not exist yet)."""

    def pause_state(self) -> PauseState:
        return PauseState(False)

    def breaker_state(self) -> dict[str, Any] | None:
        return None

    def existing_runs(self, keys: Iterable[str]) -> dict[str, tuple[int, str]]:
        return {}

    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]:
        return {}

    def target_history(self, playbook: str, guard_key: str, since: float) -> tuple[float | None, int]:
        return None, 0

    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]:
        return set()

    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]:
        return []


class IngestWriter(GuardReader):
    """The statements the engine needs while it ingests one notification, all in one transaction."""

    def insert_notification(
        self, *, received_at: float, receiver: str, status: str, group_key: str, alert_count: int, raw: str
    ) -> int:
        return int(
            self.conn.execute(
                _INSERT_NOTIFICATION,
                {
                    "received_at": received_at,
                    "receiver": receiver,
                    "status": status,
                    "group_key": group_key,
                    "alert_count": alert_count,
                    "raw": raw,
                },
            ).scalar_one()
        )

    def insert_alerts(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """The notification's alerts (`engine._alert_row`); their ids, in order."""
        return self._insert(_INSERT_ALERTS, rows)

    def insert_runs(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Accepted runs (`runs.run_row`); their ids, in order."""
        return self._insert(_INSERT_RUNS, rows)

    def insert_steps(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """The steps of those runs (`runs.step_rows`); their ids, in order."""
        return self._insert(_INSERT_STEPS, rows)

    def insert_decisions(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """One decision per (alert, playbook) judged (`runs.decision_row`); their ids, in order."""
        return self._insert(_INSERT_DECISIONS, rows)

    def _insert(self, statement: sa.Insert, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        if not rows:
            return []
        return [row[0] for row in self.conn.execute(statement, list(rows))]

    def release_dedupe_key(self, run_id: int) -> None:
        """Free the dedupe key of a rerunnable run for the run that supersedes it; the old run stays in history."""
        self.conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(dedupe_key=f"superseded:{run_id}"))

    def mark_superseded(self, run_id: int, by_run: int, now: float) -> None:
        self.conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(superseded_by=by_run, updated_at=now))

    def cancel_awaiting(self, run_id: int, reason: str, now: float) -> bool:
        """Cancel a run still awaiting approval; False when it has moved on."""
        done = self.conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id == run_id, t.runs.c.status == RunStatus.AWAITING_APPROVAL)
            .values(status=RunStatus.CANCELLED, error=reason, finished_at=now, updated_at=now)
        ).rowcount
        if done:
            Store._sync_decision_status(self.conn, run_id, RunStatus.CANCELLED)
        return bool(done)


def _database_path(url: sa.URL) -> str | None:
    """The file of a SQLite database; None for in-memory and URI databases."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        return None
    return database


def _lock_path(url: sa.URL) -> str | None:
    """The write lock file of a SQLite database file; None for in-memory and URI databases."""
    database = _database_path(url)
    return None if database is None else f"{database}-writelock"


class _WriteLock:
    """Queues the writers of one SQLite file, across threads (a lock) and processes (flock on a lock file).

    SQLite still decides (BEGIN IMMEDIATE and its busy timeout, which also covers writers that are not
    remediate); this only makes our own writers wait in a queue the kernel wakes, not in sleep steps.
    The kernel drops a flock when its process dies, so a crashed worker cannot leave it held. When the
    lock file cannot be opened (a read-only directory), writers fall back to SQLite's busy timeout alone.
    Both waits end after `timeout` seconds with StoreBusy: a request then gets 503, not a hang.
    """

    def __init__(self, path: str | None, timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._pid: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        deadline = time.monotonic() + self.timeout
        if not self._thread_lock.acquire(timeout=self.timeout):
            raise StoreBusy(f"the database write lock stayed taken for {self.timeout:g}s")
        try:
            fd = self._open()
            if fd is None:
                yield
                return
            self._flock(fd, deadline)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _flock(self, fd: int, deadline: float) -> None:
        # flock has no timeout: try without blocking, sleeping 1 ms growing to 20 ms. Our own writers
        # of this process already queue on the thread lock; this wait is for other processes.
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusy(f"the database write lock {self.path} stayed taken for {self.timeout:g}s") from None
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, 0.02)

    def _open(self) -> int | None:
        if self._pid != os.getpid():  # a forked child opens its own: a flock belongs to an open file
            self._pid = os.getpid()
            try:
                self._fd = os.open(self.path or "", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._fd = None
        return self._fd

    def close(self) -> None:
        with self._thread_lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = self._pid = None


class BreakerRows:
    """The circuit breaker's ledger (remediate.breaker.BreakerLedger) on one connection of the store."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def state(self) -> dict[str, Any] | None:
        text = self.conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "breaker")).scalar_one_or_none()
        return None if text is None else json.loads(text)

    def save_state(self, state: Mapping[str, Any]) -> None:
        value = dumps(dict(state))
        updated = self.conn.execute(sa.update(t.meta).where(t.meta.c.key == "breaker").values(value=value)).rowcount
        if not updated:
            self.conn.execute(sa.insert(t.meta).values(key="breaker", value=value))

    def open_claims(self) -> list[Any]:
        return self._claims(t.breaker_claims.c.released_at.is_(None))

    def claims_since(self, since: float) -> list[Any]:
        return self._claims(t.breaker_claims.c.claimed_at >= since)

    def add_claim(self, claim: Any) -> None:
        self.conn.execute(
            sa.insert(t.breaker_claims).values(
                node=claim.node, kind=claim.kind, run_id=claim.run_id, claimed_at=claim.claimed_at
            )
        )

    def release(self, node: str, *, now: float, reason: str) -> int:
        c = t.breaker_claims.c
        return int(
            self.conn.execute(
                sa.update(t.breaker_claims)
                .where(c.node == node, c.released_at.is_(None))
                .values(released_at=now, released_reason=reason[:1000])
            ).rowcount
        )

    def _claims(self, condition: Any) -> list[Any]:
        # Plain rows with the fields of remediate.breaker.ClaimRow: the breaker's types stay the breaker's.
        c = t.breaker_claims.c
        return list(
            self.conn.execute(
                sa.select(c.node, c.kind, c.run_id, c.claimed_at, c.released_at).where(condition).order_by(c.id)
            ).all()
        )


class StoreMemory:
    """ActionMemory kept in the `action_memory` table: survives restarts, shared by every worker."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def recall(self, key: str) -> dict[str, Any] | None:
        with self._store.read() as conn:
            text = conn.execute(
                sa.select(t.action_memory.c.value).where(t.action_memory.c.key == key)
            ).scalar_one_or_none()
        return None if text is None else json.loads(text)

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        row = {"value": dumps(dict(value)), "run_id": run_id or None, "updated_at": time.time()}
        with self._store.write() as conn:
            updated = conn.execute(
                sa.update(t.action_memory).where(t.action_memory.c.key == key).values(**row)
            ).rowcount
            if not updated:
                conn.execute(sa.insert(t.action_memory).values(key=key, **row))

    def forget(self, key: str) -> None:
        with self._store.write() as conn:
            conn.execute(sa.delete(t.action_memory).where(t.action_memory.c.key == key))


def _create_engine(url: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            mode = conn.get_execution_options().get("remediate_begin", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)
