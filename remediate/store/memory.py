"""Action memory: what actions remember between runs (ActionMemory), kept in the `action_memory` table.

`StoreMemory` is the ActionMemory of a database: the server's store (`Store.memory`) or the agent's state
file. `MemoryStore` is that state file: a SQLite file that holds only the `action_memory` table.

Who uses the state file: `remediate agent` (`agent.open_memory`), for what its node actions remember between
runs (e.g. the power limit a restore puts back). The server's tables, migrations and meta rows are no
business of a node agent, so this creates the one table it needs and nothing else. The file handling
is the server store's own (`database.Database.open` with `upgrade=False`): created 0600, its -wal/-shm and
lock files tightened, writers queued on the same write lock, StoreBusy / StoreFileReplaced as there.

A state file written by an older agent (which opened the full server store on it) keeps its rows: the
table is created only when absent, and the other tables in such a file are left as they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from remediate import schema as t
from remediate.errors import ConfigError
from remediate.store.database import Database, Transactions
from remediate.store.dialect import DEFAULT_BUSY_TIMEOUT
from remediate.store.rows import dumps


class StoreMemory:
    """ActionMemory kept in the `action_memory` table: survives restarts, shared by every worker."""

    def __init__(self, transactions: Transactions) -> None:
        self._tx = transactions

    def recall(self, key: str) -> dict[str, Any] | None:
        with self._tx.read() as conn:
            text = conn.execute(
                sa.select(t.action_memory.c.value).where(t.action_memory.c.key == key)
            ).scalar_one_or_none()
        return None if text is None else json.loads(text)

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        row = {"value": dumps(dict(value)), "run_id": run_id or None, "updated_at": time.time()}
        with self._tx.write() as conn:
            updated = conn.execute(
                sa.update(t.action_memory).where(t.action_memory.c.key == key).values(**row)
            ).rowcount
            if not updated:
                conn.execute(sa.insert(t.action_memory).values(key=key, **row))

    def forget(self, key: str) -> None:
        with self._tx.write() as conn:
            conn.execute(sa.delete(t.action_memory).where(t.action_memory.c.key == key))


class MemoryStore:
    """ActionMemory's SQLite file for one agent; `memory()` is the ActionMemory its actions get."""

    def __init__(self, database: Database) -> None:
        # Only read()/write()/close() of the database are used: no server table is ever touched.
        self._db = database

    @classmethod
    def open(cls, path: str | Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> MemoryStore:
        """Open (creating if needed) the state file at `path` and its `action_memory` table."""
        database = Database.open(f"sqlite:///{Path(path)}", upgrade=False, busy_timeout=busy_timeout)
        try:
            with database.write() as conn:
                t.action_memory.create(conn, checkfirst=True)
        except sa.exc.OperationalError as exc:
            database.close()
            raise ConfigError(f"cannot open the agent state file {path}: {exc.orig}") from exc
        except BaseException:
            database.close()
            raise
        return cls(database)

    def memory(self) -> StoreMemory:
        return StoreMemory(self._db)

    def ping(self) -> None:
        """Raises if the state file cannot be read (the agent's readiness)."""
        with self._db.read() as conn:
            conn.execute(sa.select(t.action_memory.c.key).limit(1)).all()

    def close(self) -> None:
        self._db.close()
