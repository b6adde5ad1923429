"""Action memory: what actions remember between runs (ActionMemory), kept in the `action_memory` table.

`StoreMemory` is the ActionMemory of the server's store (`Store.memory`). The agent's state file, a SQLite
file with only this table, is remediate.agent.state's (the sqlite3 module alone: the agent loads no
SQLAlchemy); both read and write the same rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from remediate.store import schema as t
from remediate.store.database import Transactions
from remediate.store.rows import dumps


@dataclass
class StoreMemory:
    """ActionMemory kept in the `action_memory` table: survives restarts, shared by every worker."""

    tx: Transactions

    def recall(self, key: str) -> dict[str, Any] | None:
        with self.tx.read() as conn:
            text = conn.execute(
                sa.select(t.action_memory.c.value).where(t.action_memory.c.key == key)
            ).scalar_one_or_none()
        return None if text is None else json.loads(text)

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        row = {"value": dumps(dict(value)), "run_id": run_id or None, "updated_at": time.time()}
        with self.tx.write() as conn:
            updated = conn.execute(
                sa.update(t.action_memory).where(t.action_memory.c.key == key).values(**row)
            ).rowcount
            if not updated:
                conn.execute(sa.insert(t.action_memory).values(key=key, **row))

    def forget(self, key: str) -> None:
        with self.tx.write() as conn:
            conn.execute(sa.delete(t.action_memory).where(t.action_memory.c.key == key))
