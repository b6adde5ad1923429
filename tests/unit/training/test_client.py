"""TrainingControl without torch: registration, cheap polls, applying between steps, at most once, expiry, signals.

The agent's side is played by `deliver` (atomic command files, as remediate writes them);
optimizers and schedulers are stand-ins with the attributes the handlers use.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import remediate.training.inbox as inbox_module
from remediate.training import (
    CallableCheckpoints,
    CommandContext,
    CommandRejected,
    ControlOptions,
    JobNameInUse,
    TrainingControl,
)
from remediate.training.files import JobPaths, atomic_write_json, read_json
from remediate.training.handlers import RestartRequested
from remediate.training.procfs import pid_start_time, this_host
from remediate.training.protocol import (
    APPLIED,
    EXPIRED,
    FAILED,
    REJECTED,
    RESTART_EXIT_CODE,
    Command,
    Registration,
)
from tests.support.training import JOB, FakeOptimizer, FakeScheduler, deliver, wait_for_ack
from tests.support.waiting import scaled, wait_until


def make_control(root: Path, handlers: dict[str, Any] | None = None, **kwargs: Any) -> TrainingControl:
    """A control of JOB on `root`, without a wake-up signal; `kwargs`: TrainingControl's keywords or options."""
    own = {key: kwargs.pop(key) for key in ("checkpoints", "optimizer", "scheduler", "batching") if key in kwargs}
    control = TrainingControl(JOB, root=root, options=ControlOptions(**{"wake_signal": None, **kwargs}), **own)
    for kind, handler in (handlers or {}).items():
        control.add_handler(kind, handler)
    return control


def settle(control: TrainingControl, step: int = 1) -> None:
    """Poll until the racy window after the last change has passed (see inbox.RACY_NS)."""
    time.sleep(inbox_module.RACY_NS / 1e9 + 0.01)
    control.poll(step)
    control.poll(step)


class Recorder:
    """A custom handler that records where it ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, dict[str, Any]]] = []

    def __call__(self, ctx: CommandContext) -> None:
        self.calls.append((ctx.command.id, ctx.step, dict(ctx.params)))
        ctx.result["seen_step"] = ctx.step
        ctx.detail = f"noted at step {ctx.step}"


# --------------------------------------------------------------------------- registration


def test_register_creates_the_layout_and_a_registration_a_dry_run_can_read(root: Path) -> None:
    optimizer = FakeOptimizer(3e-4, 1e-3)
    control = make_control(root, optimizer=optimizer, framework="custom")
    control.register()
    paths = JobPaths(root, JOB)
    for directory in (paths.inbox, paths.outbox, paths.taken, paths.tmp):
        assert directory.is_dir()
    registration = paths.read_registration()
    assert registration.job == JOB
    assert registration.pid == os.getpid()
    assert registration.pid_start == pid_start_time(os.getpid())
    assert registration.host == this_host()
    assert (registration.rank, registration.world_size) == (0, 1)
    assert registration.framework == "custom"
    assert set(registration.kinds) == {"rollback", "scale_lr", "checkpoint", "skip_batches", "restart"}
    assert registration.commands is not None and set(registration.commands) == set(registration.kinds)
    assert registration.commands["scale_lr"]["required"] == ["factor"]
    assert registration.lr == (3e-4, 1e-3)
    assert registration.last_step is None and registration.closed_at is None
    assert registration.wake_signal is None

    control.poll(41)
    registration = paths.read_registration()
    assert registration.last_step == 41
    assert registration.last_poll_at is not None and abs(registration.last_poll_at - time.time()) < 5
    control.close()
    assert not paths.dir.exists()  # nothing outstanding: a closed job leaves no control directory behind


def test_a_job_name_that_is_not_one_path_component_is_refused(root: Path) -> None:
    for bad in ("../etc", "a/b", ".hidden", "", "x" * 300):
        with pytest.raises(ValueError):
            TrainingControl(bad, root=root, options=ControlOptions(wake_signal=None))


def test_the_job_name_and_root_come_from_the_environment(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMEDIATE_TRAINING_JOB", "from-env")
    monkeypatch.setenv("REMEDIATE_TRAINING_CONTROL_ROOT", str(root))
    control = TrainingControl(options=ControlOptions(wake_signal=None)).register()
    assert (root / "from-env" / "job.json").is_file()
    control.close()


# --------------------------------------------------------------------------- cheap polls


def test_a_poll_without_a_command_is_one_stat_no_listing_and_no_read(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = make_control(root, heartbeat_interval=3600)
    control.register()
    settle(control)
    calls = {"listdir": 0, "read": 0, "stat": 0}
    real_listdir, real_read, real_stat = os.listdir, inbox_module.read_json, os.stat

    def listdir(path: Any) -> list[str]:
        calls["listdir"] += 1
        return real_listdir(path)

    def read(*args: Any, **kwargs: Any) -> Any:
        calls["read"] += 1
        return real_read(*args, **kwargs)

    def stat(*args: Any, **kwargs: Any) -> Any:
        calls["stat"] += 1
        return real_stat(*args, **kwargs)

    monkeypatch.setattr(inbox_module.os, "listdir", listdir)
    monkeypatch.setattr(inbox_module.os, "stat", stat)
    monkeypatch.setattr(inbox_module, "read_json", read)
    for step in range(2, 1002):
        assert control.poll(step) == step
    assert calls == {"listdir": 0, "read": 0, "stat": 1000}

    command = deliver(root, JOB, "scale_lr", {"factor": 0.5})  # the inbox changes: the next poll looks
    control.poll(1002)
    assert calls["listdir"] >= 1 and calls["read"] == 1
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == REJECTED  # no optimizer attached
    assert "no optimizer" in ack.detail


def test_commands_written_right_after_a_scan_are_not_missed(root: Path) -> None:
    """A change in the same mtime tick as the previous scan leaves the mtime as it was: rescan until it is old."""
    seen: list[str] = []
    control = make_control(root, heartbeat_interval=3600, handlers={"note": lambda ctx: seen.append(ctx.command.id)})
    control.register()
    sent = []
    for step in range(1, 41):
        sent.append(deliver(root, JOB, "note").id)
        control.poll(step)
    deadline = time.monotonic() + scaled(2)
    while len(seen) < len(sent) and time.monotonic() < deadline:
        control.poll(41)
    assert seen == sent


def test_the_heartbeat_lists_the_inbox_even_if_its_stat_looks_unchanged(root: Path) -> None:
    recorder = Recorder()
    control = make_control(root, heartbeat_interval=0.05, handlers={"note": recorder})
    control.register()
    settle(control)
    paths = JobPaths(root, JOB)
    command = deliver(root, JOB, "note")
    before = os.stat(paths.inbox)
    # Pretend the inbox did not change (e.g. a network filesystem's attribute cache).
    control._inbox.seen = (before.st_mtime_ns, before.st_size, before.st_ino)
    control._inbox.dirty = False
    control.poll(2)
    assert recorder.calls == []
    time.sleep(0.06)
    control.poll(3)
    assert [c[0] for c in recorder.calls] == [command.id]


# --------------------------------------------------------------------------- applying commands


def test_scale_lr_changes_every_param_group_and_the_scheduler_base_lrs_with_a_floor(root: Path) -> None:
    first, second = FakeOptimizer(1e-3, 4e-4), FakeOptimizer(2e-6)
    scheduler = FakeScheduler(first)
    control = make_control(root, optimizer=[first, second], scheduler=scheduler)
    control.register()
    command = deliver(root, JOB, "scale_lr", {"factor": 0.5, "min_lr": 3e-4})
    assert control.poll(120) == 120
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED
    assert [g["lr"] for g in first.param_groups] == [5e-4, 3e-4]  # 4e-4 * 0.5 is below the floor
    assert [g["lr"] for g in second.param_groups] == [2e-6]  # already below the floor: left alone
    assert scheduler.base_lrs == [5e-4, 3e-4]
    assert scheduler._last_lr == [5e-4, 3e-4]
    assert ack.result["lr_before"] == [1e-3, 4e-4, 2e-6]
    assert ack.result["lr_after"] == [5e-4, 3e-4, 2e-6]
    assert ack.result["groups_at_floor"] == 2
    assert (ack.step_before, ack.step_after) == (120, 120)
    assert "lr 0.001, 0.0004, 2e-06 -> 0.0005, 0.0003, 2e-06" in ack.detail
    assert ack.job["pid"] == os.getpid() and ack.job["rank"] == 0
    paths = JobPaths(root, JOB)
    assert os.listdir(paths.inbox) == [] and os.listdir(paths.taken) == []
    assert paths.applied.read_text().split() == [command.id]
    assert control.acks[-1] == ack


def test_a_command_is_applied_between_steps_by_poll_not_by_the_signal_handler(root: Path) -> None:
    recorder = Recorder()
    control = TrainingControl(JOB, root=root, options=ControlOptions(wake_signal=signal.SIGUSR2))
    control.add_handler("note", recorder)
    control.register()
    try:
        paths = JobPaths(root, JOB)
        assert paths.read_registration().wake_signal == "SIGUSR2"
        assert signal.getsignal(signal.SIGUSR2) == control._wake.on_signal
        settle(control)
        deliver(root, JOB, "note")
        started = time.monotonic()
        os.kill(os.getpid(), signal.SIGUSR2)  # would kill the process without the handler
        assert control.wait(5.0) is True
        assert time.monotonic() - started < 1.0
        assert recorder.calls == []  # the signal only woke us
        control.poll(7)
        assert [step for _, step, _ in recorder.calls] == [7]
    finally:
        control.close()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    assert JobPaths(root, JOB).read_registration().wake_signal is None


def test_wait_notices_a_command_by_polling_without_a_signal(root: Path) -> None:
    control = make_control(root)
    control.register()
    settle(control)
    assert control.wait(0.1) is False
    threading.Timer(0.2, lambda: deliver(root, JOB, "checkpoint")).start()
    started = time.monotonic()
    assert control.wait(5.0, interval=0.05) is True
    assert time.monotonic() - started < 2.0


def test_an_existing_handler_for_the_wake_signal_is_left_alone(root: Path) -> None:
    def mine(signum: int, frame: Any) -> None:
        pass

    previous = signal.signal(signal.SIGUSR2, mine)
    try:
        control = TrainingControl(JOB, root=root).register()
        assert signal.getsignal(signal.SIGUSR2) is mine
        assert JobPaths(root, JOB).read_registration().wake_signal is None
        control.close()
        assert signal.getsignal(signal.SIGUSR2) is mine
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_an_expired_command_is_acknowledged_as_expired_and_never_applied(root: Path) -> None:
    recorder = Recorder()
    control = make_control(root, handlers={"note": recorder})
    control.register()
    command = deliver(root, JOB, "note", created_at=time.time() - 120, expires_in=60)
    control.poll(5)
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == EXPIRED
    assert "expired 60" in ack.detail and "not applied" in ack.detail
    assert recorder.calls == []
    assert command.id in JobPaths(root, JOB).applied.read_text().split()


def test_a_command_is_applied_at_most_once_even_when_delivered_again_after_a_restart(root: Path) -> None:
    recorder = Recorder()
    first = make_control(root, handlers={"note": recorder})
    first.register()
    command = deliver(root, JOB, "note", command_id="same-id")
    first.poll(10)
    original = wait_for_ack(root, JOB, command.id)
    assert original.status == APPLIED
    first.close()

    # The job restarts; remediate (say, after its own crash) delivers the very same command again.
    deliver(root, JOB, "note", command_id="same-id")
    second = make_control(root, handlers={"note": recorder})
    second.register()
    second.poll(3)
    assert len(recorder.calls) == 1
    assert JobPaths(root, JOB).read_ack("same-id") == original  # the original answer stands
    assert os.listdir(JobPaths(root, JOB).inbox) == []

    # Even without its acknowledgement, the id is never applied again.
    os.unlink(JobPaths(root, JOB).ack("same-id"))
    deliver(root, JOB, "note", command_id="same-id")
    second.poll(4)
    ack = wait_for_ack(root, JOB, "same-id")
    assert ack.status == REJECTED and "at most once" in ack.detail
    assert len(recorder.calls) == 1


def test_a_command_interrupted_by_a_crash_is_reported_and_not_applied_again(root: Path) -> None:
    recorder = Recorder()
    paths = JobPaths(root, JOB)
    make_control(root).register().close()
    paths.create()  # the layout a crashed run leaves (close() removed it)
    now = time.time()
    # Crash after recording the id, before the acknowledgement: the command sits in taken/.
    crashed = Command("crashed-1", "note", {}, now, now + 60)
    atomic_write_json(paths.taken_command(crashed.id), crashed.to_dict(), tmp_dir=paths.tmp)
    paths.applied.write_text("crashed-1\n")
    # Crash right after claiming, before recording: never started, so it is judged again.
    claimed = Command("claimed-1", "note", {}, now, now + 60)
    atomic_write_json(paths.taken_command(claimed.id), claimed.to_dict(), tmp_dir=paths.tmp)

    control = make_control(root, handlers={"note": recorder})
    control.register()
    ack = wait_for_ack(root, JOB, "crashed-1")
    assert ack.status == FAILED and "interrupted" in ack.detail and "not applied again" in ack.detail
    control.poll(9)
    assert wait_for_ack(root, JOB, "claimed-1").status == APPLIED
    assert [c[0] for c in recorder.calls] == ["claimed-1"]
    assert os.listdir(paths.taken) == []


def test_unknown_kinds_bad_files_and_failing_handlers_are_answered(root: Path) -> None:
    def broken(ctx: CommandContext) -> None:
        raise RuntimeError("disk on fire")

    def refuses(ctx: CommandContext) -> None:
        raise CommandRejected("not now")

    control = make_control(root, handlers={"broken": broken, "refuses": refuses})
    control.register()
    paths = JobPaths(root, JOB)
    unknown = deliver(root, JOB, "pause")
    failing = deliver(root, JOB, "broken")
    rejecting = deliver(root, JOB, "refuses")
    (paths.inbox / "garbage.json").write_text("{not json")
    wrong_version = Command("v2", "note", {}, time.time(), time.time() + 60).to_dict() | {"version": 2}
    (paths.inbox / "v2.json").write_text(__import__("json").dumps(wrong_version))
    other_id = Command("inside", "note", {}, time.time(), time.time() + 60).to_dict()
    (paths.inbox / "outside.json").write_text(__import__("json").dumps(other_id))
    (paths.inbox / "not a command.txt").write_text("ignored")
    control.poll(1)

    ack = wait_for_ack(root, JOB, unknown.id)
    assert ack.status == REJECTED and "no handler for 'pause'" in ack.detail and "scale_lr" in ack.detail
    ack = wait_for_ack(root, JOB, failing.id)
    assert ack.status == FAILED and ack.detail == "RuntimeError: disk on fire"
    assert wait_for_ack(root, JOB, rejecting.id).detail == "not now"
    assert "not valid JSON" in wait_for_ack(root, JOB, "garbage").detail
    assert "protocol version 2" in wait_for_ack(root, JOB, "v2").detail
    assert "holds command id 'inside'" in wait_for_ack(root, JOB, "outside").detail
    assert os.listdir(paths.inbox) == ["not a command.txt"]
    assert control.poll(2) == 2  # training goes on


def test_a_command_withdrawn_before_the_job_looks_is_never_seen(root: Path) -> None:
    recorder = Recorder()
    control = make_control(root, handlers={"note": recorder})
    control.register()
    command = deliver(root, JOB, "note")
    os.unlink(JobPaths(root, JOB).command(command.id))  # what remediate does when it gives up
    control.poll(1)
    assert recorder.calls == []
    assert JobPaths(root, JOB).read_ack(command.id) is None


def test_custom_handlers_and_commands_applied_in_order_at_the_step_the_previous_one_left(root: Path) -> None:
    recorder = Recorder()
    control = make_control(root, checkpoints=_checkpoints(root, [(100, 2.0), (150, 1.5)]), handlers={"note": recorder})
    control.register()
    now = time.time()
    # Oldest first, whatever the file names say: the lr cut issued after a rollback must not come before it.
    rollback = deliver(root, JOB, "rollback", {"checkpoint": "latest"}, created_at=now, command_id="zz-rollback")
    note = deliver(root, JOB, "note", {"x": 1}, created_at=now + 0.001, command_id="aa-note")
    assert control.poll(170) == 150
    assert wait_for_ack(root, JOB, rollback.id).step_after == 150
    ack = wait_for_ack(root, JOB, note.id)
    assert (ack.step_before, ack.result["seen_step"]) == (150, 150)
    assert recorder.calls == [(note.id, 150, {"x": 1})]


# --------------------------------------------------------------------------- rollback with your own checkpoints


def _checkpoints(root: Path, saved: list[tuple[int, float]], **kwargs: Any) -> CallableCheckpoints:
    loaded: list[int] = []
    store = CallableCheckpoints(
        root.parent / "ckpts",
        save=lambda step: f"/ckpt/{step}",
        load=lambda info: loaded.append(info.step),
        writer=True,
        **kwargs,
    )
    store.loaded = loaded  # type: ignore[attr-defined]
    for step, loss in saved:
        store.record_checkpoint(step, loss, f"/ckpt/{step}")
    return store


def test_rollback_to_the_newest_good_checkpoint_at_least_n_steps_back_then_skip_batches(root: Path) -> None:
    store = _checkpoints(root, [(100, 2.0), (200, 1.8), (300, 1.7), (400, float("nan")), (450, 1.6)])
    optimizer = FakeOptimizer(1e-4)
    control = make_control(root, checkpoints=store, optimizer=optimizer)
    control.register()
    registration = JobPaths(root, JOB).read_registration()
    assert [(c.step, c.good) for c in registration.checkpoints] == [
        (100, True), (200, True), (300, True), (400, False), (450, True)
    ]  # fmt: skip
    command = deliver(root, JOB, "rollback", {"checkpoint": "latest_good", "min_steps_back": 100, "skip_batches": 3})
    assert control.poll(460) == 300  # 450 is too recent, 400 is not good
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED
    assert (ack.step_before, ack.step_after) == (460, 300)
    assert ack.result["checkpoint"]["step"] == 300 and ack.result["checkpoint"]["good"] is True
    assert ack.result["batches_skipped"] == 3
    assert ack.result["discarded_checkpoints"] == [400, 450]
    assert ack.result["lr_before"] == ack.result["lr_after_load"] == [1e-4]  # a stand-in load leaves the lr
    assert "rolled back from step 460 to 300 (loss 1.7), skipping the next 3 batches" in ack.detail
    assert store.loaded == [300]  # type: ignore[attr-defined]
    assert [c.step for c in store.list()] == [100, 200, 300]
    assert [c.step for c in JobPaths(root, JOB).read_registration().checkpoints] == [100, 200, 300]
    assert [control.skip_batch() for _ in range(5)] == [True, True, True, False, False]
    assert control.batches_skipped == 3


def test_a_rollback_without_a_fitting_checkpoint_is_rejected_and_changes_nothing(root: Path) -> None:
    store = _checkpoints(root, [(100, 2.0), (150, float("inf"))])
    control = make_control(root, checkpoints=store)
    control.register()
    command = deliver(root, JOB, "rollback", {"checkpoint": "latest_good", "min_steps_back": 100, "skip_batches": 50})
    assert control.poll(180) == 180
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == REJECTED
    assert "no checkpoint fits" in ack.detail and "step <= 80" in ack.detail and "150*" in ack.detail
    assert store.loaded == []  # type: ignore[attr-defined]
    assert control.batches_to_skip == 0


def test_checkpoint_command_saves_with_the_last_reported_loss(root: Path) -> None:
    store = _checkpoints(root, [], good_loss_below=5.0)
    control = make_control(root, checkpoints=store)
    control.register()
    control.poll(10, 3.25)
    command = deliver(root, JOB, "checkpoint")
    control.poll(11)
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED
    assert ack.result["checkpoint"] == {
        "step": 11,
        "loss": 3.25,
        "good": True,
        "path": "/ckpt/11",
        "saved_at": ack.result["checkpoint"]["saved_at"],
        "run": store.run_id,
    }
    assert JobPaths(root, JOB).read_registration().checkpoints[-1].step == 11


def test_restart_saves_a_checkpoint_acknowledges_then_exits_75_and_without_checkpoints_is_rejected(
    root: Path,
) -> None:
    store = _checkpoints(root, [(5, 2.0)], good_loss_below=5.0)
    control = make_control(root, checkpoints=store)
    control.register()
    assert control.commands["restart"]["properties"] == {}
    control.poll(10, 1.5)
    command = deliver(root, JOB, "restart")
    with pytest.raises(RestartRequested) as exited:
        control.poll(12)
    assert exited.value.code == RESTART_EXIT_CODE == 75 and exited.value.checkpoint_step == 12
    ack = JobPaths(root, JOB).read_ack(command.id)  # written before the exit, not after
    assert ack is not None and ack.status == APPLIED and ack.result["exit_code"] == 75
    assert ack.result["checkpoint"]["step"] == 12 and ack.result["checkpoint"]["loss"] == 1.5
    assert "exiting with status 75" in ack.detail
    assert [c.step for c in store.list()] == [5, 12]
    control.close()

    # No checkpoint store: nothing to restart from, so the job neither saves nor exits.
    bare = make_control(root)
    bare.register()
    command = deliver(root, JOB, "restart")
    bare.poll(3)
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == REJECTED and "no checkpoints attached" in ack.detail
    assert bare.poll(4) == 4


def test_a_control_directory_that_disappears_never_stops_training(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    control = make_control(root, handlers={"note": recorder}, heartbeat_interval=0.05)
    control.register()
    settle(control)
    shutil.rmtree(root / JOB)  # someone cleans up the hostPath under a running job
    for step in range(2, 50):
        assert control.poll(step) == step
    assert "reading the inbox of" in caplog.text and "training goes on" in caplog.text
    time.sleep(0.06)
    control.poll(50)  # directories recreated, and the heartbeat rewrote job.json
    assert JobPaths(root, JOB).read_registration().last_step == 50
    command = deliver(root, JOB, "note")
    control.poll(51)
    assert wait_for_ack(root, JOB, command.id).status == APPLIED


def test_registration_round_trips_through_json(root: Path) -> None:
    make_control(root).register()
    data = read_json(JobPaths(root, JOB).registration)
    assert Registration.from_dict(data).to_dict() == data


# --------------------------------------------------------------------------- checkpoints, rollbacks, held names


def test_a_checkpoint_far_above_the_recent_median_is_not_good_even_without_a_threshold(root: Path) -> None:
    """Finding 2's field case: losses ~2, then 133.2 saved during the spike; good_loss_below unset."""
    store = _checkpoints(root, [(100, 2.1), (200, 1.9), (300, 2.0), (400, 133.2), (450, 5.9), (500, 6.5)])
    assert [(c.step, c.good) for c in store.list()] == [
        (100, True), (200, True), (300, True), (400, False), (450, True), (500, False)
    ]  # fmt: skip
    # The reference is the median of the good ones before: 5.9 <= 3 x 2.0; 6.5 > 3 x median(2.1, 1.9, 2.0, 5.9).
    assert store.reference_loss(450) == 2.0 and store.reference_loss(500) == 2.05
    control = make_control(root, checkpoints=store)
    control.register()
    command = deliver(root, JOB, "rollback", {"checkpoint": "latest_good", "min_steps_back": 60})
    assert control.poll(470) == 300
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED and ack.result["checkpoint"]["loss"] == 2.0
    assert (ack.pid, ack.host) == (os.getpid(), this_host())
    assert store.loaded == [300]  # type: ignore[attr-defined]


def test_the_relative_mark_can_be_turned_off_or_widened(root: Path) -> None:
    off = _checkpoints(root, [(100, 2.0), (200, 133.2)], max_loss_ratio=None)
    assert [c.good for c in off.list()] == [True, True]
    with pytest.raises(ValueError, match="max_loss_ratio"):
        _checkpoints(root, [], max_loss_ratio=0.0)


def test_a_rollback_with_saved_before_only_considers_checkpoints_saved_before_it(root: Path) -> None:
    store = _checkpoints(root, [(100, 2.0), (200, 1.9), (300, 1.8)])
    spike_started = store.get(200).saved_at  # type: ignore[union-attr]
    control = make_control(root, checkpoints=store)
    control.register()
    command = deliver(root, JOB, "rollback", {"checkpoint": "latest", "saved_before": spike_started})
    assert control.poll(310) == 100  # 200 was saved at that very moment, 300 after: both during the spike
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED and "saved before" in ack.result["selection"]

    store = _checkpoints(root, [(100, 2.0)])
    command = deliver(root, JOB, "rollback", {"saved_before": store.get(100).saved_at - 1.0})  # type: ignore[union-attr]
    control.attach(checkpoints=store)
    assert control.poll(120) == 120
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == REJECTED and "no checkpoint fits" in ack.detail and "saved at or after" in ack.detail
    bad = deliver(root, JOB, "rollback", {"saved_before": "yesterday"})
    control.poll(121)
    assert wait_for_ack(root, JOB, bad.id).status == REJECTED


def test_a_rollback_arriving_while_skipping_moves_the_step_the_next_poll_returns(root: Path) -> None:
    store = _checkpoints(root, [(100, 2.0), (200, 1.9)])
    control = make_control(root, checkpoints=store)
    control.register()
    deliver(root, JOB, "rollback", {"checkpoint": "latest", "skip_batches": 3})
    assert control.poll(250) == 200
    assert control.skip_batch()  # one skipped batch; a second rollback arrives during the skip
    second = deliver(root, JOB, "rollback", {"checkpoint": "latest", "min_steps_back": 50, "skip_batches": 0})
    settle_skip = [control.skip_batch() for _ in range(2)]
    assert settle_skip == [True, True] and wait_for_ack(root, JOB, second.id).step_after == 100
    assert not control.skip_batch()
    assert control.poll(201) == 101  # the loop trained one batch after the skip: counted from the new step


def test_a_second_control_for_a_held_name_is_refused_until_the_first_closes(root: Path) -> None:
    first = make_control(root).register()
    second = make_control(root)
    with pytest.raises(JobNameInUse, match=f"process {os.getpid()} on host {this_host()} holds the lock"):
        second.register()
    first.close()
    second.register()
    assert JobPaths(root, JOB).read_registration().closed_at is None
    second.close()


def test_a_live_process_registered_without_the_lock_is_not_taken_over_but_a_dead_one_is(root: Path) -> None:
    """A job on a library from before the lock: its job.json names a live process on this host."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    paths = JobPaths(root, JOB)
    try:
        wait_until(lambda: pid_start_time(sleeper.pid) is not None, 5, message="no /proc entry")
        paths.create()
        old = Registration(job=JOB, pid=sleeper.pid, host=this_host(), pid_start=pid_start_time(sleeper.pid))
        atomic_write_json(paths.registration, old.to_dict(), tmp_dir=paths.tmp)
        with pytest.raises(JobNameInUse, match=f"process {sleeper.pid} on host .* is registered and still running"):
            make_control(root).register()
        assert paths.read_registration().pid == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
    control = make_control(root).register()
    assert paths.read_registration().pid == os.getpid()
    control.close()


# --------------------------------------------------------------------------- the job's own commands


def test_a_handler_registered_with_the_decorator_is_declared_applied_and_its_result_acknowledged(root: Path) -> None:
    control = make_control(root)
    dropout = {"p": 0.1}

    @control.handler("set_dropout", params={"p": {"type": "number", "minimum": 0, "maximum": 0.9}}, required=["p"])
    def set_dropout(ctx: CommandContext) -> dict[str, Any]:
        before, dropout["p"] = dropout["p"], ctx.params["p"]
        ctx.detail = f"dropout {before} -> {dropout['p']}"
        return {"dropout_before": before, "dropout_after": dropout["p"]}

    control.register()
    declared = JobPaths(root, JOB).read_registration().commands
    assert declared is not None
    assert declared["set_dropout"]["properties"] == {"p": {"type": "number", "minimum": 0, "maximum": 0.9}}
    assert declared["set_dropout"]["required"] == ["p"] and declared["set_dropout"]["additionalProperties"] is False

    command = deliver(root, JOB, "set_dropout", {"p": 0.3})
    settle(control, 7)
    ack = wait_for_ack(root, JOB, command.id)
    assert (ack.status, ack.detail, ack.step_before) == (APPLIED, "dropout 0.1 -> 0.3", 7)
    assert ack.result == {"dropout_before": 0.1, "dropout_after": 0.3}
    assert dropout["p"] == 0.3
    control.close()


def test_a_handler_added_after_registering_is_declared_at_once(root: Path) -> None:
    control = make_control(root)
    control.register()
    assert "warmup" not in (JobPaths(root, JOB).read_registration().commands or {})
    control.add_handler("warmup", lambda ctx: None, schema=None)
    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert declared["warmup"]["additionalProperties"] is True  # no schema: any params
    control.close()


def test_params_outside_the_declared_schema_and_unknown_commands_are_refused_by_the_job(root: Path) -> None:
    control = make_control(root)
    calls: list[dict[str, Any]] = []
    control.handler("set_dropout", params={"p": {"type": "number", "maximum": 0.9}}, required=["p"])(
        lambda ctx: calls.append(ctx.params)
    )
    control.register()
    too_high = deliver(root, JOB, "set_dropout", {"p": 2})
    extra = deliver(root, JOB, "set_dropout", {"p": 0.2, "q": 1})
    unknown = deliver(root, JOB, "reduce_batch_size", {"factor": 0.5})  # no Batching attached
    settle(control, 3)
    acks = {c.id: wait_for_ack(root, JOB, c.id) for c in (too_high, extra, unknown)}
    assert {a.status for a in acks.values()} == {REJECTED}
    assert "params do not match what this job declares for 'set_dropout'" in acks[too_high.id].detail
    assert "param 'p': must be <= 0.9, got 2" in acks[too_high.id].detail
    assert "unknown param 'q'" in acks[extra.id].detail
    assert "this job has no handler for 'reduce_batch_size'" in acks[unknown.id].detail
    assert calls == []
    control.close()


def test_skip_batches_is_a_built_in_command(root: Path) -> None:
    control = make_control(root)
    control.register()
    command = deliver(root, JOB, "skip_batches", {"batches": 3})
    settle(control, 10)
    ack = wait_for_ack(root, JOB, command.id)
    assert ack.status == APPLIED and ack.result == {"batches_skipped": 3, "batches_to_skip": 3}
    assert [control.skip_batch() for _ in range(4)] == [True, True, True, False]
    assert control.batches_skipped == 3
    control.close()


def test_a_registration_of_an_older_library_declares_no_commands(root: Path) -> None:
    control = make_control(root)
    control.register()
    data = read_json(JobPaths(root, JOB).registration)
    del data["commands"]
    assert Registration.from_dict(data).commands is None
    data["commands"] = ["rollback"]
    with pytest.raises(ValueError, match="commands must map"):
        Registration.from_dict(data)
    control.close()
