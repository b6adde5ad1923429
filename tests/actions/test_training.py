"""The server side: training.rollback / scale_lr / checkpoint against a live job (a TrainingControl in a thread).

Nothing is faked on the protocol: the actions write real command files into the job's
inbox and wait for the acknowledgements the real client writes. The job trains nothing —
its optimizer and checkpoints are torch-free stand-ins — because what is tested here is
how remediate finds the job, delivers, waits, times out and reports.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.training import (
    TrainingCheckpointAction,
    TrainingRollbackAction,
    TrainingScaleLrAction,
    _TrainingAction,
)
from remediate.actions.training_job import wake
from remediate.config.settings import load_settings
from remediate.errors import ActionError, ConfigError, ParamsError
from remediate.training import ControlOptions, TrainingControl
from remediate.training.files import JobPaths, atomic_write_json, read_json
from remediate.training.protocol import CheckpointInfo, Command
from tests.support.training import LABELS, STARTS_AT_EPOCH, FakeOptimizer, LiveJob, ctx_for


@pytest.fixture
def jobs(root: Path) -> Iterator[list[LiveJob]]:
    started: list[LiveJob] = []
    yield started
    for job in started:
        job.stop()


def live(jobs: list[LiveJob], root: Path, name: str = "trainer-0", **kwargs: Any) -> LiveJob:
    job = LiveJob(root, name, **kwargs)
    jobs.append(job)
    return job.start()


# --------------------------------------------------------------------------- settings and schema


def test_the_registry_builds_the_actions_from_the_settings(tmp_path: Path) -> None:
    settings = load_settings(
        env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(tmp_path), "REMEDIATE_TRAINING_JOB_LABELS": "pod, job_name"}
    )
    assert settings.training.control_root == tmp_path
    assert settings.training.job_labels == ("pod", "job_name")
    registry = default_registry(settings)
    for name in ("training.rollback", "training.scale_lr", "training.checkpoint"):
        action = registry.get(name)
        assert isinstance(action, _TrainingAction)
        assert action.root == tmp_path and action.job_labels == ("pod", "job_name")
        assert action.where == "node" and action.idempotent
    assert load_settings(env={}).training.job_labels == LABELS
    for bad in ("", "pod,bad-label", ","):
        with pytest.raises(ConfigError):
            load_settings(env={"REMEDIATE_TRAINING_JOB_LABELS": bad})
    with pytest.raises(ConfigError):
        load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": ""})


def test_params_are_checked_and_the_timeout_is_never_taken_from_the_alert(root: Path) -> None:
    rollback, scale = TrainingRollbackAction(root, LABELS), TrainingScaleLrAction(root, LABELS)
    assert rollback.validate({}) == {
        "timeout": 60.0,
        "wake": True,
        "checkpoint": "latest_good",
        "min_steps_back": 0,
        "skip_batches": 0,
        "before_alert_s": 0.0,
    }
    assert rollback.schema.check_static({"timeout": "{{ labels.t }}"}) == [
        "parameter 'timeout' must be written in the playbook, not templated from the alert"
    ]
    assert rollback.schema.check_static({"job": "{{ labels.pod }}"}) == []
    for bad in ({"job": "../etc"}, {"job": "a/b"}, {"checkpoint": "oldest"}, {"min_steps_back": -1},
                {"timeout": 0}, {"timeout": 7200}):  # fmt: skip
        with pytest.raises(ParamsError):
            rollback.validate(bad)
    for bad in ({}, {"factor": 0}, {"factor": 1.5}, {"factor": 0.5, "min_lr": -1}, {"factor": "nan"}):
        with pytest.raises(ParamsError):
            scale.validate(bad)


# --------------------------------------------------------------------------- finding the job


def test_the_job_is_the_first_configured_label_naming_a_registered_job(root: Path, jobs: list[LiveJob]) -> None:
    LiveJob(root, "trainer-0").register()
    action = TrainingCheckpointAction(root, LABELS)
    labels = {"job": "kubernetes-pods", "exported_pod": "../../etc", "pod": "trainer-0"}
    paths, registration, how = action.find_job(action.validate({}), ctx_for(labels))
    assert (paths.dir, registration.job, how) == (root / "trainer-0", "trainer-0", "label pod")
    with pytest.raises(ActionError) as failure:
        action.find_job(action.validate({}), ctx_for({"job": "kubernetes-pods", "exported_pod": "../../etc"}))
    message = str(failure.value)
    assert "job='kubernetes-pods' (not registered)" in message
    assert "exported_pod='../../etc' (not a job name)" in message
    with pytest.raises(ActionError, match="none of them is set"):
        action.find_job(action.validate({}), ctx_for({"instance": "node-a:9100"}))
    # An explicit job param wins over the labels.
    assert action.find_job(action.validate({"job": "trainer-0"}), ctx_for({}))[2] == "param job"


def test_a_symlinked_control_directory_is_refused(root: Path, tmp_path: Path) -> None:
    job = LiveJob(root, "trainer-0").register()
    paths = JobPaths(root, "trainer-0")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rename(paths.inbox, tmp_path / "old-inbox")
    os.symlink(elsewhere, paths.inbox)
    action = TrainingCheckpointAction(root, LABELS)
    with pytest.raises(ActionError, match="not a plain directory"):
        action.execute(action.validate({"timeout": 1}), ctx_for({"pod": "trainer-0"}))
    assert os.listdir(elsewhere) == []
    job.control.close()


# --------------------------------------------------------------------------- dry-run


def test_the_plan_says_which_job_whether_it_is_alive_and_which_checkpoint(root: Path, jobs: list[LiveJob]) -> None:
    job = live(jobs, root, start_step=520)
    action = TrainingRollbackAction(root, LABELS)
    params = action.validate({"checkpoint": "latest_good", "min_steps_back": 100, "skip_batches": 200})
    plan = action.plan(params, ctx_for({"pod": "trainer-0"}))
    assert plan["job"] == "trainer-0" and plan["found_by"] == "label pod"
    assert plan["alive"] is True and plan["why_not"] is None and plan["process_running"] is True
    assert plan["pid"] == os.getpid() and plan["last_step"] >= 520 and plan["last_poll_age_s"] < 5
    assert plan["checkpoint"]["step"] == 400
    assert "at least 100 steps before step" in plan["checkpoint_reason"]
    assert plan["would_send"] == {
        "kind": "rollback",
        "params": {
            "checkpoint": "latest_good",
            "min_steps_back": 100,
            "skip_batches": 200,
            "saved_before": STARTS_AT_EPOCH,
        },
    }
    assert plan["would_skip_batches"] == 200 and plan["checkpoints"] == 5
    scale = TrainingScaleLrAction(root, LABELS)
    assert scale.plan(scale.validate({"factor": 0.5}), ctx_for({"pod": "trainer-0"}))["would_set_lr"] == [1.5e-4]
    assert job.loaded == [] and os.listdir(JobPaths(root, "trainer-0").inbox) == []  # a plan changes nothing


def test_the_plan_of_a_job_whose_process_is_gone_says_it_is_not_alive(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    paths = JobPaths(root, "trainer-0")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    data = read_json(paths.registration) | {"pid": int(finished.stdout), "last_poll_at": time.time() - 600}
    atomic_write_json(paths.registration, data)
    action = TrainingRollbackAction(root, LABELS)
    plan = action.plan(action.validate({"min_steps_back": 1000}), ctx_for({"pod": "trainer-0"}))
    assert plan["alive"] is False and plan["process_running"] is False
    assert "last poll 600 s ago" in plan["why_not"] and "is not running" in plan["why_not"]
    assert plan["checkpoint"] is None and "no checkpoint fits" in plan["checkpoint_reason"]


# --------------------------------------------------------------------------- execute


def test_rollback_and_scale_lr_record_what_the_job_did(root: Path, jobs: list[LiveJob]) -> None:
    job = live(jobs, root, start_step=520)
    rollback = TrainingRollbackAction(root, LABELS)
    params = rollback.validate({"checkpoint": "latest_good", "min_steps_back": 100, "skip_batches": 200})
    result = rollback.execute(params, ctx_for({"pod": "trainer-0"}))
    assert result["status"] == "applied" and result["kind"] == "rollback"
    assert result["step_after"] == 400 and result["step_before"] >= 520
    assert result["checkpoint"]["step"] == 400 and result["checkpoint"]["good"] is True
    assert result["batches_skipped"] == 200
    assert result["discarded_checkpoints"] == [450]
    assert result["params"] == {
        "checkpoint": "latest_good",
        "min_steps_back": 100,
        "skip_batches": 200,
        "saved_before": STARTS_AT_EPOCH,
    }
    assert result["acknowledged_after_s"] < 5 and result["job_latency_s"] < 5
    assert result["acknowledged_by"]["pid"] == os.getpid()
    assert result["command_id"].startswith("r1-s0-")
    assert job.loaded == [400]

    scale = TrainingScaleLrAction(root, LABELS)
    result = scale.execute(scale.validate({"factor": 0.5, "min_lr": 1e-5}), ctx_for({"pod": "trainer-0"}, step_index=1))
    assert result["lr_before"] == [3e-4] and result["lr_after"] == [1.5e-4]
    assert job.scheduler.base_lrs == [1.5e-4]
    assert result["detail"] == "lr 0.0003 -> 0.00015 (factor 0.5, floor 1e-05)"


def test_a_rollback_never_restores_a_checkpoint_saved_after_the_alert_started(root: Path, jobs: list[LiveJob]) -> None:
    """Checkpoints saved during the spike look good by loss; startsAt rules them out."""
    job = LiveJob(root, "trainer-0", start_step=520)
    for step, saved_at in ((300, STARTS_AT_EPOCH + 5.0), (400, STARTS_AT_EPOCH + 30.0)):
        job.checkpoints.record(CheckpointInfo(step, 1.8, True, f"/ckpt/{step}", saved_at))
    jobs.append(job)
    job.start()
    action = TrainingRollbackAction(root, LABELS)
    params = action.validate({"checkpoint": "latest_good", "min_steps_back": 100})

    plan = action.plan(params, ctx_for({"pod": "trainer-0"}))
    assert plan["would_send"]["params"]["saved_before"] == STARTS_AT_EPOCH
    assert plan["checkpoint"]["step"] == 200
    assert "saved before 2026-11-21T05:40:14.652Z" in plan["checkpoint_reason"]
    # before_alert_s (the rule's `for`, say) moves the bar back further: only step 100 was saved 3450 s before.
    earlier = action.plan(action.validate({**params, "before_alert_s": 3450.0}), ctx_for({"pod": "trainer-0"}))
    assert earlier["checkpoint"]["step"] == 100

    result = action.execute(params, ctx_for({"pod": "trainer-0"}))
    assert result["status"] == "applied", result
    assert result["checkpoint"]["step"] == 200 and job.loaded == [200]
    assert "saved before 2026-11-21T05:40:14.652Z" in result["selection"]


def test_running_the_same_step_again_returns_the_first_answer_without_applying_twice(
    root: Path, jobs: list[LiveJob]
) -> None:
    job = live(jobs, root, start_step=520)
    action = TrainingRollbackAction(root, LABELS)
    params = action.validate({"checkpoint": "latest", "min_steps_back": 10})
    first = action.execute(params, ctx_for({"pod": "trainer-0"}))
    again = action.execute(params, ctx_for({"pod": "trainer-0"}))
    assert again["command_id"] == first["command_id"] and "replayed" in again
    assert (again["step_before"], again["step_after"]) == (first["step_before"], first["step_after"])
    assert job.loaded == [first["step_after"]]


def test_a_job_that_rejects_the_command_fails_the_step_with_its_reason(root: Path, jobs: list[LiveJob]) -> None:
    live(jobs, root, start_step=150)
    action = TrainingRollbackAction(root, LABELS)
    with pytest.raises(ActionError) as failure:
        action.execute(action.validate({"min_steps_back": 100}), ctx_for({"pod": "trainer-0"}))
    assert "answered rejected to rollback command" in str(failure.value)
    assert "no checkpoint fits" in str(failure.value)


def test_a_command_interrupted_by_a_job_crash_fails_the_step_naming_a_real_step(
    root: Path, jobs: list[LiveJob]
) -> None:
    """Finding 7: the step's error read "... command r1-s0-... at step None: interrupted ..."."""
    action = TrainingRollbackAction(root, LABELS)
    ctx = ctx_for({"pod": "trainer-0"})
    crashed = LiveJob(root, "trainer-0", start_step=530).register()
    crashed.control.close()
    JobPaths(root, "trainer-0").create()  # the layout a crashed run leaves (close() removed it)
    # The job took the command, recorded it as applied, and died before it could acknowledge it.
    paths = JobPaths(root, "trainer-0")
    now = time.time()
    command = Command(action.command_id(ctx), "rollback", {}, now, now + 60)
    atomic_write_json(paths.taken_command(command.id), command.to_dict(), tmp_dir=paths.tmp)
    paths.applied.write_text(f"{command.id}\n")
    live(jobs, root, start_step=540)  # the restarted job answers it `failed` (interrupted), with no step

    with pytest.raises(ActionError) as failure:
        action.execute(action.validate({"min_steps_back": 10}), ctx)

    message = str(failure.value)
    assert "interrupted" in message
    assert "step None" not in message
    reported = re.search(r"the job last reported step (\d+)", message)
    assert reported is not None, message
    assert int(reported.group(1)) >= 540  # the restarted job's step, not the dead one's (530)


def test_without_an_acknowledgement_the_step_fails_and_the_command_can_never_be_applied(root: Path) -> None:
    job = LiveJob(root, "trainer-0").register()  # registered, but not polling (stuck in a long eval, say)
    action = TrainingScaleLrAction(root, LABELS)
    started = time.monotonic()
    with pytest.raises(ActionError) as failure:
        action.execute(action.validate({"factor": 0.5, "timeout": 0.5}), ctx_for({"pod": "trainer-0"}))
    assert time.monotonic() - started < 2
    message = str(failure.value)
    assert "no acknowledgement from training job 'trainer-0' within 0.4 s" in message
    assert "the job last polled" in message and "at step 500" in message
    assert "withdrawn from the inbox: it will never be applied" in message
    paths = JobPaths(root, "trainer-0")
    assert os.listdir(paths.inbox) == []
    job.control.poll(501)  # the job comes back: nothing to apply
    assert job.optimizer.param_groups[0]["lr"] == 3e-4 and os.listdir(paths.outbox) == []


def test_a_job_that_closed_its_control_gets_nothing(root: Path) -> None:
    job = LiveJob(root, "trainer-0").register()
    job.control.close()  # nothing outstanding: its control directory is gone
    action = TrainingCheckpointAction(root, LABELS)
    with pytest.raises(
        ActionError, match=r"no registered training job found under .*pod='trainer-0' \(not registered\)"
    ):
        action.execute(action.validate({}), ctx_for({"pod": "trainer-0"}))
    assert not JobPaths(root, "trainer-0").dir.exists()


def test_a_job_that_closed_with_a_recent_acknowledgement_keeps_its_directory_and_gets_nothing(root: Path) -> None:
    """remediate may still come for that acknowledgement (a late outcome): the directory stays, marked closed."""
    job = LiveJob(root, "trainer-0").register()
    action = TrainingCheckpointAction(root, LABELS)
    job.start()
    action.execute(action.validate({}), ctx_for({"pod": "trainer-0"}))
    job.stop()
    job.control.close()
    with pytest.raises(ActionError, match=r"closed its control at .* it is not running"):
        action.execute(action.validate({}), ctx_for({"pod": "trainer-0"}, step_index=1))
    assert os.listdir(JobPaths(root, "trainer-0").inbox) == []


def test_the_wait_never_outlasts_the_step_deadline(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    action = TrainingCheckpointAction(root, LABELS)
    started = time.monotonic()
    with pytest.raises(ActionError, match="no acknowledgement"):
        action.execute(action.validate({"timeout": 600}), ctx_for({"pod": "trainer-0"}, seconds=1.5))
    assert time.monotonic() - started < 1.5
    with pytest.raises(ActionError, match="no time left"):
        action.execute(action.validate({}), ctx_for({"pod": "trainer-0"}, seconds=0.2))


def test_a_command_the_job_took_just_before_it_expired_is_answered_within_the_grace_period(
    root: Path, jobs: list[LiveJob], monkeypatch: pytest.MonkeyPatch
) -> None:
    # timeout 1 s with half of it as grace: the command expires after 0.5 s; the job took it at once
    # but needs 0.7 s to load the checkpoint.
    monkeypatch.setattr(_TrainingAction, "GRACE_FRACTION", 0.5)
    job = live(jobs, root, start_step=520, load_delay=0.7)
    action = TrainingRollbackAction(root, LABELS)
    result = action.execute(action.validate({"checkpoint": "latest", "timeout": 1.0}), ctx_for({"pod": "trainer-0"}))
    assert result["status"] == "applied" and result["acknowledged_after_s"] > 0.5
    # Taken, but still not answered when the time is up: the step fails and says so.
    job.load_delay = 1.5
    with pytest.raises(ActionError, match=r"took command .* before it expired .* may still be applying it"):
        action.execute(
            action.validate({"checkpoint": "latest", "timeout": 1.0}), ctx_for({"pod": "trainer-0"}, run_id=2)
        )


# --------------------------------------------------------------------------- the wake-up signal


def test_the_registered_wake_up_signal_wakes_a_waiting_job(root: Path) -> None:
    control = TrainingControl(
        "waiting", root=root, optimizer=FakeOptimizer(1e-3), options=ControlOptions(wake_signal=signal.SIGUSR2)
    )
    control.register()
    try:
        control.poll(10)
        time.sleep(0.06)
        control.poll(10)  # settled: only a signal or the 5 s polling interval can end the wait below
        action = TrainingScaleLrAction(root, LABELS)
        box: dict[str, Any] = {}
        sender = threading.Thread(
            target=lambda: box.update(
                result=action.execute(action.validate({"factor": 0.5, "timeout": 10}), ctx_for({"pod": "waiting"}))
            )
        )
        sender.start()
        started = time.monotonic()
        assert control.wait(10, interval=5.0) is True
        woke_after = time.monotonic() - started
        control.poll(10)
        sender.join(10)
        assert woke_after < 2.0
        assert box["result"]["wake_up"] == f"sent SIGUSR2 to {os.getpid()}"
        assert box["result"]["lr_after"] == [5e-4]
    finally:
        control.close()


def test_no_signal_goes_to_a_process_that_is_not_the_registered_job(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    paths = JobPaths(root, "trainer-0")
    registration = paths.read_registration()
    owner = os.stat(paths.registration).st_uid
    assert wake(registration, owner) == "the job registered no wake-up signal"
    # job.json claims a wake-up signal for a pid whose start time differs (a reused pid): refused.
    impostor = replace(registration, wake_signal="SIGUSR2", pid_start=(registration.pid_start or 0) + 1)
    assert "is not the registered job" in wake(impostor, owner)
    assert "runs on elsewhere" in wake(replace(impostor, host="elsewhere"), owner)
    # The right process, but job.json is owned by someone else (or its owner is unknown): refused too.
    signalled = replace(registration, wake_signal="SIGUSR2")
    assert "is not the registered job" in wake(signalled, owner + 1)
    assert "is not the registered job" in wake(signalled, None)
