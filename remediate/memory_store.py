"""The agent's state file: a SQLite file that holds only the `action_memory` table.

Who uses it: `remediate agent` (`agent.open_memory`), for what its node actions remember between
runs (e.g. the power limit a restore puts back). The server's tables, migrations and meta rows are no
business of a node agent, so this creates the one table it needs and nothing else. The file handling
is the server store's own (`store.Store.open` with `upgrade=False`): created 0600, its -wal/-shm and
lock files tightened, writers queued on the same write lock, StoreBusy / StoreFileReplaced as there.

A state file written by an older agent (which opened the full server store on it) keeps its rows: the
table is created only when absent, and the other tables in such a file are left as they are.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from remediate import schema as t
from remediate.errors import ConfigError
from remediate.store import DEFAULT_BUSY_TIMEOUT, Store, StoreMemory


class MemoryStore:
    """ActionMemory's SQLite file for one agent; `memory()` is the ActionMemory its actions get."""

    def __init__(self, store: Store) -> None:
        # Only read()/write()/close() of the store are used: no server table is ever touched.
        self._store = store

    @classmethod
    def open(cls, path: str | Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> MemoryStore:
        """Open (creating if needed) the state file at `path` and its `action_memory` table."""
        store = Store.open(f"sqlite:///{Path(path)}", upgrade=False, busy_timeout=busy_timeout)
        try:
            with store.write() as conn:
                t.action_memory.create(conn, checkfirst=True)
        except sa.exc.OperationalError as exc:
            store.close()
            raise ConfigError(f"cannot open the agent state file {path}: {exc.orig}") from exc
        except BaseException:
            store.close()
            raise
        return cls(store)

    def memory(self) -> StoreMemory:
        return StoreMemory(self._store)

    def ping(self) -> None:
        """Raises if the state file cannot be read (the agent's readiness)."""
        with self._store.read() as conn:
            conn.execute(sa.select(t.action_memory.c.key).limit(1)).all()

    def close(self) -> None:
        self._store.close()
