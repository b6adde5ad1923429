"""Ingest: what the engine reads and writes while it takes in one notification, in ONE write transaction.

`GuardReader` holds the facts the guards judge from (existing runs, the target's history, pause,
breaker); `IngestWriter` adds the typed inserts (`insert_alerts`, `insert_runs`, ...) and the few updates
of superseded and cancelled runs. Their statements are built once, at import: building a Core statement
and its cache key costs more than running it on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from remediate.config.promotion import WaveEvidence
from remediate.errors import StoreConflict
from remediate.runs import LadderState, RunStatus
from remediate.store import schema as t
from remediate.store.breaker_rows import BreakerRows
from remediate.store.database import Transactions
from remediate.store.decision_time import stamp
from remediate.store.dialect import Dialect
from remediate.store.ladders import read_ladder, save_ladder
from remediate.store.pause import PauseState, read_pause
from remediate.store.repeat_offenders import acted_runs
from remediate.store.wave_evidence import wave_evidence
from remediate.store.writes import sync_decision_status

_EXISTING_RUNS = sa.select(t.runs.c.dedupe_key, t.runs.c.id, t.runs.c.status).where(
    t.runs.c.dedupe_key.in_(sa.bindparam("p_keys", expanding=True))
)
_RERUNNABLE_RUNS = sa.select(t.runs.c.id, t.runs.c.error).where(
    t.runs.c.id.in_(sa.bindparam("p_ids", expanding=True)),
    t.runs.c.status == RunStatus.FAILED,
    t.runs.c.rerunnable == sa.true(),
    t.runs.c.superseded_by.is_(None),
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
_RUNG_WINDOW = sa.select(sa.func.max(t.runs.c.created_at), sa.func.count()).where(
    *_COUNTED_RUNS, t.runs.c.rung == sa.bindparam("p_rung"), t.runs.c.created_at >= sa.bindparam("p_since")
)
_RUNG_LAST = (
    sa.select(t.runs.c.created_at)
    .where(*_COUNTED_RUNS, t.runs.c.rung == sa.bindparam("p_rung"))
    .order_by(t.runs.c.created_at.desc())
    .limit(1)
)
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


@dataclass
class Ingest:
    """The engine's transactions (`Store.ingest`): the guards' read, and the notification's one write."""

    tx: Transactions
    dialect: Dialect

    @contextmanager
    def reader(self) -> Iterator[GuardReader]:
        with self.tx.read() as conn:
            yield GuardReader(conn)

    @contextmanager
    def writer(self) -> Iterator[IngestWriter]:
        """The notification's one write transaction, as an IngestWriter.

        A run whose dedupe key another writer committed first (a replica storing the same delivery at the
        same moment, where no guard lock kept them apart) rolls the transaction back as StoreConflict:
        the engine judges the notification again, and then sees that run.
        """
        try:
            with self.tx.write() as conn:
                yield IngestWriter(conn, self.dialect)
        except sa.exc.IntegrityError as failed:  # from a statement, or from the commit itself (a deferred check)
            conflict = _conflict(failed)
            if conflict is None:
                raise
            raise conflict from failed


def _conflict(exc: sa.exc.IntegrityError) -> StoreConflict | None:
    """The StoreConflict a unique violation stands for, if it is on runs.dedupe_key."""
    if "dedupe_key" not in str(exc.orig):
        return None
    return StoreConflict("another writer stored a run for the same alert occurrence first")


class GuardReader:
    """The reads the guards need, on one connection: inside the ingest transaction, or read-only for dry-run."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def pause_state(self) -> PauseState:
        return read_pause(self.conn)

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
            found.update({key: (run_id, status) for key, run_id, status in rows})
        return found

    def rerunnable_runs(self, run_ids: Iterable[int]) -> dict[int, str]:
        """run id -> its error, for those of `run_ids` that failed for a transient reason before changing
        anything and were not superseded yet: the next delivery of their occurrence runs again."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        return {run_id: error or "" for run_id, error in self.conn.execute(_RERUNNABLE_RUNS, {"p_ids": ids})}

    def target_history(
        self, playbook: str, guard_key: str, since: float, rung: int | None = None
    ) -> tuple[float | None, int]:
        """(time of the last counted firing run ever, number of counted firing runs since `since`),
        for one playbook and guard key (the target, or the target plus the playbook's `guard_by` labels),
        and only the runs of one rung of its ladder when `rung` is given.

        The last run is looked up beyond `since` too: a cooldown may be longer than the attempt window.
        """
        params: dict[str, Any] = {"p_playbook": playbook, "p_guard_key": guard_key}
        window, last_query = _TARGET_WINDOW, _TARGET_LAST
        if rung is not None:
            params["p_rung"] = rung
            window, last_query = _RUNG_WINDOW, _RUNG_LAST
        last, count = self.conn.execute(window, {**params, "p_since": since}).one()
        if last is None:
            found = self.conn.execute(last_query, params).first()
            last = None if found is None else found[0]
        return last, int(count)

    def ladder(self, playbook: str, guard_key: str) -> LadderState | None:
        """Where the escalation ladder of (playbook, guard key) stands; None if it never climbed."""
        return read_ladder(self.conn, playbook, guard_key)

    def acted_runs(self, playbook: str, target: str, since: float) -> int:
        """The firing runs of `playbook` on `target` since `since` that acted (a repeat offender's count)."""
        return acted_runs(self.conn, playbook, target, since)

    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]:
        """(fingerprint, startsAt) of every occurrence of these alerts ever received with `status`
        (firing/resolved): every received alert is stored, so this is the record of what was reported."""
        wanted = sorted(set(fingerprints))
        found: set[tuple[str, str]] = set()
        for start in range(0, len(wanted), 500):
            params = {"p_fingerprints": wanted[start : start + 500], "p_status": status}
            found.update(
                (fingerprint, starts_at) for fingerprint, starts_at in self.conn.execute(_REPORTED_OCCURRENCES, params)
            )
        return found

    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]:
        """(run id, alert startsAt) of the firing runs of one alert (fingerprint) for one playbook and guard
        key that acted or will act (queued, running, finished; not dry-run, refused or only waiting)."""
        params = {"p_playbook": playbook, "p_guard_key": guard_key, "p_fingerprint": fingerprint}
        return [(run_id, starts_at) for run_id, starts_at in self.conn.execute(_ACTIVE_FIRING_RUNS, params)]

    def wave_evidence(
        self, playbook: str, version: str, wave: str, *, since: float, after: int, undoes: bool
    ) -> WaveEvidence:
        """A rollout wave's runs of one playbook version since `since` (remediate.store.wave_evidence)."""
        return wave_evidence(self.conn, playbook, version, wave, since=since, after=after, undoes=undoes)


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

    def target_history(
        self, playbook: str, guard_key: str, since: float, rung: int | None = None
    ) -> tuple[float | None, int]:
        return None, 0

    def ladder(self, playbook: str, guard_key: str) -> LadderState | None:
        return None

    def acted_runs(self, playbook: str, target: str, since: float) -> int:
        return 0

    def reported_occurrences(self, fingerprints: Iterable[str], status: str) -> set[tuple[str, str]]:
        return set()

    def active_firing_runs(self, playbook: str, guard_key: str, fingerprint: str) -> list[tuple[int, str]]:
        return []

    def wave_evidence(
        self, playbook: str, version: str, wave: str, *, since: float, after: int, undoes: bool
    ) -> WaveEvidence:
        return WaveEvidence(0)


class IngestWriter(GuardReader):
    """The statements the engine needs while it ingests one notification, all in one transaction."""

    def __init__(self, conn: sa.Connection, dialect: Dialect) -> None:
        super().__init__(conn)
        self.dialect = dialect

    def lock_guards(self, names: Iterable[str]) -> None:
        """Hold off, until this transaction ends, every other ingest judging one of these guard keys
        (`playbook` + guard key): first in the transaction, before any guard read (Dialect.lock_guards)."""
        self.dialect.lock_guards(self.conn, names)

    def insert_notification(
        self,
        *,
        received_at: float,
        receiver: str,
        status: str,
        group_key: str,
        alert_count: int,
        raw: str,
        notification_reason: str = "",
        truncated_alerts: int = 0,
    ) -> int:
        row = {
            "received_at": received_at,
            "receiver": receiver,
            "status": status,
            "group_key": group_key,
            "alert_count": alert_count,
            "raw": raw,
            "notification_reason": notification_reason or None,
            "truncated_alerts": truncated_alerts,
        }
        return self.dialect.insert_rows(self.conn, t.notifications, [row])[0]

    def insert_alerts(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """The notification's alerts (`judging.engine._alert_row`); their ids, in order."""
        return self.dialect.insert_rows(self.conn, t.alerts, rows)

    def insert_runs(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Accepted runs (`judging.engine.run_row`); their ids, in order."""
        return self.dialect.insert_rows(self.conn, t.runs, rows)

    def insert_steps(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """The steps of those runs (`judging.engine.step_rows`); their ids, in order."""
        return self.dialect.insert_rows(self.conn, t.steps, rows)

    def insert_decisions(self, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """One decision per (alert, playbook) judged (`judging.engine.decision_row`); their ids, in order.

        Where the dialect has one writer at a time, no decision is stamped earlier than the newest one
        stored (`decision_time.stamp`): the history's time filters are then id ranges."""
        if self.dialect.decision_time_follows_id:
            rows = stamp(self.conn, rows)
        return self.dialect.insert_rows(self.conn, t.decisions, rows)

    def release_dedupe_key(self, run_id: int) -> None:
        """Free the dedupe key of a rerunnable run for the run that supersedes it; the old run stays in history."""
        self.conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(dedupe_key=f"superseded:{run_id}"))

    def mark_superseded(self, run_id: int, by_run: int, now: float) -> None:
        self.conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(superseded_by=by_run, updated_at=now))

    def save_ladder(self, state: LadderState) -> None:
        """Write where a ladder stands (the rung accepted in this transaction, or its resolve)."""
        save_ladder(self.conn, state)

    def cancel_awaiting(self, run_id: int, reason: str, now: float) -> bool:
        """Cancel a run still awaiting approval; False when it has moved on."""
        done = self.conn.execute(
            sa.update(t.runs)
            .where(t.runs.c.id == run_id, t.runs.c.status == RunStatus.AWAITING_APPROVAL)
            .values(status=RunStatus.CANCELLED, error=reason, finished_at=now, updated_at=now)
        ).rowcount
        if done:
            sync_decision_status(self.conn, run_id, RunStatus.CANCELLED)
        return bool(done)
