"""The circuit breaker's ledger (remediate.breaker.BreakerLedger) as rows: its state in `meta`, its
claims in `breaker_claims`. The breaker's logic stays in remediate.breaker; this only reads and writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.dialect import Dialect
from remediate.store.rows import dumps

_STATE = sa.select(t.meta.c.value).where(t.meta.c.key == "breaker")


class BreakerRows:
    """The circuit breaker's ledger (remediate.breaker.BreakerLedger) on one connection of the store."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def state(self) -> dict[str, Any] | None:
        row = self.conn.execute(_STATE).first()
        return None if row is None else json.loads(row[0])

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


@dataclass
class BreakerLedger:
    """The breaker's rows of a store (`Store.breaker`), in the transactions remediate.breaker needs."""

    tx: Transactions
    dialect: Dialect

    @contextmanager
    def ledger(self) -> Iterator[BreakerRows]:
        """The rows in ONE write transaction: the breaker's check and its count update are atomic across workers."""
        with self.tx.write() as conn:
            self.dialect.lock_breaker(conn)
            yield BreakerRows(conn)

    @contextmanager
    def view(self) -> Iterator[BreakerRows]:
        """The rows, read only."""
        with self.tx.read() as conn:
            yield BreakerRows(conn)

    def state(self) -> dict[str, Any] | None:
        with self.view() as rows:
            return rows.state()

    def claims_of(self, node: str, *, limit: int = 100) -> list[Any]:
        """A node's claims, newest first (up to `limit`), with when and why each was released: the node
        page's timeline. No index leads with the node: the table holds a row per node change, and
        retention prunes the released ones."""
        c = t.breaker_claims.c
        with self.tx.read() as conn:
            return list(
                conn.execute(
                    sa.select(c.node, c.kind, c.run_id, c.claimed_at, c.released_at, c.released_reason)
                    .where(c.node == node)
                    .order_by(c.id.desc())
                    .limit(limit)
                ).all()
            )
