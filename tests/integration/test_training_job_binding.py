"""The server side of training control, against real job processes (tests/support/jobs/light_job.py).

Which process answers, dead jobs, a graceful stop while a command is out,
the control directory through file descriptors and binding to Prometheus' target labels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.training import TrainingCheckpointAction, TrainingRollbackAction, TrainingScaleLrAction
from remediate.errors import ActionError, OutcomePending
from remediate.training.files import JobPaths, atomic_write_json, read_json
from remediate.training.procfs import pid_start_time
from remediate.training.protocol import Ack
from tests.support.training import LABELS, Jobs, LiveJob, ctx_for
from tests.support.waiting import scaled


@pytest.fixture
def processes(root: Path) -> Iterator[Jobs]:
    jobs = Jobs(root)
    yield jobs
    jobs.stop()


def died(job: LiveJob) -> None:
    """The job's process is gone: the kernel dropped its name lock, and job.json names a dead pid."""
    job.control._job_file.release_name()
    name_pid(job.control.paths.root, job.control.job, dead_pid())


def name_pid(root: Path, job: str, pid: int) -> None:
    """Make job.json name another live process, as a second job registering the same name did."""
    paths = JobPaths(root, job)
    data = read_json(paths.registration) | {"pid": pid, "pid_start": pid_start_time(pid)}
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)


def started_now() -> str:
    """An alert that starts now: the checkpoints a light job saved so far are rollback candidates."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


# --------------------------------------------------------------------------- finding 1: the pid that answers


def test_the_step_fails_when_a_process_other_than_the_registered_one_acknowledges(root: Path, processes: Jobs) -> None:
    job = processes.start("j1", heartbeat=60)  # no heartbeat rewrites job.json during the test
    other = processes.sleeper()  # a second live process whose pid job.json now names
    time.sleep(0.05)
    name_pid(root, "j1", other.pid)
    action = TrainingScaleLrAction(root, LABELS)
    with pytest.raises(ActionError) as failure:
        action.execute(action.validate({"factor": 0.5, "timeout": 5}), ctx_for({"training_job": "j1"}))
    message = str(failure.value)
    assert f"meant for pid {other.pid}" in message and f"but pid {job.pid}" in message
    assert "two live processes use this job name" in message


def test_the_result_names_the_pid_that_applied_the_command(root: Path, processes: Jobs) -> None:
    job = processes.start("j1")
    action = TrainingRollbackAction(root, LABELS)
    ctx = ctx_for({"training_job": "j1"}, starts_at=started_now())
    result = action.execute(action.validate({"min_steps_back": 100, "timeout": 5}), ctx)
    assert result["status"] == "applied" and result["applied_by_pid"] == job.pid
    assert "pid_check" not in result


def test_an_acknowledgement_without_a_pid_is_accepted_and_the_result_says_it_was_not_checked(root: Path) -> None:
    job = LiveJob(root, "trainer-0").register()
    action = TrainingCheckpointAction(root, LABELS)
    ctx = ctx_for({"pod": "trainer-0"})
    paths = JobPaths(root, "trainer-0")
    now = time.time()
    older = Ack(action.command_id(ctx), "checkpoint", "applied", "saved", now, now, 500, 500, job={"job": "trainer-0"})
    atomic_write_json(paths.ack(older.id), older.to_dict(), tmp_dir=paths.tmp)
    result = action.execute(action.validate({}), ctx)
    assert result["applied_by_pid"] is None and "the acknowledgement names no pid" in result["pid_check"]
    job.control.close()


# --------------------------------------------------------------------------- finding 5: dead jobs


def test_a_job_whose_process_is_gone_fails_at_once_and_nothing_is_sent(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    name_pid(root, "trainer-0", dead_pid())
    action = TrainingRollbackAction(root, LABELS)
    params = action.validate({"timeout": 20})
    plan = action.plan(params, ctx_for({"pod": "trainer-0"}))
    assert plan["can_act"] is False and "is not running" in plan["why_not"]
    started = time.monotonic()
    with pytest.raises(ActionError, match=r"is not running.*nothing was sent") as failure:
        action.execute(params, ctx_for({"pod": "trainer-0"}))
    assert time.monotonic() - started < 1.0, "it waited for an acknowledgement from a dead process"
    assert "wait_for_job" in str(failure.value)
    assert os.listdir(JobPaths(root, "trainer-0").inbox) == []


def test_wait_for_job_sends_the_command_to_the_job_once_it_is_back(root: Path, processes: Jobs) -> None:
    died(LiveJob(root, "j1").register())
    action = TrainingScaleLrAction(root, LABELS)
    params = action.validate({"factor": 0.5, "timeout": 5, "wait_for_job": "20s"})
    plan = action.plan(params, ctx_for({"training_job": "j1"}))
    assert plan["can_act"] is True and "would wait up to 20s" in plan["would_wait_for_job"]
    box: dict[str, Any] = {}
    sender = threading.Thread(target=lambda: box.update(result=action.execute(params, ctx_for({"training_job": "j1"}))))
    sender.start()
    time.sleep(0.5)
    assert os.listdir(JobPaths(root, "j1").inbox) == []  # nothing sent while the job is away
    restarted = processes.start("j1")
    sender.join(scaled(20))
    assert box["result"]["applied_by_pid"] == restarted.pid and box["result"]["lr_after"] == [1.5e-4]


def test_a_job_that_comes_back_as_another_pod_gets_nothing(root: Path, processes: Jobs) -> None:
    died(LiveJob(root, "j1").register())
    before = JobPaths(root, "j1").read_registration().pod
    action = TrainingCheckpointAction(root, LABELS)
    params = action.validate({"timeout": 5, "wait_for_job": "20s", "expect_pod": before})
    box: dict[str, Any] = {}

    def send() -> None:
        try:
            action.execute(params, ctx_for({"training_job": "j1"}))
        except ActionError as exc:
            box["error"] = str(exc)

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.3)
    processes.start("j1", env={"POD_NAME": "someone-else-0"})
    sender.join(scaled(20))
    assert f"expect_pod is {before!r} but the job registered pod 'someone-else-0'" in box["error"]
    assert os.listdir(JobPaths(root, "j1").inbox) == [] and os.listdir(JobPaths(root, "j1").outbox) == []


def test_wait_for_job_gives_up_after_its_duration(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    name_pid(root, "trainer-0", dead_pid())
    action = TrainingCheckpointAction(root, LABELS)
    started = time.monotonic()
    with pytest.raises(ActionError, match=r"did not register again within wait_for_job 0\.5s; nothing was sent"):
        action.execute(action.validate({"wait_for_job": "0.5s"}), ctx_for({"pod": "trainer-0"}))
    assert 0.5 <= time.monotonic() - started < 2


# --------------------------------------------------------------------------- finding 7: a graceful stop


def test_a_stop_withdraws_the_command_the_job_has_not_taken(root: Path) -> None:
    job = LiveJob(root, "trainer-0").register()  # registered, not polling
    action = TrainingScaleLrAction(root, LABELS)
    ctx = ctx_for({"pod": "trainer-0"})
    threading.Timer(0.3, ctx.stopping.set).start()
    started = time.monotonic()
    with pytest.raises(ActionError, match=r"remediate is stopping.*withdrawn.*never be applied"):
        action.execute(action.validate({"factor": 0.5, "timeout": 30}), ctx)
    assert time.monotonic() - started < 2
    assert os.listdir(JobPaths(root, "trainer-0").inbox) == []
    job.control.poll(501)
    assert job.optimizer.param_groups[0]["lr"] == 3e-4


def test_a_stop_leaves_a_taken_command_for_reconciliation(root: Path, processes: Jobs) -> None:
    processes.start("j1", load_delay=2.0)
    action = TrainingRollbackAction(root, LABELS)
    ctx = ctx_for({"training_job": "j1"}, starts_at=started_now())
    threading.Timer(0.5, ctx.stopping.set).start()
    with pytest.raises(OutcomePending, match=r"took command .* but remediate is stopping") as failure:
        action.execute(action.validate({"timeout": 30}), ctx)
    follow_up = failure.value.follow_up
    assert follow_up["job"] == "j1" and follow_up["command_id"] == action.command_id(ctx)
    assert follow_up["taken"] is True and follow_up["control_dir"] == str(JobPaths(root, "j1").dir)


# --------------------------------------------------------------------------- finding 11: symlink swaps


@pytest.mark.parametrize("swapped", ["inbox", "tmp", "outbox"])
def test_a_swapped_directory_never_gets_a_command_outside_the_root_nor_feeds_a_forged_answer(
    swapped: str, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = LiveJob(root, "trainer-0").register()  # not polling: no real answer comes
    paths = JobPaths(root, "trainer-0")
    outside = tmp_path / "outside"
    outside.mkdir()
    action = TrainingCheckpointAction(root, LABELS)
    ctx = ctx_for({"pod": "trainer-0"})
    now = time.time()
    forged = Ack(action.command_id(ctx), "checkpoint", "applied", "forged", now, now, 1, 1, job={"pid": os.getpid()})
    atomic_write_json(outside / f"{forged.id}.json", forged.to_dict())
    planted = set(os.listdir(outside))
    import remediate.actions.training as training

    real_host = training.this_host

    def swap_then_host() -> str:
        # Runs after every check and right before the command is written (it names the host in
        # issued_by): the job swaps one of its directories for a symlink out of the root.
        if not (paths.dir / swapped).is_symlink():
            os.rename(paths.dir / swapped, paths.dir / f"{swapped}.real")
            os.symlink(outside, paths.dir / swapped)
        return real_host()

    monkeypatch.setattr(training, "this_host", swap_then_host)
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:  # the step withdraws its command at expiry: watch what appears meanwhile
        while not done.is_set():
            seen.update(os.listdir(outside))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with pytest.raises(ActionError, match="no acknowledgement"):
            action.execute(action.validate({"timeout": 0.5}), ctx)
    finally:
        done.set()
        watcher.join()
    assert seen == planted and set(os.listdir(outside)) == planted
    job.control.close()


def test_a_swapped_inbox_never_makes_the_withdrawal_unlink_outside_the_root(root: Path, tmp_path: Path) -> None:
    job = LiveJob(root, "trainer-0").register()  # not polling: the command is withdrawn at its expiry
    paths = JobPaths(root, "trainer-0")
    outside = tmp_path / "outside"
    outside.mkdir()
    action = TrainingCheckpointAction(root, LABELS)
    ctx = ctx_for({"pod": "trainer-0"})
    decoy = outside / f"{action.command_id(ctx)}.json"
    decoy.write_text("{}")

    def swap_once_sent() -> None:
        deadline = time.monotonic() + scaled(5)
        while not os.listdir(paths.inbox) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.rename(paths.inbox, paths.dir / "inbox.real")
        os.symlink(outside, paths.inbox)

    swapper = threading.Thread(target=swap_once_sent)
    swapper.start()
    with pytest.raises(ActionError, match="withdrawn"):
        action.execute(action.validate({"timeout": 1.0}), ctx)
    swapper.join()
    assert decoy.exists(), "the withdrawal unlinked a file outside the root"
    assert os.listdir(paths.dir / "inbox.real") == []  # the real command was withdrawn
    job.control.close()


# --------------------------------------------------------------------------- finding 12: target labels


def test_the_job_registers_its_pod_and_namespace_and_expect_pod_must_match(root: Path, processes: Jobs) -> None:
    job = processes.start("j1", env={"POD_NAME": "trainer-7f9c-0", "POD_NAMESPACE": "ml"})
    registration = JobPaths(root, "j1").read_registration()
    assert (registration.pod, registration.namespace) == ("trainer-7f9c-0", "ml")
    action = TrainingScaleLrAction(root, LABELS)
    labels = {"training_job": "j1", "pod": "impostor-0", "namespace": "ml"}
    params = action.validate({"factor": 0.5, "timeout": 5, "expect_pod": "impostor-0", "expect_namespace": "ml"})
    plan = action.plan(params, ctx_for(labels))
    assert plan["can_act"] is False and "expect_pod is 'impostor-0'" in plan["why_not"]
    with pytest.raises(ActionError, match=r"registered pod 'trainer-7f9c-0'.*nothing was sent"):
        action.execute(params, ctx_for(labels))
    assert os.listdir(JobPaths(root, "j1").inbox) == []
    params = action.validate({"factor": 0.5, "timeout": 5, "expect_pod": "trainer-7f9c-0", "expect_namespace": "ml"})
    assert action.execute(params, ctx_for(labels))["applied_by_pid"] == job.pid
    wrong_namespace = action.validate({"factor": 0.5, "expect_namespace": "prod"})
    with pytest.raises(ActionError, match="expect_namespace is 'prod' but the job registered namespace 'ml'"):
        action.execute(wrong_namespace, ctx_for(labels, run_id=2))


# --------------------------------------------------------------------------- identity


def test_the_plan_and_the_result_name_the_process_as_the_kernel_sees_it_not_as_job_json_says(
    root: Path, processes: Jobs
) -> None:
    """job.json is self-asserted in a world-writable root: what the agent can check itself (the pid's uid,
    cgroup and pod UID from /proc) is recorded with the step, so the history says which container answered."""
    job = processes.start("job-a")
    paths = JobPaths(root, "job-a")
    forged = read_json(paths.registration) | {"pod": "someone-else", "namespace": "prod"}  # what the job claims
    atomic_write_json(paths.registration, forged, tmp_dir=paths.tmp)
    action = TrainingCheckpointAction(root, LABELS)
    ctx = ctx_for({"pod": "job-a"}, seconds=30)

    plan = action.plan(action.validate({}), ctx)
    result = action.execute(action.validate({"timeout": 10}), ctx)

    actual = Path(f"/proc/{job.pid}/cgroup").read_text().strip()
    expected = {"pid": job.pid, "uid": os.stat(f"/proc/{job.pid}").st_uid, "cgroup": actual, "pod_uid": None}
    assert plan["process"] == expected and result["process"] == expected
    assert plan["pod"] == "someone-else"  # the claim is shown as a claim; the kernel's account beside it


@pytest.mark.parametrize(
    ("cgroup", "uid"),
    [
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c2a3b_4d5e_6f70_8192_a3b4c5d6e7f8"
            ".slice/cri-containerd-0123abcd.scope",
            "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8",
        ),
        (
            "12:memory:/kubepods/besteffort/pod6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8/0123abcd",
            "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8",
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope", None),
        ("0::/", None),
    ],
)
def test_the_pod_uid_is_read_from_kubelets_cgroup_paths(cgroup: str, uid: str | None) -> None:
    from remediate.training.procfs import pod_uid_of

    assert pod_uid_of(cgroup) == uid
