"""SQLite's write-ahead log checkpointed apart from the commits (remediate.store.checkpoints): the p99 of receipt to
first step."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from remediate.store import Store, WalCheckpointer
from remediate.store.sqlite import WAL_SAFETY_NET_PAGES
from tests.support.waiting import wait_until

PAGE = 4096
FILLER_PAGES = 1_500  # over SQLite's default autocheckpoint (1,000 pages), under the safety net


def _autocheckpoint(store: Store) -> int:
    with store.read() as conn:
        return int(conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one())


def _open(tmp_path: Path, **options: bool) -> tuple[Store, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "r.db"
    return Store.open(f"sqlite:///{path}", **options), path


def _insert_pages(store: Store, pages: int) -> None:
    with store.write() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS filler (body BLOB)")
    for _ in range(pages // 100):
        with store.write() as conn:
            conn.exec_driver_sql(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) "
                "INSERT INTO filler (body) SELECT randomblob(4000) FROM n"
            )


def test_commits_checkpoint_by_default_and_not_when_checkpoints_are_done_apart(tmp_path: Path) -> None:
    default, default_path = _open(tmp_path / "default")
    apart, apart_path = _open(tmp_path / "apart", commit_checkpoints=False)
    try:
        assert _autocheckpoint(default) == 1000  # SQLite's own
        assert _autocheckpoint(apart) == WAL_SAFETY_NET_PAGES
        before = {path: os.path.getsize(path) for path in (default_path, apart_path)}
        _insert_pages(default, FILLER_PAGES)
        _insert_pages(apart, FILLER_PAGES)

        # By default a commit that crossed 1,000 pages copied them into the database file.
        assert os.path.getsize(default_path) - before[default_path] > 1000 * PAGE
        # Apart: every page is still in the log, the file as it was, until someone checkpoints.
        assert os.path.getsize(apart_path) == before[apart_path]
        assert os.path.getsize(f"{apart_path}-wal") > FILLER_PAGES * PAGE

        assert apart.database.checkpoint() is True
        assert os.path.getsize(apart_path) - before[apart_path] > FILLER_PAGES * PAGE * 0.9
        with apart.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM filler").scalar_one() == FILLER_PAGES
    finally:
        default.close()
        apart.close()


def test_a_checkpoint_waits_for_no_writer(tmp_path: Path) -> None:
    store, _ = _open(tmp_path, commit_checkpoints=False)
    try:
        _insert_pages(store, 200)
        with store.write() as conn:  # a writer holds the write lock (ours and SQLite's) meanwhile
            conn.exec_driver_sql("INSERT INTO filler (body) VALUES (x'00')")
            started = time.monotonic()
            done = threading.Event()
            threading.Thread(target=lambda: (store.database.checkpoint(), done.set()), daemon=True).start()
            assert done.wait(5.0), "a PASSIVE checkpoint must not wait for the writer"
            assert time.monotonic() - started < 1.0
    finally:
        store.close()


def test_an_in_memory_database_has_no_log_to_checkpoint() -> None:
    store = Store.open("sqlite://", commit_checkpoints=False)
    try:
        assert store.database.checkpoint() is False
    finally:
        store.close()


def test_a_server_database_has_nothing_to_checkpoint(pg_store_url: str) -> None:
    store = Store.open(pg_store_url, commit_checkpoints=False)
    try:
        assert store.database.checkpoint() is False
    finally:
        store.close()


def test_the_checkpointer_checkpoints_every_interval_until_stopped() -> None:
    calls: list[float] = []

    def checkpoint() -> bool:
        calls.append(time.monotonic())
        return True

    checkpointer = WalCheckpointer(checkpoint, every=0.02)
    checkpointer.start()
    wait_until(lambda: len(calls) >= 3, 5.0, message="three checkpoints")
    checkpointer.stop()
    stopped_at = len(calls)
    time.sleep(0.1)
    assert len(calls) == stopped_at
    assert checkpointer.checkpoints == stopped_at


def test_the_checkpointer_ends_on_a_database_without_a_log() -> None:
    calls: list[int] = []

    def checkpoint_without_a_log() -> bool:
        calls.append(1)
        return False

    checkpointer = WalCheckpointer(checkpoint_without_a_log, every=0.01)
    checkpointer.start()
    wait_until(lambda: not checkpointer._thread.is_alive(), 5.0, message="the thread ends")  # type: ignore[union-attr]
    assert calls == [1]
    assert checkpointer.checkpoints == 0


def test_a_failing_checkpoint_is_logged_once_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([sa.exc.OperationalError("PRAGMA", {}, Exception("disk I/O error"))] * 3)
    calls: list[int] = []

    def checkpoint() -> bool:
        calls.append(1)
        error = next(answers, None)
        if error is not None:
            raise error
        return True

    caplog.set_level(logging.INFO, logger="remediate.store.checkpoints")
    checkpointer = WalCheckpointer(checkpoint, every=0.01)
    checkpointer.start()
    wait_until(lambda: checkpointer.checkpoints >= 2, 5.0, message="checkpoints after the failures")
    checkpointer.stop()
    messages = [record.getMessage() for record in caplog.records]
    assert sum("WAL checkpoint failed" in m for m in messages) == 1
    assert sum("WAL checkpoints work again" in m for m in messages) == 1
    assert len(calls) >= 5
