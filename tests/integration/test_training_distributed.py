"""Multi-rank: a real 2-process gloo group on the CPU; rank 0 reads the inbox, every rank applies at the same step.

The two ranks (tests/support/jobs/ddp_worker.py, spawned with torch.multiprocessing) train a
DistributedDataParallel model; this process plays remediate: it runs the real
`training.rollback` and `training.scale_lr` actions against the job's control directory,
exactly as the executor would, and then checks what each rank recorded.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediate.actions.base import StepContext
from remediate.actions.training import TrainingRollbackAction, TrainingScaleLrAction
from remediate.intake.alerts import alert_ref
from remediate.training import ControlOptions, JobNameInUse, TrainingControl
from remediate.training.files import JobPaths
from remediate.training.protocol import ProtocolError
from tests.support.realsystems import free_port
from tests.support.training import require
from tests.support.waiting import scaled, wait_until

torch = require("torch")
LABELS = ("training_job", "pod")


def _ctx(step_index: int) -> StepContext:
    # startsAt is now: the checkpoints the job saved so far were saved before the alert (rollback's saved_before).
    starts_at = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    alert = {"labels": {"training_job": "ddp-job"}, "fingerprint": "ddp", "startsAt": starts_at}
    return StepContext(run_id=7, step_index=step_index, playbook="loss-spike", target="node", alert=alert_ref(alert),
                       deadline=time.monotonic() + 30)  # fmt: skip


def _registered_step(root: Path) -> int:
    try:
        return JobPaths(root, "ddp-job").read_registration().last_step or 0
    except (FileNotFoundError, ProtocolError):
        return 0


def test_two_gloo_ranks_apply_rollback_and_scale_lr_at_the_same_step(tmp_path: Path) -> None:
    from tests.support.jobs import ddp_worker

    root, checkpoints, out = tmp_path / "control", tmp_path / "ckpt", tmp_path / "out"
    for path in (root, checkpoints, out):
        path.mkdir()
    context = torch.multiprocessing.start_processes(
        ddp_worker.run,
        args=(str(root), str(checkpoints), free_port(), str(out)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    try:
        wait_until(lambda: _registered_step(root) >= 22, 60, interval=0.05, message="the job never reached step 22")
        rollback, scale = TrainingRollbackAction(root, LABELS), TrainingScaleLrAction(root, LABELS)
        # 400 batches to skip (~2 s): the lr cut arrives while both ranks skip, and is applied there.
        params = rollback.validate({"checkpoint": "latest_good", "min_steps_back": 10, "skip_batches": 400})
        plan = rollback.plan(params, _ctx(0))
        assert plan["world_size"] == 2 and plan["alive"] is True
        # The name is held by rank 0 for the job's life: another process cannot register it meanwhile.
        with pytest.raises(JobNameInUse, match=f"process {plan['pid']} on host"):
            TrainingControl("ddp-job", root=root, options=ControlOptions(wake_signal=None)).register()
        assert JobPaths(root, "ddp-job").read_registration().pid == plan["pid"]
        assert plan["checkpoint"] is not None
        rolled = rollback.execute(params, _ctx(0))
        scaled = scale.execute(scale.validate({"factor": 0.5, "min_lr": 0.001}), _ctx(1))
        while not context.join(timeout=30):
            pass
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]

    # The acknowledgements (what the step results record) speak for both ranks.
    assert rolled["status"] == "applied" and rolled["acknowledged_by"]["world_size"] == 2
    assert rolled["step_after"] == rolled["checkpoint"]["step"] <= rolled["step_before"] - 10
    assert rolled["batches_skipped"] == 400
    assert scaled["lr_before"] == [0.05] and scaled["lr_after"] == [0.025]
    assert [a["status"] for a in ranks[0]["acks"]] == ["applied", "applied"]
    assert plan["pid"] == ranks[0]["pid"]  # the planned process is the one that acknowledged, and says so
    assert {(a["pid"], a["host"]) for a in ranks[0]["acks"]} == {(ranks[0]["pid"], rolled["acknowledged_by"]["host"])}
    assert ranks[1]["acks"] == []  # only rank 0 writes acknowledgements

    # Every rank applied each command at the same iteration and ended in the same state.
    first, second = ranks[0]["events"], ranks[1]["events"]
    assert len(first) == len(second) == 2
    for a, b in zip(first, second, strict=True):
        for key in ("iteration", "step_before", "step_after", "weight", "lr_after", "base_lrs"):
            assert a[key] == b[key], key
    assert first[0]["step_after"] == rolled["step_after"] and first[0]["step_before"] == rolled["step_before"]
    assert first[1]["lr_after"] == 0.025 and first[1]["base_lrs"] == [0.025]
    assert first[1].get("while_skipping") is True and second[1].get("while_skipping") is True
    assert scaled["acknowledged_after_s"] < 2
    assert ranks[0]["batches_skipped"] == ranks[1]["batches_skipped"] > 0
    assert ranks[0]["final_weight"] == ranks[1]["final_weight"]


def test_a_job_where_only_rank_0_polls_fails_loudly_saying_every_rank_must_poll(tmp_path: Path) -> None:
    """Only rank 0 polled; the job crashed with a bare gloo "connection reset"."""
    from tests.support.jobs import ddp_worker

    root, out = tmp_path / "control", tmp_path / "out"
    for path in (root, out):
        path.mkdir()
    context = torch.multiprocessing.start_processes(
        ddp_worker.run_only_rank0_polls, args=(str(root), free_port(), str(out)), nprocs=2, join=False,
        start_method="spawn",
    )  # fmt: skip
    try:
        wait_until(lambda: (out / "rank0.txt").exists(), 60, interval=0.1, message="rank 0 never stopped polling")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    outcome = (out / "rank0.txt").read_text()
    assert outcome.startswith("RanksOutOfStep: remediate.training: the broadcast that poll() runs on every rank "
                              "failed on rank 0 of 2: every rank must call poll()"), outcome  # fmt: skip


def test_no_rank_waits_at_an_exchange_and_a_command_claimed_before_close_goes_back_to_the_inbox(
    tmp_path: Path,
) -> None:
    """Each poll was a blocking broadcast: every rank waited there for the slowest (1.28 ms a step with 2 gloo
    ranks, 29% of the step). Now rank 0's announcement is non-blocking and read at the next poll: a rank waits
    only there, and only for an announcement rank 0 has not sent yet."""
    from tests.support.jobs import ddp_worker

    root, out, late = tmp_path / "control", tmp_path / "out", scaled(2.0)
    for path in (root, out):
        path.mkdir()
    context = torch.multiprocessing.start_processes(
        ddp_worker.run_exchanges, args=(str(root), free_port(), str(out), late), nprocs=2, join=False,
        start_method="spawn",
    )  # fmt: skip
    try:
        while not context.join(timeout=scaled(60)):
            pass
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    poll2, poll3 = ranks[1]["durations"]
    assert poll2 < late / 4, ranks[1]  # rank 0 was late: rank 1's exchange at poll 2 did not wait for it
    assert poll3 > late / 2, ranks[1]  # ... its read of rank 0's poll-2 announcement, at poll 3, did
    # Claimed at the last exchange, never applied: back in the inbox (remediate withdraws it at its expiry,
    # "never applied"), neither taken, nor acknowledged, nor recorded as applied.
    paths, sent = JobPaths(root, "exchange-job"), ranks[0]["sent"]
    assert os.listdir(paths.inbox) == [f"{sent}.json"]
    assert os.listdir(paths.taken) == [] and os.listdir(paths.outbox) == []
    assert sent not in (paths.applied.read_text() if paths.applied.exists() else "")
