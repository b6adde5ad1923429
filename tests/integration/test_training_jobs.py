"""Real job processes on one control root: the job name is held by one live
process, every acknowledgement names the pid that applied it, a checkpoint saved during a spike is
never restored, and commands are served while the quick-start loop skips slow batches.

The job is tests/support/jobs/plain_job.py, a torch-free loop written like the docs' quick start;
remediate's side is played by `deliver` and `wait_for_ack` (the same files the agent writes/reads).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.training import ControlOptions, TrainingControl
from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.procfs import this_host
from remediate.training.protocol import APPLIED
from tests.support.processes import PlainJob, job_starter
from tests.support.training import deliver, wait_for_ack
from tests.support.waiting import scaled, wait_until


@pytest.fixture
def spawn(tmp_path: Path, root: Path) -> Iterator[Callable[..., PlainJob]]:
    yield from job_starter(PlainJob, tmp_path, root)


# --------------------------------------------------------------------------- finding 1


def test_a_second_live_process_cannot_take_the_job_name_and_the_ack_names_the_pid_that_applied(
    spawn: Any, root: Path
) -> None:
    first = spawn("j1")
    first.wait_for("registered")
    paths = JobPaths(root, "j1")

    second = spawn("j1")
    assert second.proc.wait(scaled(15)) == 2, second.text()
    refusal = second.text()
    assert f"REFUSED job name 'j1' is already taken on control root {root}" in refusal
    assert f"process {first.proc.pid} on host {this_host()}" in refusal
    assert paths.read_registration().pid == first.proc.pid  # job.json did not flip to the second process

    command = deliver(root, "j1", "scale_lr", {"factor": 0.5})
    ack = wait_for_ack(root, "j1", command.id)
    assert ack.status == APPLIED
    assert (ack.pid, ack.host) == (first.proc.pid, this_host())
    raw = json.loads(paths.ack(command.id).read_text())
    assert raw["pid"] == first.proc.pid and raw["host"] == this_host()

    # A crashed holder leaves its job.json behind; the name is free again and the next process takes it over.
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(scaled(10))
    assert paths.read_registration().pid == first.proc.pid
    third = spawn("j1")
    third.wait_for("registered")
    assert paths.read_registration().pid == third.proc.pid
    command = deliver(root, "j1", "scale_lr", {"factor": 0.5})
    assert wait_for_ack(root, "j1", command.id).pid == third.proc.pid


def test_other_job_names_on_the_same_root_are_independent(spawn: Any) -> None:
    a, b = spawn("job-a"), spawn("job-b")
    assert a.wait_for("registered")[0]["pid"] == a.proc.pid
    assert b.wait_for("registered")[0]["pid"] == b.proc.pid


# --------------------------------------------------------------------------- finding 2


def test_a_checkpoint_saved_during_the_spike_is_not_restored_without_any_threshold(spawn: Any, root: Path) -> None:
    """The field case: checkpoints at loss ~2, then one saved during the spike at 133.2; no good_loss_below."""
    job = spawn("spiky", "--checkpoint-every", "5", "--spike-at", "20", "--max-seconds", str(scaled(30)))
    marks = job.wait_for("checkpoint", count=5)
    assert [(c["step"], c["loss"], c["good"]) for c in marks[:5]] == [
        (5, 2.01, True), (10, 2.0, True), (15, 2.02, True), (20, 133.2, False), (25, 133.2, False)
    ]  # fmt: skip
    command = deliver(root, "spiky", "rollback", {"checkpoint": "latest_good", "skip_batches": 0})
    ack = wait_for_ack(root, "spiky", command.id)
    assert ack.status == APPLIED, ack.detail
    assert ack.result["checkpoint"]["step"] == 15 and ack.result["checkpoint"]["loss"] == 2.02
    assert job.wait_for("loaded")[0]["step"] == 15


# --------------------------------------------------------------------------- finding 3


def test_an_lr_cut_sent_while_the_quick_start_loop_skips_slow_batches_is_applied_at_once(
    spawn: Any, root: Path
) -> None:
    """0.3 s per batch and 100 batches to skip: before the fix the cut waited ~30 s and expired."""
    job = spawn("slow", "--batch-seconds", "0.3", "--checkpoint-every", "2", "--max-seconds", str(scaled(40)))
    job.wait_for("checkpoint")
    rollback = deliver(root, "slow", "rollback", {"checkpoint": "latest", "skip_batches": 100})
    assert wait_for_ack(root, "slow", rollback.id).status == APPLIED
    time.sleep(0.5)  # the job is now skipping

    cut = deliver(root, "slow", "scale_lr", {"factor": 0.5}, expires_in=5.0)
    ack = wait_for_ack(root, "slow", cut.id, timeout=5.0)
    assert ack.status == APPLIED, ack.detail
    assert ack.result["lr_before"] == [0.01] and ack.result["lr_after"] == [0.005]
    assert ack.acked_at - cut.created_at < 1.5  # one slow batch, not the whole skip
    # job.json shows it at the next heartbeat (0.2 s), skipping or not
    wait_until(lambda: JobPaths(root, "slow").read_registration().lr == (0.005,), 2.0, message="lr in job.json")


# --------------------------------------------------------------------------- a restarted job's checkpoints


def _index_steps(job: str, root: Path) -> list[tuple[int, str | None]]:
    return [(c.step, c.run) for c in JobPaths(root, job).read_registration().checkpoints]


def test_a_restarted_job_keeps_its_new_checkpoints_and_never_rolls_back_into_the_abandoned_run(
    spawn: Any, tmp_path: Path, root: Path
) -> None:
    """The field case: the old run left 30-40 in the directory (keep 3); the restarted run's checkpoints were
    deleted as they were written, the index kept the old run's, and a rollback found nothing (or the old weights)."""
    directory = tmp_path / "ckpt-restarted"
    old = spawn("restarted", "--checkpoint-every", "5", "--keep", "3", "--max-seconds", str(scaled(60)))
    old_run = old.wait_for("registered")[0]["run"]
    old.wait_for("checkpoint", count=8, timeout=30)
    old.stop()  # killed: the control and the index stay as they were
    assert sorted(p.name for p in directory.glob("w-*.json"))[-1] >= "w-000040.json"

    new = spawn(
        "restarted",
        "--checkpoint-every",
        "5",
        "--keep",
        "3",
        "--batch-seconds",
        "0.1",
        "--max-seconds",
        str(scaled(60)),
    )
    new_run = new.wait_for("registered")[0]["run"]
    assert new_run != old_run
    new.wait_for("checkpoint", count=2, timeout=30)
    index = _index_steps("restarted", root)
    assert index and all(run == new_run and step < 30 for step, run in index), index  # only the new run's
    for step, _ in index:
        assert (directory / f"w-{step:06d}.json").exists()  # not deleted right after it was written

    command = deliver(root, "restarted", "rollback", {"checkpoint": "latest", "skip_batches": 0})
    ack = wait_for_ack(root, "restarted", command.id)
    assert ack.status == APPLIED, ack.detail
    assert ack.result["checkpoint"]["run"] == new_run and ack.result["checkpoint"]["step"] < 30
    loaded = new.wait_for("loaded")[0]
    assert (loaded["run"], loaded["pid"]) == (new_run, new.proc.pid)  # the new run's weights, not the old run's

    # Once it passes the old step numbers the old run's checkpoints are gone, and a rollback stays in its run.
    marks = new.wait_for("checkpoint", count=9, timeout=40)
    assert marks[-1]["step"] > 40
    assert all(run == new_run for _, run in _index_steps("restarted", root))
    command = deliver(root, "restarted", "rollback", {"checkpoint": "latest", "skip_batches": 0})
    assert wait_for_ack(root, "restarted", command.id).result["checkpoint"]["run"] == new_run
    assert new.wait_for("loaded", count=2)[-1]["pid"] == new.proc.pid
    new.stop()

    # A resume from the newest checkpoint continues that lineage: its checkpoints stay rollback candidates.
    resumed = spawn("restarted", "--checkpoint-every", "5", "--keep", "3", "--resume", "--max-seconds", str(scaled(60)))
    third_run = resumed.wait_for("registered")[0]["run"]
    start = resumed.wait_for("resumed")[0]["step"]
    assert start > 40 and resumed.wait_for("loaded")[0]["run"] == new_run
    resumed.wait_for("checkpoint", count=1, timeout=30)
    index = _index_steps("restarted", root)
    assert (start, new_run) in index and any(run == third_run for _, run in index), index
    command = deliver(root, "restarted", "rollback", {"checkpoint": "latest", "checkpoint_step": start})
    ack = wait_for_ack(root, "restarted", command.id)
    assert ack.status == APPLIED, ack.detail
    assert ack.result["checkpoint"]["run"] == new_run


# --------------------------------------------------------------------------- control directories


def _age(root: Path, job: str, **fields: float) -> None:
    paths = JobPaths(root, job)
    data = json.loads(paths.registration.read_text())
    data.update(fields)
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)


def test_closed_and_dead_jobs_control_directories_do_not_stay_forever(spawn: Any, root: Path) -> None:
    """Closed jobs' directories stayed forever and checkpoint_node listed every one of them."""
    now = time.time()
    # A job killed -9 a week ago: never closed, its lock gone with it.
    dead = spawn("dead-job")
    dead.wait_for("registered")
    os.kill(dead.proc.pid, signal.SIGKILL)
    dead.proc.wait(scaled(10))
    _age(root, "dead-job", last_poll_at=now - 8 * 24 * 3600)
    # A live job that has not polled for a week (hung): it holds its lock, so it stays.
    hung = TrainingControl("hung-job", root=root, options=ControlOptions(wake_signal=None)).register()
    _age(root, "hung-job", last_poll_at=now - 8 * 24 * 3600)
    # A job that closed with nothing outstanding: nothing left behind at once.
    TrainingControl("done-job", root=root, options=ControlOptions(wake_signal=None)).register().close()
    assert not (root / "done-job").exists()
    # Jobs that closed while remediate may still read an acknowledgement: kept a day, then aged out.
    for name in ("closed-yesterday", "closed-now"):
        control = TrainingControl(name, root=root, options=ControlOptions(wake_signal=None)).register()
        command = deliver(root, name, "skip_batches", {"batches": 1})
        control.poll(1)
        assert wait_for_ack(root, name, command.id).status == APPLIED
        control.close()
        assert JobPaths(root, name).read_registration().closed_at is not None
    _age(root, "closed-yesterday", closed_at=now - 25 * 3600)

    newcomer = TrainingControl(
        "newcomer", root=root, options=ControlOptions(wake_signal=None)
    ).register()  # any job's registration

    assert sorted(p.name for p in root.iterdir()) == ["closed-now", "hung-job", "newcomer"]
    hung.close()
    newcomer.close()
