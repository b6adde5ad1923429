"""The store under a lock it cannot get, a file deleted under it, and the modes of its files (issue 15: 13, 18, 19).

SQLite only: each test is about the database's file (its flock'd write lock, SQLite's own lock, the file's
identity and modes, WAL mode), which a server database does not have.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from remediate.errors import StoreBusy, StoreFileReplaced
from remediate.store import Store


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_write_lock_held_by_another_process_raises_store_busy_within_the_bound(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}", busy_timeout=0.5)
    # A real other process holds the flock, as another gunicorn worker (or a stuck one) would.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(30)",
            f"{db}-writelock",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        started = time.monotonic()
        with pytest.raises(StoreBusy), store.write():
            pass
        assert 0.4 < time.monotonic() - started < 2.0
        with pytest.raises(StoreBusy):
            store.probe_write()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    store.probe_write()  # free again: writes go through
    store.close()


def test_sqlites_own_lock_held_elsewhere_is_store_busy_too(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}", busy_timeout=0.5)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            store.probe_write()
        assert time.monotonic() - started < 2.0
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.close()


def test_the_lock_file_and_sqlites_own_lock_share_one_bound(tmp_path: Path) -> None:
    """Issue 24, finding 9: a writer that got the lock file late then waited SQLite's whole busy timeout again:
    503 after up to twice `store_busy_timeout` (9.86 s for 5 s). One deadline covers both waits now."""
    bound = 2.0
    db = tmp_path / "r.db"
    first, second = (Store.open(f"sqlite:///{db}", busy_timeout=bound) for _ in range(2))  # two workers
    other = sqlite3.connect(db, isolation_level=None)  # not remediate: it holds SQLite's lock, not the lock file
    other.execute("BEGIN IMMEDIATE")
    outcome: list[BaseException] = []

    def write_first() -> None:
        try:
            first.probe_write()
        except StoreBusy as exc:
            outcome.append(exc)

    ahead = threading.Thread(target=write_first)
    try:
        ahead.start()  # takes the lock file, then waits `bound` for SQLite's lock
        time.sleep(bound / 4)
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            second.probe_write()  # waits for the lock file until `ahead` gives up, then for SQLite's lock
        waited = time.monotonic() - started
        # Two bounds: 1.75 x bound; one: bound (plus what a loaded host adds, far under 0.5 x bound).
        assert waited < 1.5 * bound, waited
    finally:
        ahead.join()
        other.execute("ROLLBACK")
        other.close()
    assert len(outcome) == 1  # the first writer got StoreBusy too
    first.close()
    second.close()


def test_opening_a_locked_database_whose_schema_is_current_does_not_wait(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store.open(f"sqlite:///{db}").close()
    with open(f"{db}-writelock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # this process's own other open file: a separate flock
        started = time.monotonic()
        store = Store.open(f"sqlite:///{db}", busy_timeout=5)
        assert time.monotonic() - started < 1.0
        store.close()


def test_a_deleted_or_replaced_database_file_is_noticed(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}")
    store.check_file()
    db.unlink()
    with pytest.raises(StoreFileReplaced, match="deleted"):
        store.check_file()
    with pytest.raises(StoreFileReplaced), store.write():
        pass
    db.write_bytes(b"")
    with pytest.raises(StoreFileReplaced, match="replaced"):
        store.probe_write()
    store.close()


def test_database_files_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        db = tmp_path / "r.db"
        store = Store.open(f"sqlite:///{db}")
        store.probe_write()
        for name in ("r.db", "r.db-wal", "r.db-shm", "r.db-writelock"):
            assert _mode(tmp_path / name) == 0o600, name
        store.close()
    finally:
        os.umask(old)


def test_existing_world_readable_database_files_are_made_private_at_open(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store.open(f"sqlite:///{db}").close()
    for name in ("r.db", "r.db-writelock"):
        os.chmod(tmp_path / name, 0o644)
    Store.open(f"sqlite:///{db}").close()
    assert _mode(db) == 0o600
    assert _mode(tmp_path / "r.db-writelock") == 0o600


def test_the_agent_state_file_is_private(tmp_path: Path) -> None:
    from remediate.agent import open_memory

    old = os.umask(0o022)
    try:
        store, memory = open_memory(tmp_path / "state" / "agent.db")
        memory.remember("k", {"v": 1}, run_id=1)
        for name in ("agent.db", "agent.db-wal", "agent.db-shm", "agent.db-writelock"):
            assert _mode(tmp_path / "state" / name) == 0o600, name
        store.close()
    finally:
        os.umask(old)


def test_sqlite_runs_in_wal_mode(store: Store) -> None:
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
