"""The agent's state file: what its node actions remember between runs (ActionMemory), in a SQLite file
that holds only the `action_memory` table (and `seen_requests`, the signatures of the requests it accepted).

Who uses it: `remediate agent` (`agent.service.open_memory`), e.g. for the power limit a restore puts back. The
server's tables, migrations and meta rows are no business of a node agent, so this creates the one table
it needs and nothing else. It speaks to SQLite with the sqlite3 module alone: SQLAlchemy would be most of
the agent's memory for a table of a few rows (the agent idles in <= 60 MB). The file is kept as
the server store keeps its SQLite files (remediate.sqlitefile): created 0600, its -wal/-shm files tightened,
writers queued by SQLite itself (`BEGIN IMMEDIATE` and its busy timeout), StoreBusy / StoreFileReplaced as there.

A state file written by an older agent (which opened the full server store on it) keeps its rows: the
table is created only when absent (the same columns as `schema.action_memory`, which the server's
`StoreMemory` reads and writes), and the other tables in such a file are left as they are.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediate.errors import ConfigError, StoreBusy
from remediate.sqlitefile import DEFAULT_BUSY_TIMEOUT, FileIdentity, protect_files

CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS action_memory ("
    "key VARCHAR(255) NOT NULL, value TEXT NOT NULL, run_id INTEGER, updated_at FLOAT NOT NULL, PRIMARY KEY (key))"
)
"""`schema.action_memory` as SQLite DDL (tests/unit/test_agent_state.py checks that they stay the same)."""
CREATE_SEEN = (
    "CREATE TABLE IF NOT EXISTS seen_requests (signature VARCHAR(64) NOT NULL, seen_at FLOAT NOT NULL, "
    "PRIMARY KEY (signature))"
)
"""The signatures of the requests the agent accepted (remediate.agentwire.auth: replays are refused across restarts)."""


class MemoryStore:
    """ActionMemory's SQLite file for one agent; `memory()` is the ActionMemory its actions get.

    One connection, used by one thread at a time: the agent remembers a few rows per step, so its threads
    never wait long on each other; writers of other processes queue on `BEGIN IMMEDIATE` and SQLite's busy
    timeout.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, busy_timeout: float) -> None:
        self.path = path
        self._conn = connection
        self._lock = threading.Lock()
        self.busy_timeout = busy_timeout
        self._identity = FileIdentity(str(path))
        self._identity.remember()

    @classmethod
    def open(cls, path: str | Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> MemoryStore:
        """Open (creating if needed) the state file at `path` and its `action_memory` table."""
        path = Path(path)
        protect_files(str(path))
        try:
            # isolation_level=None: transactions begin where this module says (BEGIN IMMEDIATE for writes).
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open the agent state file {path}: {exc}") from exc
        store = cls(path, conn, busy_timeout)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            with store.write() as cursor:
                cursor.execute(CREATE_TABLE)
                cursor.execute(CREATE_SEEN)
        except sqlite3.Error as exc:
            store.close()
            raise ConfigError(f"cannot open the agent state file {path}: {exc}") from exc
        except BaseException:
            store.close()
            raise
        return store

    @contextmanager
    def write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction: StoreBusy if the file stays locked for the busy timeout, StoreFileReplaced
        if the file was deleted or replaced while open."""
        self._identity.check()
        if not self._lock.acquire(timeout=self.busy_timeout):
            raise StoreBusy(f"the agent state file's connection stayed in use for {self.busy_timeout:g}s")
        try:
            cursor = self._conn.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    yield cursor
                except BaseException:
                    self._conn.rollback()
                    raise
                self._conn.commit()
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc):
                    raise StoreBusy(f"the agent state file stayed locked for {self.busy_timeout:g}s") from exc
                raise
            finally:
                cursor.close()
        finally:
            self._lock.release()

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def memory(self) -> StateFileMemory:
        return StateFileMemory(self)

    def seen(self) -> StateFileSeen:
        return StateFileSeen(self)

    def ping(self) -> None:
        """Raises (sqlite3.Error) if the state file cannot be read (the agent's readiness)."""
        self.read("SELECT key FROM action_memory LIMIT 1")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass(frozen=True)
class StateFileMemory:
    """ActionMemory in the state file's `action_memory` table: survives the agent's restarts."""

    _store: MemoryStore

    def recall(self, key: str) -> dict[str, Any] | None:
        rows = self._store.read("SELECT value FROM action_memory WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        # The text the server's StoreMemory writes (store.rows.dumps), so either can read the other's rows.
        text = json.dumps(dict(value), separators=(",", ":"), sort_keys=True, default=str)
        row = (text, run_id or None, time.time(), key)
        with self._store.write() as cursor:
            cursor.execute("UPDATE action_memory SET value = ?, run_id = ?, updated_at = ? WHERE key = ?", row)
            if not cursor.rowcount:
                cursor.execute("INSERT INTO action_memory (value, run_id, updated_at, key) VALUES (?, ?, ?, ?)", row)

    def forget(self, key: str) -> None:
        with self._store.write() as cursor:
            cursor.execute("DELETE FROM action_memory WHERE key = ?", (key,))


@dataclass(frozen=True)
class StateFileSeen:
    """The signatures the agent accepted, in the state file (agentwire.auth.SeenSignatures): a signed request
    taken off the wire stays refused after the agent restarts, for as long as its timestamp is valid."""

    _store: MemoryStore

    def first_use(self, signature: str, now: float, keep: float) -> bool:
        with self._store.write() as cursor:
            cursor.execute("DELETE FROM seen_requests WHERE seen_at < ?", (now - keep,))
            cursor.execute("INSERT OR IGNORE INTO seen_requests (signature, seen_at) VALUES (?, ?)", (signature, now))
            return cursor.rowcount == 1
