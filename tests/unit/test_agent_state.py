"""The agent's state file (remediate.agent.state.MemoryStore): only the action_memory table; old files keep rows.

SQLite only: the agent keeps its state in a file on its node, whatever database the server uses.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from remediate.agent.service import open_memory
from remediate.agent.state import MemoryStore
from remediate.errors import ConfigError
from remediate.store import Store


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _memory_rows(path: Path) -> list[tuple[str, int | None]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute("SELECT key, run_id FROM action_memory ORDER BY key"))


def test_the_agent_state_file_holds_only_the_action_memory_and_seen_requests_tables(tmp_path: Path) -> None:
    store, memory = open_memory(tmp_path / "agent.db")
    memory.remember("gpu.power_limit/GPU-1", {"previous_mw": 300000}, run_id=4)
    store.ping()
    store.close()

    # ... and the signatures of the requests it accepted (replays stay refused across restarts).
    assert _tables(tmp_path / "agent.db") == {"action_memory", "seen_requests"}


def test_a_state_file_written_by_the_full_store_keeps_what_it_remembered(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    old = Store.open(f"sqlite:///{path}")
    old.memory.remember("gpu.power_limit/GPU-1", {"previous_mw": 300000, "uuid": "GPU-1"}, run_id=12)
    old.memory.remember("gpu.power_limit/GPU-2", {"previous_mw": 250000}, run_id=13)
    old.close()
    tables_before = _tables(path)

    store = MemoryStore.open(path)
    memory = store.memory()
    assert memory.recall("gpu.power_limit/GPU-1") == {"previous_mw": 300000, "uuid": "GPU-1"}
    assert memory.recall("gpu.power_limit/GPU-2") == {"previous_mw": 250000}
    memory.forget("gpu.power_limit/GPU-2")
    memory.remember("gpu.power_limit/GPU-1", {"previous_mw": 280000}, run_id=20)
    store.ping()
    store.close()

    # The server's tables of the old file stay as they were (nothing dropped; only the agent's own
    # seen_requests created).
    assert _tables(path) == tables_before | {"seen_requests"}
    reopened = MemoryStore.open(path)
    assert reopened.memory().recall("gpu.power_limit/GPU-1") == {"previous_mw": 280000}
    assert reopened.memory().recall("gpu.power_limit/GPU-2") is None
    reopened.close()
    assert _memory_rows(path) == [("gpu.power_limit/GPU-1", 20)]


def test_remember_records_the_run_and_zero_means_no_run(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "agent.db")
    memory = store.memory()
    memory.remember("a", {"v": 1}, run_id=7)
    memory.remember("b", {"v": 2}, run_id=0)
    assert memory.recall("missing") is None
    store.close()

    assert _memory_rows(tmp_path / "agent.db") == [("a", 7), ("b", None)]


def test_a_state_file_in_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent state file"):
        MemoryStore.open(tmp_path / "absent" / "agent.db")


def test_the_state_file_table_is_the_server_schema_s_action_memory(tmp_path: Path) -> None:
    """The agent creates the table with sqlite3 alone: the same columns, types and key as schema.action_memory."""
    import sqlalchemy as sa

    from remediate.store import schema

    agent = MemoryStore.open(tmp_path / "agent.db")
    agent.close()
    server = sa.create_engine(f"sqlite:///{tmp_path / 'server.db'}")
    schema.action_memory.create(server)
    server.dispose()

    def columns(path: Path) -> list[tuple[str, str, int, int]]:
        with sqlite3.connect(path) as conn:
            return [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(action_memory)")]

    assert columns(tmp_path / "agent.db") == columns(tmp_path / "server.db")
    assert ("key", "VARCHAR(255)", 1, 1) in columns(tmp_path / "agent.db")


def test_the_state_file_and_its_companions_are_private(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    store = MemoryStore.open(path)
    store.memory().remember("k", {"v": 1}, run_id=1)
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert name.stat().st_mode & 0o077 == 0, name
    store.close()


def test_a_writer_waits_for_the_write_lock_then_is_busy(tmp_path: Path) -> None:
    """Another writer of the file (another connection: SQLite's own lock) holds the lock past the busy timeout."""
    from remediate.errors import StoreBusy

    path = tmp_path / "agent.db"
    store = MemoryStore.open(path, busy_timeout=0.3)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusy):
        store.memory().remember("k", {"v": 1}, run_id=1)
    other.execute("ROLLBACK")
    other.close()
    store.memory().remember("k", {"v": 2}, run_id=2)  # free again: the write goes through
    assert store.memory().recall("k") == {"v": 2}
    store.close()


def test_a_state_file_deleted_while_open_refuses_writes(tmp_path: Path) -> None:
    """Writing on would commit to the unlinked inode: lost at the next start. StoreFileReplaced instead."""
    from remediate.errors import StoreFileReplaced

    path = tmp_path / "agent.db"
    store = MemoryStore.open(path)
    path.unlink()
    with pytest.raises(StoreFileReplaced, match="deleted"):
        store.memory().remember("k", {"v": 1}, run_id=1)
    store.close()


def test_a_write_that_fails_leaves_nothing_behind(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "agent.db")
    memory = store.memory()
    memory.remember("kept", {"v": 1}, run_id=1)
    with pytest.raises(RuntimeError), store.write() as cursor:
        cursor.execute("DELETE FROM action_memory")
        raise RuntimeError("a failure inside the transaction")
    assert memory.recall("kept") == {"v": 1}
    store.close()


def test_a_signature_seen_is_refused_after_a_reopen_until_it_expires(tmp_path: Path) -> None:
    store = MemoryStore.open(tmp_path / "agent.db")
    assert store.seen().first_use("sig-1", 1000.0, 240.0)
    assert not store.seen().first_use("sig-1", 1001.0, 240.0)
    store.close()

    reopened = MemoryStore.open(tmp_path / "agent.db")  # the agent restarted
    assert not reopened.seen().first_use("sig-1", 1100.0, 240.0)
    assert reopened.seen().first_use("sig-2", 1100.0, 240.0)
    # Kept `keep` seconds; by then the request's timestamp is refused as stale anyway.
    assert reopened.seen().first_use("sig-1", 1241.0, 240.0)
    reopened.close()
