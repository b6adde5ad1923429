"""remediate.sqlitefile's WriteLock across real processes: a background writer (the executor) lets writers
already waiting for the lock (webhooks) go first, for a bounded time, and a waiting writer stops saying so
once it has the lock or has given up."""

from __future__ import annotations

import fcntl
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from remediate.errors import StoreBusy
from remediate.sqlitefile import BACKGROUND_YIELD_MAX_S, WriteLock
from tests.support.waiting import scaled

# A writer in another process: waits for the lock (foreground), then prints when it got it and holds it a while.
WAITER = """
import sys, time
from remediate.sqlitefile import WriteLock
lock = WriteLock(sys.argv[1], 10.0)
print("waiting", flush=True)
with lock.held():
    print(f"got {time.monotonic()}", flush=True)
    time.sleep(0.2)
"""

# Another process holding the flock until its stdin closes (another worker's long transaction).
HOLDER = """
import fcntl, sys
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""

# A process that says "I wait" (the shared byte) and never takes the lock: a stuck waiter.
STUCK_WAITER = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 1, 0))
print("waiting", flush=True)
sys.stdin.read()
"""


def _start(script: str, path: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    process.stdout.readline()  # "held" / "waiting"
    return process


def _stop(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()


def _wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


def test_a_background_writer_lets_a_writer_waiting_in_another_process_go_first(tmp_path: Path) -> None:
    path = tmp_path / "db-writelock"
    background = WriteLock(str(path), 10.0, yield_max=10.0)  # as long as the test may need, however loaded
    holder = _start(HOLDER, path)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "waiting\n"
        _wait_until(background.writers_waiting)  # the other process now waits for the holder
        got: list[float] = []

        def write_in_background() -> None:
            with background.held(background=True):
                got.append(time.monotonic())

        thread = threading.Thread(target=write_in_background)
        thread.start()
        time.sleep(0.05)  # the background writer is now waiting too, behind the holder
        assert holder.stdin is not None
        holder.stdin.close()  # the holder commits: both waiters may take the lock
        waiter_got = float(waiter.stdout.readline().split()[1])
        thread.join(10)
        assert got, "the background writer never got the lock"
        # The waiting webhook first, for all of its 0.2 s; the background writer after it.
        assert got[0] >= waiter_got + 0.15
    finally:
        _stop(holder, waiter)


def test_a_stuck_waiter_holds_a_background_writer_back_only_for_a_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "db-writelock"
    lock = WriteLock(str(path), 10.0)
    stuck = _start(STUCK_WAITER, path)
    try:
        assert lock.writers_waiting()
        started = time.monotonic()
        with lock.held(background=True):
            waited = time.monotonic() - started
        # It let the "waiter" go first as long as it may, then wrote anyway.
        assert BACKGROUND_YIELD_MAX_S * 0.9 <= waited < 2.0
        # A foreground writer never waits for waiters: only for the lock.
        started = time.monotonic()
        with lock.held():
            assert time.monotonic() - started < BACKGROUND_YIELD_MAX_S
    finally:
        _stop(stuck)


def test_a_writer_stops_saying_it_waits_once_it_has_the_lock_or_gave_up(tmp_path: Path) -> None:
    path = tmp_path / "db-writelock"
    observer = WriteLock(str(path), 10.0)
    holder = _start(HOLDER, path)
    try:
        impatient = WriteLock(str(path), 0.3)
        outcome: list[str] = []

        def wait_then_give_up() -> None:
            with pytest.raises(StoreBusy), impatient.held():
                pass
            outcome.append("gave up")

        # The impatient writer lives in this process: its waiting is seen through another open file of the
        # lock (the observer's), as another process would see it.
        thread = threading.Thread(target=wait_then_give_up)
        thread.start()
        _wait_until(observer.writers_waiting)
        thread.join(10)
        assert outcome == ["gave up"]
        assert not observer.writers_waiting()
        assert holder.stdin is not None
        holder.stdin.close()  # the holder ends
        holder.wait(10)
        with impatient.held():  # now it gets the lock, and says nothing while it holds it
            assert not observer.writers_waiting()
    finally:
        _stop(holder)
        impatient.close()
        observer.close()


def test_the_waiting_mark_is_a_record_lock_independent_of_the_flock(tmp_path: Path) -> None:
    """A writer holding the flock is not "waiting": only the byte's shared lock says so."""
    path = tmp_path / "db-writelock"
    observer = WriteLock(str(path), 10.0)
    holder = _start(HOLDER, path)
    try:
        assert not observer.writers_waiting()
        with open(path, "a+") as other:  # another open file sets the mark without touching the flock
            fcntl.fcntl(other, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 1, 0))
            assert observer.writers_waiting()
        assert not observer.writers_waiting()  # closed: the kernel dropped it
    finally:
        _stop(holder)
        observer.close()
