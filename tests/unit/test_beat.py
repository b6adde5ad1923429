"""The executor's heartbeat file (remediate.executor.beat) as its master uses it: a missing directory or file never
stops the master (it once exited on FileNotFoundError when a worker's exit had removed the directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

from remediate.executor.beat import ExecutorBeat


def test_a_reset_remakes_a_removed_directory_and_the_beat_then_reads_back(tmp_path: Path) -> None:
    private = tmp_path / "remediate-serve-x"
    beat = ExecutorBeat(private / "executor-heartbeat")
    shutil.rmtree(private, ignore_errors=True)

    beat.reset()  # the master, before it forks an executor process: must not raise

    assert private.is_dir() and private.stat().st_mode & 0o777 == 0o700
    assert beat.last() is None  # no beat yet
    beat.beat()
    assert beat.age() is not None and beat.age() < 5.0


def test_a_file_that_cannot_be_written_reads_as_no_beat_yet(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    beat = ExecutorBeat(blocker / "executor-heartbeat")

    beat.reset()
    beat.beat()

    assert beat.last() is None and beat.age() is None
