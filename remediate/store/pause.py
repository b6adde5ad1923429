"""The pause flag: while paused, new runs are not queued (the guards read it; operators set it)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import sqlalchemy as sa

from remediate.errors import AlreadyPaused, NotPaused
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.rows import dumps


@dataclass(frozen=True)
class PauseState:
    paused: bool
    by: str = ""
    reason: str = ""
    since: float | None = None


_PAUSE_STATE = sa.select(t.meta.c.value).where(t.meta.c.key == "pause")


def read_pause(conn: sa.Connection) -> PauseState:
    row = conn.execute(_PAUSE_STATE).first()
    if row is None or not row[0]:
        return PauseState(False)
    data = json.loads(row[0])
    return PauseState(bool(data.get("paused")), data.get("by", ""), data.get("reason", ""), data.get("since"))


def write_pause(conn: sa.Connection, state: PauseState) -> None:
    value = dumps({"paused": state.paused, "by": state.by, "reason": state.reason, "since": state.since})
    updated = conn.execute(sa.update(t.meta).where(t.meta.c.key == "pause").values(value=value)).rowcount
    if not updated:
        conn.execute(sa.insert(t.meta).values(key="pause", value=value))


@dataclass
class Pause:
    """The pause flag of a store (`Store.pause`)."""

    tx: Transactions

    def state(self) -> PauseState:
        with self.tx.read() as conn:
            return read_pause(conn)

    def set(self, paused: bool, *, by: str, reason: str, now: float, replace: bool = True) -> PauseState:
        """Set (or clear) the pause. With `replace` False a pause over a pause is AlreadyPaused: who paused
        and why are read in the same transaction, so two operators cannot overwrite each other unawares;
        and a resume while not paused is NotPaused (nothing is written)."""
        state = PauseState(paused, by, reason, now)
        with self.tx.write() as conn:
            if not replace:
                existing = read_pause(conn)
                if paused and existing.paused:
                    raise AlreadyPaused(existing.by, existing.reason, existing.since)
                if not paused and not existing.paused:
                    raise NotPaused()
            write_pause(conn, state)
        return state
