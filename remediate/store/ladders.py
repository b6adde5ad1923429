"""Escalation ladders' rows (`ladders`): where each (playbook, guard key) ladder stands.

The engine reads one inside its ingest transaction and rewrites it there with the run of the rung it
records (remediate.judging.ladder decides the rung); the API lists them and lets an operator reset them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import sqlalchemy as sa

from remediate.runs import LadderState
from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.dialect import Dialect


def guard_lock_name(playbook: str, guard_key: str) -> str:
    """The name `Dialect.lock_guards` locks for one (playbook, guard key): what one ingest judges, and
    what a ladder reset rewrites."""
    return f"{playbook}\x1f{guard_key}"


_KEY = (t.ladders.c.playbook == sa.bindparam("p_playbook"), t.ladders.c.guard_key == sa.bindparam("p_guard_key"))
_READ = sa.select(t.ladders).where(*_KEY)


def read_ladder(conn: sa.Connection, playbook: str, guard_key: str) -> LadderState | None:
    row = conn.execute(_READ, {"p_playbook": playbook, "p_guard_key": guard_key}).mappings().one_or_none()
    return None if row is None else LadderState.from_row(row)


def save_ladder(conn: sa.Connection, state: LadderState) -> None:
    """Write a ladder's state. Callers hold the guard lock of its (playbook, guard key) (ingest), so
    no other writer inserts the same row between the update and the insert."""
    row = state.row()
    done = conn.execute(
        sa.update(t.ladders)
        .where(t.ladders.c.playbook == state.playbook, t.ladders.c.guard_key == state.guard_key)
        .values({k: v for k, v in row.items() if k not in ("playbook", "guard_key")})
    ).rowcount
    if not done:
        conn.execute(sa.insert(t.ladders).values(row))


def list_ladders(conn: sa.Connection, *, target: str | None = None, playbook: str | None = None) -> list[LadderState]:
    """Every ladder (or those of a target / playbook), by playbook and guard key."""
    query = sa.select(t.ladders).order_by(t.ladders.c.playbook, t.ladders.c.guard_key)
    if target is not None:
        query = query.where(t.ladders.c.target == target)
    if playbook is not None:
        query = query.where(t.ladders.c.playbook == playbook)
    return [LadderState.from_row(row) for row in conn.execute(query).mappings()]


@dataclass
class Ladders:
    """The escalation ladders of a store (`Store.ladders`): listed, and reset by a person."""

    tx: Transactions
    dialect: Dialect

    def read(self, *, target: str | None = None, playbook: str | None = None) -> list[LadderState]:
        """Where the ladders stand (all, or a target's / a playbook's)."""
        with self.tx.read() as conn:
            return list_ladders(conn, target=target, playbook=playbook)

    def run_statuses(self, states: list[LadderState]) -> dict[int, str]:
        """The status now of the run of each ladder's last rung (run id -> status; a pruned run is absent):
        a rung is in force only once its run succeeded (remediate.judging.ladder.standing)."""
        ids = sorted({s.run_id for s in states if s.rung >= 1})
        if not ids:
            return {}
        with self.tx.read() as conn:
            found = conn.execute(sa.select(t.runs.c.id, t.runs.c.status).where(t.runs.c.id.in_(ids))).all()
        return {int(row.id): str(row.status) for row in found}

    def reset(self, target: str, *, playbook: str | None = None, by: str, reason: str, now: float) -> list[LadderState]:
        """Put a target's ladders (or one playbook's) back before rung 1. The rows stay, with rung 0 and a
        reason naming who reset them, so `remediate ladder status` shows it.

        Under the guard locks of those ladders: an ingest judging one of them at the same moment either
        commits first (and is reset) or waits and climbs from the reset, never writes over it."""
        why = f"reset by {by}" + (f": {reason}" if reason else "")
        query = sa.update(t.ladders).where(t.ladders.c.target == target)
        if playbook is not None:
            query = query.where(t.ladders.c.playbook == playbook)
        with self.tx.write() as conn:
            found = list_ladders(conn, target=target, playbook=playbook)
            self.dialect.lock_guards(conn, [guard_lock_name(s.playbook, s.guard_key) for s in found])
            conn.execute(query.values(rung=0, reason=why, climb=json.dumps([]), updated_at=now))
            return list_ladders(conn, target=target, playbook=playbook)
