"""The announcements' rows: which run awaiting approval is to be announced in chat, taken once, and the outcome.

Who calls it: the announcer (remediate.executor.announce, in the executor process) through `Store.announcements`.

A run with a chat step (`actions`) is found by a read, then taken by ONE atomic UPDATE ... RETURNING
that matches only while it still awaits approval and was never taken (`announced_at IS NULL`): two
announcers (replicas) cannot both take it, and a run approved or cancelled before the announcer came
to it is never taken. Taking it writes `announce_error` = `SENDING`, which the announcer overwrites
with the outcome once it knows it (NULL: sent); an announcer that died in between leaves that note, true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from remediate.runs import ClaimedRun, RunStatus
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.queue import RunQueue
from remediate.store.rows import ALERT_CONTEXT_COLUMNS, alert_context

SENDING = "not confirmed: the announcer stopped while sending (it is not sent again)"
"""`announce_error` from the moment a run is taken until its outcome is recorded."""


_CHAT_STEP = sa.exists().where(
    t.steps.c.run_id == t.runs.c.id, t.steps.c.action.in_(sa.bindparam("p_actions", expanding=True))
)
# ix_runs_status (status, id): only the runs awaiting approval are read, oldest first; a read, no lock.
_CANDIDATE = (
    sa.select(t.runs.c.id)
    .where(t.runs.c.status == RunStatus.AWAITING_APPROVAL, t.runs.c.announced_at.is_(None), _CHAT_STEP)
    .order_by(t.runs.c.id)
    .limit(1)
)
# The take itself: matches only while the run still awaits approval and was never taken (re-checked under
# the write lock, or the row lock on a server database, so an approval or another announcer that came
# first makes it match nothing).
_TAKE = (
    sa.update(t.runs)
    .where(
        t.runs.c.id == sa.bindparam("p_run_id"),
        t.runs.c.status == RunStatus.AWAITING_APPROVAL,
        t.runs.c.announced_at.is_(None),
    )
    .values(announced_at=sa.bindparam("p_now", type_=sa.Float), announce_error=SENDING)
    .returning(t.runs.c.id)
)
_TAKEN_RUN = (
    sa.select(t.runs, *ALERT_CONTEXT_COLUMNS)
    .join(t.alerts, t.alerts.c.id == t.runs.c.alert_id)
    .where(t.runs.c.id == sa.bindparam("p_run_id"))
)
_RECORD = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("p_run_id"), t.runs.c.announced_at.is_not(None))
    .values(announce_error=sa.bindparam("p_error", type_=sa.Text))
)


@dataclass
class Announcements:
    """Take the next run to announce; record how its announcement went (`Store.announcements`)."""

    tx: Transactions
    queue: RunQueue

    def take(self, now: float, actions: Sequence[str]) -> ClaimedRun | None:
        """The oldest run awaiting approval, not taken yet, with a step of one of `actions`, marked taken at
        `now` (with its steps: what the message says, and where it goes); None when there is none.

        Looking is a read: the announcer looks whenever runs were queued, and an empty look must not take
        the write lock the ingest waits for. Only a run found is taken, in a short write."""
        if not actions:
            return None
        while True:
            with self.tx.read() as conn:
                candidate = conn.execute(_CANDIDATE, {"p_actions": list(actions)}).scalar_one_or_none()
            if candidate is None:
                return None
            with self.tx.write() as conn:
                taken = conn.execute(_TAKE, {"p_run_id": candidate, "p_now": now}).scalar_one_or_none()
                if taken is None:
                    continue  # approved, cancelled or taken by another announcer since the read: the next one
                row = conn.execute(_TAKEN_RUN, {"p_run_id": taken}).one()
            steps = tuple(self.queue.steps_of(taken))
            return ClaimedRun(
                row.id, row.playbook, row.target, row.phase, row.mode, alert_context(row), rung=row.rung, steps=steps
            )

    def record(self, run_id: int, *, error: str | None) -> None:
        """The outcome of a taken run's announcement: None when it was sent, else what went wrong."""
        with self.tx.write() as conn:
            conn.execute(_RECORD, {"p_run_id": run_id, "p_error": error})
