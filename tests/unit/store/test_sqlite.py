"""The store under a lock it cannot get, a file deleted under it, and the modes of its files (13, 18, 19).

SQLite only: each test is about the database's file (SQLite's own write lock, the file's identity and modes,
WAL mode), which a server database does not have.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from remediate.errors import StoreBusy, StoreConflict, StoreFileReplaced
from remediate.store import Store


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# A real other process holds SQLite's write lock until its stdin closes, as another gunicorn worker (or a stuck
# one) in a long transaction would, or a program that is not remediate (the sqlite3 shell).
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextmanager
def _lock_held_by_another_process(db: Path) -> Iterator[None]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


def test_a_write_lock_held_by_another_process_raises_store_busy_within_the_bound(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}", busy_timeout=0.5)
    with _lock_held_by_another_process(db):
        started = time.monotonic()
        with pytest.raises(StoreBusy), store.write():
            pass
        assert 0.4 < time.monotonic() - started < 2.0
        with pytest.raises(StoreBusy):
            store.database.probe_write()
    store.database.probe_write()  # free again: writes go through
    store.close()


def test_sqlites_own_lock_held_elsewhere_is_store_busy_too(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}", busy_timeout=0.5)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            store.database.probe_write()
        assert time.monotonic() - started < 2.0
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.close()


def test_a_writer_waiting_for_the_lock_writes_once_it_is_free(tmp_path: Path) -> None:
    """Writers queue on SQLite's own lock: one that comes while another holds it writes when that one ends."""
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}", busy_timeout=30)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    written: list[BaseException | None] = []

    def write() -> None:
        try:
            store.database.probe_write()
            written.append(None)
        except BaseException as exc:  # the test reports it
            written.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.2)
    assert written == []  # still waiting for the lock
    other.execute("ROLLBACK")
    other.close()
    writer.join(30)
    assert written == [None]
    store.close()


def test_every_waiting_writer_gets_503_within_one_bound(tmp_path: Path) -> None:
    """With SQLite's lock alone: the busy timeout is the one bound on every wait of a writer,
    for a connection of its process and for the lock, however many writers of however many workers wait. More
    threads than one worker's connections (SQLAlchemy's pool: 5 + 10) wait here, in two workers."""
    bound = 2.0
    db = tmp_path / "r.db"
    first, second = (Store.open(f"sqlite:///{db}", busy_timeout=bound) for _ in range(2))  # two workers
    waited: list[float] = []
    outcomes: list[BaseException | None] = []
    mutex = threading.Lock()

    def write(store: Store) -> None:
        started = time.monotonic()
        try:
            store.database.probe_write()
            outcome: BaseException | None = None
        except BaseException as exc:  # the test reports it
            outcome = exc
        with mutex:
            waited.append(time.monotonic() - started)
            outcomes.append(outcome)

    writers = [threading.Thread(target=write, args=(store,)) for store in [first] * 20 + [second] * 4]
    with _lock_held_by_another_process(db):
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(10 * bound)
    assert len(outcomes) == len(writers)
    assert all(isinstance(outcome, StoreBusy) for outcome in outcomes), outcomes
    # Two bounds would be 2 x bound; one: bound (plus what a loaded host adds, far under 0.5 x bound).
    assert max(waited) < 1.5 * bound, waited
    first.close()
    second.close()


def test_opening_a_locked_database_whose_schema_is_current_does_not_wait(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store.open(f"sqlite:///{db}").close()
    with _lock_held_by_another_process(db):
        started = time.monotonic()
        store = Store.open(f"sqlite:///{db}", busy_timeout=5)
        assert time.monotonic() - started < 1.0
        store.close()


def test_a_deleted_or_replaced_database_file_is_noticed(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}")
    store.database.check_file()
    db.unlink()
    with pytest.raises(StoreFileReplaced, match="deleted"):
        store.database.check_file()
    with pytest.raises(StoreFileReplaced), store.write():
        pass
    db.write_bytes(b"")
    with pytest.raises(StoreFileReplaced, match="replaced"):
        store.database.probe_write()
    store.close()


def test_each_write_the_database_could_not_take_is_told_by_kind_and_a_conflict_is_not(tmp_path: Path) -> None:
    """remediate_store_write_errors_total{kind} counts what Database.on_write_error is told."""
    db = tmp_path / "r.db"
    store = Store.open(f"sqlite:///{db}")
    told: list[str] = []
    store.database.on_write_error = told.append
    store.database.probe_write()
    with pytest.raises(StoreConflict), store.write():
        raise StoreConflict("another writer stored the same occurrence first")  # the store works
    assert told == []
    db.unlink()
    with pytest.raises(StoreFileReplaced):
        store.database.probe_write()
    assert told == ["file_replaced"]
    store.close()


def test_database_files_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        db = tmp_path / "r.db"
        store = Store.open(f"sqlite:///{db}")
        store.database.probe_write()
        for name in ("r.db", "r.db-wal", "r.db-shm"):
            assert _mode(tmp_path / name) == 0o600, name
        # Writers queue on SQLite's own lock: no lock file of remediate's beside the database.
        assert sorted(path.name for path in tmp_path.iterdir()) == ["r.db", "r.db-room", "r.db-shm", "r.db-wal"]
        store.close()
    finally:
        os.umask(old)


def test_existing_world_readable_database_files_are_made_private_at_open(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store.open(f"sqlite:///{db}").close()
    for name in ("r.db", "r.db-room"):
        (tmp_path / name).touch()
        os.chmod(tmp_path / name, 0o644)
    Store.open(f"sqlite:///{db}").close()
    assert _mode(db) == 0o600
    assert _mode(tmp_path / "r.db-room") == 0o600


def test_the_agent_state_file_is_private(tmp_path: Path) -> None:
    from remediate.agent.service import open_memory

    old = os.umask(0o022)
    try:
        store, memory = open_memory(tmp_path / "state" / "agent.db")
        memory.remember("k", {"v": 1}, run_id=1)
        for name in ("agent.db", "agent.db-wal", "agent.db-shm"):
            assert _mode(tmp_path / "state" / name) == 0o600, name
        assert sorted(path.name for path in (tmp_path / "state").iterdir()) == [
            "agent.db",
            "agent.db-shm",
            "agent.db-wal",
        ]
        store.close()
    finally:
        os.umask(old)


def test_sqlite_runs_in_wal_mode(store: Store) -> None:
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"


def test_a_driver_error_raised_around_sqlalchemy_reads_as_the_one_sqlalchemy_raises_itself(tmp_path: Path) -> None:
    """BEGIN and the batched INSERT go to the driver's connection directly; their errors must still be the
    SQLAlchemy exceptions the store's callers handle (a unique violation: IntegrityError, a StoreConflict)."""
    import sqlalchemy as sa

    from remediate.store.sqlite import as_sqlalchemy_error

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    statements = {
        "CREATE TABLE t (id INTEGER PRIMARY KEY)": None,
        "INSERT INTO t (id) VALUES (1)": None,
        "INSERT INTO t (id) VALUES (1) ": sa.exc.IntegrityError,  # the same key again
        "SELECT * FROM no_such_table": sa.exc.OperationalError,
    }
    with engine.begin() as conn:
        for statement, expected in statements.items():
            if expected is None:
                conn.exec_driver_sql(statement)
                continue
            with pytest.raises(expected) as raised:
                conn.exec_driver_sql(statement)
            ours = as_sqlalchemy_error(statement, raised.value.orig)
            assert type(ours) is type(raised.value)
            assert ours.orig is raised.value.orig
            assert str(ours) == str(raised.value)
    engine.dispose()
    plain = as_sqlalchemy_error("BEGIN IMMEDIATE", sqlite3.Error("no class of its own"))
    assert type(plain) is sa.exc.DBAPIError and "no class of its own" in str(plain)
