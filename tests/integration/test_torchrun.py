"""Rollback, lr cuts and checkpoints with the real launcher: `torchrun --nproc_per_node 2 --standalone`, gloo, CPU.

The job is tests/support/jobs/torchrun_job.py, written like docs/training-protocol.md's torchrun
example; this process plays remediate and runs the real `training.rollback` / `training.scale_lr`
actions against the job's control directory with a StepContext, as the executor would. Each rank
records what it applied (step, lr, weights checksum) in <out>/rank<r>.jsonl, so the checks compare
the two ranks with each other and with what the acknowledgement and the plan say.

About 35 s on 2 cores, most of it four torchrun launches (each rank imports torch).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.actions.training import TrainingRollbackAction, TrainingScaleLrAction
from remediate.actions.training_command import TrainingCommandAction
from remediate.intake.alerts import alert_ref
from remediate.training.files import JobPaths
from remediate.training.procfs import this_host
from remediate.training.protocol import RESTART_EXIT_CODE
from tests.support.processes import job_starter
from tests.support.torchrun import Torchrun
from tests.support.training import require
from tests.support.waiting import scaled, wait_until

require("torch")

JOB = "tr-job"
LABELS = ("training_job", "pod")


@pytest.fixture
def torchrun(tmp_path: Path, root: Path) -> Iterator[Callable[..., Torchrun]]:
    yield from job_starter(Torchrun, tmp_path, root)


def _ctx(run_id: int, step_index: int, starts_at: float | None = None) -> StepContext:
    started = datetime.fromtimestamp(time.time() if starts_at is None else starts_at, UTC)
    alert = alert_ref({"labels": {"training_job": JOB}, "fingerprint": f"tr{run_id}",
                       "startsAt": started.isoformat(timespec="microseconds").replace("+00:00", "Z")})  # fmt: skip
    return StepContext(run_id=run_id, step_index=step_index, playbook="loss-spike", target="node", alert=alert,
                       deadline=time.monotonic() + 30)  # fmt: skip


def _both_ranks(job: Torchrun, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return job.events(0, name), job.events(1, name)


def test_finding1_a_second_torchrun_job_cannot_take_the_name_and_the_ack_names_rank0s_pid(
    torchrun: Any, root: Path
) -> None:
    first = torchrun("first", "--stop-after", "1")
    (registered,) = first.wait_for(0, "registered")
    assert registered["world_size"] == 2
    pid = registered["pid"]
    first.wait_for(0, "checkpoint")  # polling: its job.json is fresh

    # The same torchrun command again, same name, same control root: rank 0's register() must refuse.
    second = torchrun("second", "--stop-after", "1")
    wait_until(lambda: second.proc.poll() is not None or second.events(0, "registered"), 40, interval=0.05,
               message="the second torchrun job neither registered nor stopped")  # fmt: skip
    assert not second.events(0, "registered"), "a second live job registered the name another job holds"
    assert second.proc.wait(scaled(30)) != 0
    output = second.text()
    assert "JobNameInUse" in output and f"process {pid} on host {this_host()}" in output, output[-3000:]
    assert JobPaths(root, JOB).read_registration().pid == pid  # job.json left alone

    scale = TrainingScaleLrAction(root, LABELS)
    params = scale.validate({"factor": 0.5, "min_lr": 0.001, "timeout": 10})
    plan = scale.plan(params, _ctx(1, 0))
    assert plan["pid"] == pid and plan["world_size"] == 2 and plan["alive"] is True
    scaled_lr = scale.execute(params, _ctx(1, 0))
    first.finish()

    # The acknowledgement names the process that applied it: rank 0, the pid the plan saw.
    ack = json.loads(JobPaths(root, JOB).ack(scaled_lr["command_id"]).read_text())
    assert (ack.get("pid"), ack.get("host")) == (plan["pid"], this_host())
    assert ack["job"]["rank"] == 0 and ack["job"]["world_size"] == 2
    assert scaled_lr["status"] == "applied" and scaled_lr["applied_by_pid"] == pid
    assert scaled_lr["lr_before"] == [0.05] and scaled_lr["lr_after"] == [0.025]
    zero, one = _both_ranks(first, "applied")
    assert [e["lr"] for e in zero] == [e["lr"] for e in one] == [0.025]
    assert zero[0]["iteration"] == one[0]["iteration"]


def test_finding2_rollback_never_restores_the_spike_checkpoint_and_both_ranks_end_equal(
    torchrun: Any, root: Path
) -> None:
    # Losses ~2, then bad data from batch 30 (a checkpoint step): loss ~133 there; the model then fits the
    # bad data, so the checkpoints after it look fine again (loss ~2-4) with far-off weights.
    job = torchrun("spike", "--spike-at", "30", "--stop-after", "1")
    saved = {e["step"]: e for e in job.wait_for(0, "checkpoint", count=12)}  # up to step 60
    assert saved[30]["loss"] > 100 and all(saved[s]["loss"] < 4 for s in (5, 10, 15, 20, 25)), saved
    # The alert started just before the spike checkpoint was saved.
    starts_at = (saved[25]["saved_at"] + saved[30]["saved_at"]) / 2
    after_alert = [s for s in saved if s >= 30]

    rollback = TrainingRollbackAction(root, LABELS)
    params = rollback.validate({"checkpoint": "latest_good", "min_steps_back": 10, "skip_batches": 0})
    rolled = rollback.execute(params, _ctx(2, 0, starts_at))
    job.finish()

    assert rolled["status"] == "applied"
    assert rolled["checkpoint"]["step"] == 25, rolled["detail"]
    zero, one = _both_ranks(job, "applied")
    assert len(zero) == len(one) == 1 and zero[0]["step_after"] == one[0]["step_after"] == 25
    # Both ranks hold the weights of the checkpoint saved before the spike, bit for bit.
    assert zero[0]["checksum"] == one[0]["checksum"] == saved[25]["checksum"]
    assert all(abs(zero[0]["checksum"] - saved[s]["checksum"]) > 0.5 for s in after_alert), saved
    finals = _both_ranks(job, "final")
    assert finals[0][0]["checksum"] == finals[1][0]["checksum"]

    # The spike checkpoint was not marked good even without good_loss_below (the relative default), while
    # the later ones that fit the bad data were: only saved_before kept them out.
    assert saved[30]["good"] is False
    assert [s for s in after_alert if saved[s]["good"]], saved


def test_finding3_an_lr_cut_during_a_slow_skip_is_acknowledged_and_applied_on_both_ranks(
    torchrun: Any, root: Path
) -> None:
    # 0.25 s per batch, skipped or not; the rollback skips 40 batches (10 s).
    job = torchrun("slow", "--batch-seconds", "0.25", "--checkpoint-every", "2", "--stop-after", "2", "--linger", "3")
    job.wait_for(0, "checkpoint", count=3)
    rollback, scale = TrainingRollbackAction(root, LABELS), TrainingScaleLrAction(root, LABELS)
    rolled = rollback.execute(
        rollback.validate({"checkpoint": "latest_good", "min_steps_back": 2, "skip_batches": 40}), _ctx(3, 0)
    )
    assert rolled["status"] == "applied" and rolled["batches_skipped"] == 40
    scaled = scale.execute(scale.validate({"factor": 0.5, "min_lr": 0.001, "timeout": 8}), _ctx(3, 1))
    assert scaled["status"] == "applied" and scaled["lr_after"] == [0.025]
    assert scaled["acknowledged_after_s"] < 2, scaled  # a batch or two, not the 10 s skip
    job.finish()

    zero, one = _both_ranks(job, "applied")
    assert [(e["iteration"], e["lr"], e["while_skipping"]) for e in zero] == [
        (e["iteration"], e["lr"], e["while_skipping"]) for e in one
    ]
    assert [e["lr"] for e in zero] == [0.05, 0.025] and zero[1]["while_skipping"] is True
    finals = _both_ranks(job, "final")
    assert finals[0][0]["lr"] == finals[1][0]["lr"] == 0.025
    assert finals[0][0]["skipped"] == finals[1][0]["skipped"] > 0


def test_a_restart_checkpoints_every_rank_exits_75_and_torchrun_resumes_both_ranks_equal(
    torchrun: Any, root: Path
) -> None:
    # The fail-slow ladder's last library step: `restart` saves a checkpoint, every rank exits with
    # status 75 after the acknowledgement, and `torchrun --max-restarts 1` starts the job again; each
    # rank resumes the checkpoint the command saved (ckpts.resume()) and both end with equal weights.
    job = torchrun("restart", "--checkpoint-every", "5", "--after-restart", "15", max_restarts=1)
    job.wait_for(0, "checkpoint", count=2)
    (first,) = job.events(0, "registered")
    action = TrainingCommandAction(root, LABELS)
    params = action.validate({"command": "restart", "timeout": 20})
    assert action.plan(params, _ctx(1, 0))["can_act"] is True
    done = action.execute(params, _ctx(1, 0))
    assert done["status"] == "applied" and done["applied_by_pid"] == first["pid"], done
    saved = done["checkpoint"]["step"]
    assert done["exit_code"] == RESTART_EXIT_CODE == 75

    zero = job.wait_for(0, "resumed", timeout=60)
    one = job.wait_for(1, "resumed", timeout=60)
    assert zero[0]["restarts"] == one[0]["restarts"] == 1
    assert zero[0]["step"] == one[0]["step"] == saved
    assert zero[0]["checksum"] == one[0]["checksum"]
    job.finish(60)
    end0, end1 = job.events(0, "final"), job.events(1, "final")
    assert len(end0) == len(end1) == 1, "the first run's ranks must exit at the restart, not finish"
    assert end0[0]["step"] == end1[0]["step"] == saved + 15
    assert end0[0]["checksum"] == end1[0]["checksum"]
    assert job.events(0, "registered")[0]["pid"] == first["pid"]
    assert len(job.events(0, "registered")) == len(job.events(1, "registered")) == 2
