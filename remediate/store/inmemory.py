"""InMemoryStore: the store's interface (remediate.store.interface) on plain Python lists and dicts.

Why: the engine's and the executor's unit tests need a store, not SQLite; this one is fast, needs no
file, and its tables are there to look at (`store.tables["runs"]` is a list of dicts with the columns
of remediate.schema). Modelled on procrastinate's InMemoryConnector: the same interface as the real
store, the same semantics as its SQL statements (claim order, leases, recovery, the guards' reads),
and the same named errors. tests/unit/store/test_contract.py runs one set of behaviours against it
and against the SQLite store, so the two cannot drift apart.

A row's id is its position in its table + 1 (rows are never deleted). Every write runs under one
lock (the executor runs threads) and is atomic: the tables are copied when it starts and put back
if it raises, as a rolled-back transaction would leave them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NamedTuple

import sqlalchemy as sa

from remediate import schema as t
from remediate.errors import AlreadyPaused, ClaimLostError, RunStateError, StoreConflict, UnknownRunError
from remediate.runs import (
    FINAL_RUN_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    LadderState,
    PendingOutcome,
    RunEnd,
    RunLease,
    RunningClaim,
    RunStatus,
    RunWrite,
    StepEnd,
    StepRecord,
    StepStatus,
)
from remediate.store.announcements import SENDING, AwaitingRun
from remediate.store.decision_time import monotonic
from remediate.store.pause import PauseState
from remediate.store.queue import EXECUTOR_STOPPED
from remediate.store.report import Report, ReportQuery, build_report, report_rows_of_tables
from remediate.store.rows import MAX_ID, dumps

Row = dict[str, Any]
_TABLES = (t.notifications, t.alerts, t.runs, t.steps, t.attempts, t.decisions, t.breaker_claims)
_SERVER_DEFAULTS = {
    "claim_generation": 0,
    "rerunnable": False,
    "attempts": 0,
    "always": False,
    "continue_on_error": False,
    "priority": 0,
}
_NOT_ACTING = (RunStatus.AWAITING_APPROVAL, RunStatus.CANCELLED, RunStatus.REJECTED, RunStatus.PLANNED)


class ClaimView(NamedTuple):
    """A breaker claim as the ledger hands it back (the fields of remediate.breaker.ClaimRow)."""

    node: str
    kind: str
    run_id: int
    claimed_at: float
    released_at: float | None


class InMemoryStore:
    """The store's interface in memory: see the module docstring."""

    def __init__(self) -> None:
        self.tables: dict[str, list[Row]] = {table.name: [] for table in _TABLES}
        self.meta: dict[str, str] = {}
        self.action_memory: dict[str, Row] = {}
        self.ladder_rows: dict[tuple[str, str], Row] = {}
        """`ladders` rows by (playbook, guard key)."""
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ transactions and rows

    def select(self, table: str, **equal: Any) -> list[Row]:
        """Copies of the rows of `table` whose columns equal `equal`, in id order (for tests to look at)."""
        with self._lock:
            return [dict(r) for r in self.tables[table] if all(r[k] == v for k, v in equal.items())]

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write: under the lock; if the block raises, every table is as it was before."""
        with self._lock:
            saved = (
                {name: [dict(row) for row in rows] for name, rows in self.tables.items()},
                dict(self.meta),
                {key: dict(row) for key, row in self.action_memory.items()},
                {key: dict(row) for key, row in self.ladder_rows.items()},
            )
            try:
                yield
            except BaseException:
                # In place: a test holding `store.tables["runs"]` sees the rolled-back rows.
                for name, rows in saved[0].items():
                    self.tables[name][:] = rows
                self.meta.clear()
                self.meta.update(saved[1])
                self.action_memory.clear()
                self.action_memory.update(saved[2])
                self.ladder_rows.clear()
                self.ladder_rows.update(saved[3])
                raise

    def _insert(self, table: str, row: Mapping[str, Any]) -> int:
        columns = {c.name for c in t.metadata.tables[table].columns}
        unknown = set(row) - columns
        if unknown:  # the SQL insert refuses them too: a row builder and the schema disagree
            raise ValueError(f"{table} has no columns {sorted(unknown)}")
        rows = self.tables[table]
        new = {name: _SERVER_DEFAULTS.get(name) for name in columns} | dict(row) | {"id": len(rows) + 1}
        rows.append(new)
        return int(new["id"])

    def _row(self, table: str, row_id: int) -> Row | None:
        rows = self.tables[table]
        return rows[row_id - 1] if 0 < row_id <= len(rows) else None

    def _one(self, table: str, row_id: int) -> Row:
        """The row, where the SQL reads one row and fails without it."""
        row = self._row(table, row_id)
        if row is None:
            raise sa.exc.NoResultFound(f"no {table} row {row_id}")
        return row

    def _update(self, table: str, row_id: int, **values: Any) -> None:
        """UPDATE ... WHERE id = row_id: nothing happens to a row that does not exist."""
        row = self._row(table, row_id)
        if row is not None:
            row.update(values)

    def _steps(self, run_ids: Iterable[int]) -> list[Row]:
        wanted = set(run_ids)
        return [s for s in self.tables["steps"] if s["run_id"] in wanted]

    def _sync_decision_status(self, run_id: int, status: RunStatus) -> None:
        """A decision shows its run's status (Store._sync_decision_status)."""
        for decision in self.tables["decisions"]:
            if decision["run_id"] == run_id:
                decision["status"] = status

    def _alert_context(self, run: Row) -> dict[str, Any]:
        alert = self.tables["alerts"][run["alert_id"] - 1]
        return {
            "labels": json.loads(alert["labels"]),
            "annotations": json.loads(alert["annotations"]),
            "status": alert["status"],
            "alertname": run["alertname"],
            "fingerprint": alert["fingerprint"],
            "startsAt": alert["starts_at"],
            "endsAt": alert["ends_at"] or "",
            "generatorURL": alert["generator_url"],
        }

    # ------------------------------------------------------------------ ingest and pause

    @contextmanager
    def writer(self) -> Iterator[_Writer]:
        with self._transaction():
            yield _Writer(self)

    @contextmanager
    def guard_reader(self) -> Iterator[_Reader]:
        with self._lock:
            yield _Reader(self)

    def pause_state(self) -> PauseState:
        with self._lock:
            if not self.meta.get("pause"):
                return PauseState(False)
            data = json.loads(self.meta["pause"])
        return PauseState(bool(data.get("paused")), data.get("by", ""), data.get("reason", ""), data.get("since"))

    def set_paused(self, paused: bool, *, by: str, reason: str, now: float, replace: bool = True) -> PauseState:
        with self._transaction():
            if paused and not replace and self.meta.get("pause"):
                existing = json.loads(self.meta["pause"])
                if existing.get("paused"):
                    raise AlreadyPaused(existing.get("by", ""), existing.get("reason", ""), existing.get("since"))
            self.meta["pause"] = dumps({"paused": paused, "by": by, "reason": reason, "since": now})
        return PauseState(paused, by, reason, now)

    def breaker_state(self) -> dict[str, Any] | None:
        with self._lock:
            return _BreakerRows(self).state()

    def report(self, query: ReportQuery) -> Report:
        with self._lock:
            rows, held = report_rows_of_tables(self.tables, query)
        return build_report(rows, held, query)

    def approve(self, run_id: int, *, by: str, now: float) -> None:
        if not 0 < run_id <= MAX_ID:
            raise UnknownRunError(f"no run {run_id}")
        with self._transaction():
            run = self._row("runs", run_id)
            if run is None:
                raise UnknownRunError(f"no run {run_id}")
            if run["status"] != RunStatus.AWAITING_APPROVAL:
                raise RunStateError(f"run {run_id} is {run['status']}, not awaiting approval")
            run.update(status=RunStatus.QUEUED, approved_by=by, approved_at=now, updated_at=now)
            self._sync_decision_status(run_id, RunStatus.QUEUED)

    # ------------------------------------------------------------------ announcements of runs awaiting approval

    def take_announcement(self, now: float, actions: Sequence[str]) -> AwaitingRun | None:
        """The oldest awaiting, never taken run with a step of `actions` (store.announcements), marked taken."""
        wanted = set(actions)
        with self._transaction():
            with_chat = {s["run_id"] for s in self.tables["steps"] if s["action"] in wanted}
            run = next(
                (
                    r
                    for r in self.tables["runs"]
                    if r["status"] == RunStatus.AWAITING_APPROVAL and r["announced_at"] is None and r["id"] in with_chat
                ),
                None,
            )
            if run is None:
                return None
            run.update(announced_at=now, announce_error=SENDING)
            context = self._alert_context(run)
        return AwaitingRun(
            run["id"], run["playbook"], run["target"], run["phase"], run["mode"], context,
            tuple(self.steps_of(run["id"])), rung=run.get("rung"),
        )  # fmt: skip

    def record_announcement(self, run_id: int, *, error: str | None) -> None:
        with self._transaction():
            run = self._row("runs", run_id)
            if run is not None and run["announced_at"] is not None:
                run["announce_error"] = error

    # ------------------------------------------------------------------ escalation ladders

    def ladders(self, *, target: str | None = None, playbook: str | None = None) -> list[LadderState]:
        with self._lock:
            rows = [
                r
                for _, r in sorted(self.ladder_rows.items())
                if (target is None or r["target"] == target) and (playbook is None or r["playbook"] == playbook)
            ]
            return [LadderState.from_row(r) for r in rows]

    def reset_ladders(
        self, target: str, *, playbook: str | None = None, by: str, reason: str, now: float
    ) -> list[LadderState]:
        why = f"reset by {by}" + (f": {reason}" if reason else "")
        with self._transaction():
            for row in self.ladder_rows.values():
                if row["target"] == target and (playbook is None or row["playbook"] == playbook):
                    row.update(rung=0, reason=why, climb="[]", updated_at=now)
        return self.ladders(target=target, playbook=playbook)

    # ------------------------------------------------------------------ the run queue (executor)

    def claim_run(self, worker: str, now: float) -> ClaimedRun | None:
        """The queued run at the head of the queue (priority, then id) whose prior run (after_run_id) is final."""
        while (run := self.next_run(worker)) is not None:
            if self.claim_next(run, now):
                return run if run.started_at is not None else replace(run, started_at=now)
        return None

    def next_run(self, worker: str, *, skip: Collection[int] = ()) -> ClaimedRun | None:
        """The head of the queue as `worker` will claim it, with its steps (as RunQueue.next_run)."""
        with self._lock:
            queued = [
                r
                for r in self.tables["runs"]
                if r["status"] == RunStatus.QUEUED and self._free(r) and r["id"] not in skip
            ]
            if not queued:
                return None
            run = min(queued, key=lambda r: (r["priority"], r["id"]))
            steps = sorted(self._steps([run["id"]]), key=lambda s: s["idx"])
            return ClaimedRun(
                run["id"], run["playbook"], run["target"], run["phase"], run["mode"], self._alert_context(run),
                int(run["claim_generation"]) + 1, worker, rung=run.get("rung"), started_at=run["started_at"],
                steps=tuple(_step_record(s, full=True) for s in steps),
            )  # fmt: skip

    def claim_next(self, run: ClaimedRun, now: float, write: RunWrite | None = None) -> bool:
        """Claim `run` and record `write` in one transaction, unless taken since (as RunQueue.claim_next)."""
        with self._transaction():
            row = self._one("runs", run.id)
            if row["status"] != RunStatus.QUEUED or row["claim_generation"] != run.generation - 1:
                return False
            row.update(
                status=RunStatus.RUNNING, claimed_by=run.worker, claim_generation=run.generation, heartbeat_at=now,
                updated_at=now, started_at=row["started_at"] or run.started_at or now,
            )  # fmt: skip
            self._sync_decision_status(run.id, RunStatus.RUNNING)
            if write is not None:
                self._write_batch([write], now)
        return True

    def record(self, write: RunWrite, now: float) -> None:
        """`write` in one transaction under its lease (ClaimLostError: taken over)."""
        with self._transaction():
            self._check_lease(write.lease, now)
            self._write_batch([write], now)

    def _write_batch(self, writes: Sequence[RunWrite], now: float) -> None:
        """The writes of a batch's runs whose leases hold, in the caller's transaction."""
        for write in writes:
            for end in write.ends:
                if end.attempt is not None:
                    error = None if end.outcome == AttemptOutcome.SUCCEEDED else end.error
                    self._finish_attempt(end.step_id, end.attempt, end.outcome, error, now)
                values: dict[str, Any] = {"status": end.status, "finished_at": now, "error": end.error}
                if end.result is not None:
                    values["result"] = dumps(end.result)
                if end.plan is not None:
                    values["plan"] = dumps(end.plan)
                self._update("steps", end.step_id, **values)
            self._skip_steps(write.skip, write.skip_reason, now)
            for start in write.starts:
                step = self._one("steps", start.step_id)
                step.update(status=StepStatus.RUNNING, attempts=start.number)
                if start.plan is not None:  # a retry keeps the plan of the first attempt
                    step["plan"] = dumps(start.plan)
                step["started_at"] = now if step["started_at"] is None else step["started_at"]
                attempt = {"step_id": start.step_id, "number": start.number, "started_at": now}
                self._insert("attempts", {**attempt, "worker": write.lease.worker})
            if write.run_end is not None:
                end_ = write.run_end
                self._finish_run(end_.run_id, end_.status, now, end_.error, rerunnable=write.rerunnable)

    def _free(self, run: Row) -> bool:
        prior = self._row("runs", run["after_run_id"]) if run["after_run_id"] is not None else None
        return prior is None or prior["status"] in FINAL_RUN_STATUSES

    def steps_of(self, run_id: int) -> list[StepRecord]:
        with self._lock:
            rows = sorted(self._steps([run_id]), key=lambda s: s["idx"])
            return [_step_record(s, full=True) for s in rows]

    def _check_lease(self, lease: RunLease | None, now: float) -> None:
        """ClaimLostError unless `lease` still holds its run; refreshes its heartbeat (never backwards)."""
        if lease is None:
            return
        run = self._row("runs", lease.run_id)
        if (
            run is None
            or run["claimed_by"] != lease.worker
            or run["claim_generation"] != lease.generation
            or run["status"] != RunStatus.RUNNING
        ):
            raise ClaimLostError(
                f"run {lease.run_id} is no longer claimed by {lease.worker} (claim {lease.generation}): "
                "it was recovered or claimed by another executor; this one writes nothing more to it"
            )
        run["heartbeat_at"] = _forward(run["heartbeat_at"], now)

    def check_lease(self, lease: RunLease, now: float) -> None:
        with self._transaction():
            self._check_lease(lease, now)

    def start_attempt(self, step_id: int, now: float, *, plan: Any = None, lease: RunLease | None = None) -> int:
        with self._transaction():
            self._check_lease(lease, now)
            step = self._one("steps", step_id)
            if plan is not None:
                step["plan"] = dumps(plan)
            step.update(status=StepStatus.RUNNING, attempts=step["attempts"] + 1)
            step["started_at"] = now if step["started_at"] is None else step["started_at"]
            worker = None if lease is None else lease.worker
            self._insert(
                "attempts", {"step_id": step_id, "number": step["attempts"], "started_at": now, "worker": worker}
            )
            return int(step["attempts"])

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
        with self._transaction():
            self._check_lease(lease, now)
            self._finish_attempt(step_id, number, outcome, error, now)

    def _finish_attempt(
        self, step_id: int, number: int, outcome: AttemptOutcome, error: str | None, now: float
    ) -> None:
        for attempt in self.tables["attempts"]:
            if attempt["step_id"] == step_id and attempt["number"] == number:
                attempt.update(finished_at=now, outcome=outcome, error=error)

    def record_plan(self, step_id: int, plan: Any) -> None:
        with self._transaction():
            self._update("steps", step_id, plan=dumps(plan))

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
        with self._transaction():
            self._check_lease(lease, now)
            if succeeded_attempt is not None:
                self._finish_attempt(step_id, succeeded_attempt, AttemptOutcome.SUCCEEDED, None, now)
            values: dict[str, Any] = {"status": status, "finished_at": now, "error": error}
            if result is not None:
                values["result"] = dumps(result)
            if plan is not None:
                values["plan"] = dumps(plan)
            self._update("steps", step_id, **values)
            self._skip_steps(skip, skip_reason, now)
            if run_end is not None:
                self._finish_run(run_end.run_id, run_end.status, now, run_end.error, rerunnable=rerunnable)

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
        with self._transaction():
            self._check_lease(lease, now)
            self._skip_steps(skip, skip_reason, now)
            self._finish_run(run_id, status, now, error, rerunnable=rerunnable)

    def _finish_run(self, run_id: int, status: RunStatus, now: float, error: str | None, *, rerunnable: bool) -> None:
        self._update("runs", run_id, status=status, finished_at=now, updated_at=now, error=error, claimed_by=None)
        if rerunnable:
            self._update("runs", run_id, rerunnable=True)
        self._sync_decision_status(run_id, status)

    def skip_steps(self, step_ids: Sequence[int], reason: str, *, now: float, lease: RunLease | None = None) -> None:
        with self._transaction():
            self._check_lease(lease, now)
            self._skip_steps(step_ids, reason, now)

    def _skip_steps(self, step_ids: Sequence[int], reason: str, now: float) -> None:
        for step_id in step_ids:
            step = self._row("steps", step_id)
            if step is not None and step["status"] == StepStatus.PENDING:
                step.update(status=StepStatus.SKIPPED, error=reason, finished_at=now)

    def pending_outcomes(self, since: float, limit: int = 100) -> list[PendingOutcome]:
        with self._lock:
            rows = [
                s
                for s in self.tables["steps"]
                if s["status"] in (StepStatus.FAILED, StepStatus.INTERRUPTED)
                and s["finished_at"] is not None
                and s["finished_at"] >= since
                and s["result"] is not None
            ][:limit]  # the SQL limits the rows before the pending ones are picked out of them
            found = []
            for step in rows:
                result = json.loads(step["result"])
                if (
                    not isinstance(result, dict)
                    or not isinstance(result.get("pending"), dict)
                    or "late_outcome" in result
                ):
                    continue
                r = self.tables["runs"][step["run_id"] - 1]
                run = ClaimedRun(r["id"], r["playbook"], r["target"], r["phase"], r["mode"], self._alert_context(r))
                found.append(PendingOutcome(_step_record(step), run, result["pending"], step["finished_at"]))
        return found

    def settle_pending(self, step_id: int, late_outcome: Mapping[str, Any], note: str, now: float) -> bool:
        with self._transaction():
            step = self._one("steps", step_id)
            result = None if step["result"] is None else json.loads(step["result"])
            if not isinstance(result, dict) or "late_outcome" in result:
                return False
            result["late_outcome"] = dict(late_outcome)
            step.update(result=dumps(result), error=f"{step['error'] or ''}; {note}".lstrip("; "))
            run = self._one("runs", step["run_id"])
            run.update(error=f"{run['error'] or ''}; {note}".lstrip("; "), updated_at=now)
        return True

    def heartbeat(self, run_ids: Sequence[int], worker: str, now: float) -> None:
        if not run_ids:
            return
        with self._transaction():
            for run in self.tables["runs"]:
                if run["id"] in run_ids and run["claimed_by"] == worker and run["status"] == RunStatus.RUNNING:
                    run["heartbeat_at"] = _forward(run["heartbeat_at"], now)

    def running_claims(self) -> list[RunningClaim]:
        with self._lock:
            return [
                RunningClaim(r["id"], r["claimed_by"] or "", int(r["claim_generation"]), r["heartbeat_at"])
                for r in self.tables["runs"]
                if r["status"] == RunStatus.RUNNING
            ]

    def requeue_claims(
        self,
        claims: Sequence[RunningClaim],
        *,
        now: float,
        own: bool = False,
        ends: Mapping[int, StepEnd] | None = None,
        why: str = EXECUTOR_STOPPED,
    ) -> list[int]:
        """Requeue the runs still held by the same claim; their in-flight steps become `interrupted`, the
        ends in `ends` recorded first (see RunQueue.requeue_claims)."""
        if not claims:
            return []
        with self._transaction():
            still = [
                c.id
                for c in claims
                if (run := self._row("runs", c.id)) is not None
                and run["status"] == RunStatus.RUNNING
                and run["claim_generation"] == c.generation
                and (own or run["heartbeat_at"] == c.heartbeat_at)
            ]
            by_id = {c.id: c for c in claims}
            self._write_batch(
                [RunWrite(RunLease(i, by_id[i].claimed_by, by_id[i].generation), ends=(ends[i],))
                 for i in still if ends and i in ends],
                now,
            )  # fmt: skip
            self._requeue(still, now, why)
        return still

    def recover_stale(self, *, now: float, stale_after: float, is_dead: Callable[[str], bool]) -> list[int]:
        with self._transaction():
            stale = [
                r["id"]
                for r in self.tables["runs"]
                if r["status"] == RunStatus.RUNNING
                and (is_dead(r["claimed_by"] or "") or (r["heartbeat_at"] or 0) < now - stale_after)
            ]
            self._requeue(stale, now)
        return stale

    def _requeue(self, run_ids: list[int], now: float, why: str = EXECUTOR_STOPPED) -> None:
        steps = self._steps(run_ids)
        for step in steps:
            if step["status"] == StepStatus.RUNNING:
                step.update(status=StepStatus.INTERRUPTED, error=f"{why} while this step was running")
        step_ids = {s["id"] for s in steps}
        for attempt in self.tables["attempts"]:
            if attempt["finished_at"] is None and attempt["step_id"] in step_ids:
                attempt.update(
                    finished_at=now,
                    outcome=AttemptOutcome.INTERRUPTED,
                    error=f"{why} during this attempt",
                )
        for run_id in run_ids:
            self._update("runs", run_id, status=RunStatus.QUEUED, claimed_by=None, updated_at=now)
            self._sync_decision_status(run_id, RunStatus.QUEUED)

    # ------------------------------------------------------------------ action memory and breaker

    def memory(self) -> _Memory:
        return _Memory(self)

    @contextmanager
    def breaker_ledger(self) -> Iterator[_BreakerRows]:
        """The breaker's rows in one write transaction (its check and count are atomic)."""
        with self._transaction():
            yield _BreakerRows(self)

    @contextmanager
    def breaker_view(self) -> Iterator[_BreakerRows]:
        with self._lock:
            yield _BreakerRows(self)


def _forward(heartbeat: float | None, now: float) -> float:
    """A heartbeat never goes backwards: recovery watches it change, a wall clock stepped back is no silence."""
    return heartbeat + 0.001 if heartbeat is not None and heartbeat >= now else now


def _step_record(s: Row, *, full: bool = False) -> StepRecord:
    """A step as steps_of hands it out (`full`), or as pending_outcomes does (always/error/finished left default)."""
    extra = (bool(s["always"]), s["error"], s["finished_at"] is not None) if full else ()
    return StepRecord(
        s["id"], s["run_id"], s["idx"], s["name"], s["action"], s["where"], json.loads(s["params"]), s["timeout"],
        s["retries"], StepStatus(s["status"]), s["attempts"], *extra,
        continue_on_error=bool(s["continue_on_error"]) if full else False,
    )  # fmt: skip


class _Reader:
    """The guards' reads (remediate.store.interface.GuardReads), as the SQL of store.GuardReader defines them."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store
        self._tables = store.tables

    def pause_state(self) -> PauseState:
        return self._store.pause_state()

    def breaker_state(self) -> dict[str, Any] | None:
        return self._store.breaker_state()

    def existing_runs(self, keys: Iterable[str]) -> dict[str, tuple[int, str]]:
        wanted = set(keys)
        return {r["dedupe_key"]: (r["id"], r["status"]) for r in self._tables["runs"] if r["dedupe_key"] in wanted}

    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]:
        wanted = set(run_ids)
        return {
            r["id"]: r["error"] or ""
            for r in self._tables["runs"]
            if r["id"] in wanted and r["status"] == RunStatus.FAILED and r["rerunnable"] and r["superseded_by"] is None
        }

    def target_history(
        self, playbook: str, guard_key: str, since: float, rung: int | None = None
    ) -> tuple[float | None, int]:
        """Counted firing runs: not rejected, not rerunnable (they changed nothing); of one rung if given."""
        counted = [
            r["created_at"]
            for r in self._tables["runs"]
            if r["playbook"] == playbook
            and r["guard_key"] == guard_key
            and r["phase"] == "firing"
            and r["status"] != RunStatus.REJECTED
            and not r["rerunnable"]
            and (rung is None or r["rung"] == rung)
        ]
        window = [created for created in counted if created >= since]
        return max(window or counted, default=None), len(window)

    def ladder(self, playbook: str, guard_key: str) -> LadderState | None:
        row = self._store.ladder_rows.get((playbook, guard_key))
        return None if row is None else LadderState.from_row(row)

    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]:
        wanted = set(fingerprints)
        return {
            (a["fingerprint"], a["starts_at"])
            for a in self._tables["alerts"]
            if a["fingerprint"] in wanted and a["status"] == status
        }

    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]:
        found = []
        for r in self._tables["runs"]:
            alert = self._tables["alerts"][r["alert_id"] - 1]
            if (
                (r["playbook"], r["guard_key"], r["phase"]) == (playbook, guard_key, "firing")
                and r["mode"] != "dry-run"
                and r["status"] not in _NOT_ACTING
                and alert["fingerprint"] == fingerprint
            ):
                found.append((r["id"], alert["starts_at"]))
        return found


class _Writer(_Reader):
    """One notification's writes (remediate.store.interface.IngestWrites), inside InMemoryStore.writer()."""

    def lock_guards(self, names: Iterable[str]) -> None:
        """Nothing to lock: InMemoryStore.writer() holds the store's one lock already."""

    def insert_notification(
        self, *, received_at: float, receiver: str, status: str, group_key: str, alert_count: int, raw: str
    ) -> int:
        row = {"received_at": received_at, "receiver": receiver, "status": status, "group_key": group_key}
        return self._store._insert("notifications", {**row, "alert_count": alert_count, "raw": raw})

    def insert_alerts(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        return [self._store._insert("alerts", row) for row in rows]

    def insert_runs(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        keys = {r["dedupe_key"] for r in self._tables["runs"]}
        for row in rows:  # the unique index on runs.dedupe_key
            if row["dedupe_key"] in keys:
                raise StoreConflict("another writer stored a run for the same alert occurrence first")
            keys.add(row["dedupe_key"])
        return [self._store._insert("runs", row) for row in rows]

    def insert_steps(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        return [self._store._insert("steps", row) for row in rows]

    def insert_decisions(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        # Stamped as SQLite stamps them (decision_time.stamp): never earlier than the newest one stored.
        newest = max((r["created_at"] for r in self._tables["decisions"]), default=None)
        return [self._store._insert("decisions", row) for row in monotonic(rows, newest)]

    def release_dedupe_key(self, run_id: int) -> None:
        self._store._update("runs", run_id, dedupe_key=f"superseded:{run_id}")

    def mark_superseded(self, run_id: int, by_run: int, now: float) -> None:
        self._store._update("runs", run_id, superseded_by=by_run, updated_at=now)

    def save_ladder(self, state: LadderState) -> None:
        self._store.ladder_rows[(state.playbook, state.guard_key)] = state.row()

    def cancel_awaiting(self, run_id: int, reason: str, now: float) -> bool:
        run = self._store._row("runs", run_id)
        if run is None or run["status"] != RunStatus.AWAITING_APPROVAL:
            return False
        run.update(status=RunStatus.CANCELLED, error=reason, finished_at=now, updated_at=now)
        self._store._sync_decision_status(run_id, RunStatus.CANCELLED)
        return True


class _Memory:
    """The action memory (remediate.actions.base.ActionMemory) in InMemoryStore.action_memory."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store

    def recall(self, key: str) -> dict[str, Any] | None:
        with self._store._lock:
            row = self._store.action_memory.get(key)
            return None if row is None else json.loads(row["value"])

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        with self._store._transaction():
            row = {"key": key, "value": dumps(dict(value)), "run_id": run_id or None, "updated_at": time.time()}
            self._store.action_memory[key] = row

    def forget(self, key: str) -> None:
        with self._store._transaction():
            self._store.action_memory.pop(key, None)


class _BreakerRows:
    """The breaker's ledger (remediate.breaker.BreakerLedger): meta["breaker"] and tables["breaker_claims"]."""

    def __init__(self, store: InMemoryStore) -> None:
        self._store = store

    def state(self) -> dict[str, Any] | None:
        text = self._store.meta.get("breaker")
        return None if text is None else json.loads(text)

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._store.meta["breaker"] = dumps(dict(state))

    def open_claims(self) -> list[ClaimView]:
        return self._claims(lambda c: c["released_at"] is None)

    def claims_since(self, since: float) -> list[ClaimView]:
        return self._claims(lambda c: c["claimed_at"] >= since)

    def add_claim(self, claim: Any) -> None:
        row = {"node": claim.node, "kind": claim.kind, "run_id": claim.run_id, "claimed_at": claim.claimed_at}
        self._store._insert("breaker_claims", row)

    def release(self, node: str, *, now: float, reason: str) -> int:
        held = [c for c in self._store.tables["breaker_claims"] if c["node"] == node and c["released_at"] is None]
        for claim in held:
            claim.update(released_at=now, released_reason=reason[:1000])
        return len(held)

    def _claims(self, keep: Callable[[Row], bool]) -> list[ClaimView]:
        fields = ClaimView._fields
        return [ClaimView(*(c[f] for f in fields)) for c in self._store.tables["breaker_claims"] if keep(c)]
