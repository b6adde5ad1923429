"""The real ``remediate serve`` on a SQLite file whose filesystem fills up (a small tmpfs), then is
freed.

While the disk is full the webhook answers 503 and /readyz says so (a write that needs fresh space, as a
webhook's does, not one rewriting a page the log already holds); a run whose step ran but whose end could not
be recorded is handed back by the live executor and, once the disk is freed, recorded as it happened (the
POST sent once, the run succeeded), never left `running` behind a claim nobody renews.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.support.realsystems import WebhookRecorder
from tests.support.server import WAIT, HasLogTail, RemediateServer, notification, notify_and_log_playbooks
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of the test's own (mounting needs root and mount(8))."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("a small filesystem to fill needs root and mount(8)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem has no byte left; returns it (delete it to free the disk)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 4096, 512, 1):  # then the last partial blocks
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    with pytest.raises(OSError) as full:
        os.close(os.open(directory / "one-more", os.O_WRONLY | os.O_CREAT, 0o600))
        (directory / "one-more").write_bytes(b"x")
    assert full.value.errno == errno.ENOSPC
    return filler


def truncate_log(db: Path) -> None:
    """Checkpoint SQLite's write-ahead log into the file and truncate it to 0 bytes: the next commit needs fresh
    space for its log frames (as once the log has grown to what the disk holds)."""
    with contextlib.closing(sqlite3.connect(db, timeout=scaled(10))) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0


@pytest.fixture
def server_on_small_disk(
    small_disk: Path,
    tmp_path: Path,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    watch_log: Callable[[str, HasLogTail], None],
) -> Iterator[RemediateServer]:
    notify_and_log_playbooks(playbooks_dir, "E2EDiskFull", recorder.url)
    server = RemediateServer(tmp_path / "remediate", playbooks_dir, executor_threads=1)
    server.db_path = small_disk / "r.db"
    server.database_url = f"sqlite:///{server.db_path}"
    watch_log("remediate", server)
    try:
        yield server.start()
    finally:
        server.stop()


def test_a_full_disk_is_503_and_unready_and_a_run_whose_end_was_not_recorded_finishes_once_it_is_freed(
    small_disk: Path, server_on_small_disk: RemediateServer, recorder: WebhookRecorder
) -> None:
    server = server_on_small_disk
    recorder.delay = 1.5  # the POST is in flight while the disk fills
    accepted = server.post_webhook(notification("E2EDiskFullNotify", {"Hostname": "node-a"}, fingerprint="a" * 16))
    assert accepted.status_code == 200, accepted.text
    [in_flight] = accepted.json()["runs"]
    recorder.wait_for(timeout=WAIT)

    truncate_log(server.db_path)
    filler = fill(small_disk)
    try:
        # The POST was answered; recording its end needs log space the disk no longer has.
        wait_until(
            lambda: f"run {in_flight}: the store failed under it" in server.log_tail(400),
            WAIT,
            message="the executor noticed that the step's end could not be recorded",
        )
        late = notification("E2EDiskFullLog", {"Hostname": "node-b"}, fingerprint="b" * 16)
        refused = server.post_webhook(late)
        unready = requests.get(f"{server.url}/readyz", timeout=scaled(10))
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "store_unavailable"
        assert "full" in refused.json()["message"]
        assert unready.status_code == 503, unready.text
        assert unready.json()["error"] == "store_unavailable"
        assert server.run(in_flight)["status"] == "running"  # reads still work
    finally:
        filler.unlink()

    # The disk is freed: the same server, not restarted, records what happened and goes on.
    done = server.wait_for_run_status(in_flight, "succeeded", "failed")
    assert done["status"] == "succeeded", done
    [step] = done["steps"]
    assert step["status"] == "succeeded"
    assert [a["outcome"] for a in step["attempts"]] == ["succeeded"]
    assert len(recorder.requests) == 1  # sent once, and recorded as sent
    wait_until(lambda: requests.get(f"{server.url}/readyz", timeout=scaled(10)).status_code == 200, WAIT)
    retried = server.post_webhook(late)
    assert retried.status_code == 200, retried.text
    assert server.wait_for_run(status="succeeded", alertname="E2EDiskFullLog")["target"] == "node-b"
    log = server.log_tail(2000)
    assert "Traceback" not in log and "executor loop error" not in log
    assert server.starts == 1
