"""slurm.requeue against a real slurmctld and slurmd (tests/support/slurm.py) with real sbatch jobs: the jobs on
a node remediate drained go back to the queue, a job that cannot be requeued is named and keeps running, a
retry requeues nothing twice, and a node remediate did not drain is left alone. A job that asks for a signal
(its comment, or the step's param) gets it, through scancel, and keeps running, not requeued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediate.breaker import BreakerLimits, memory_breaker
from tests.support.slurm import SlurmCluster, slurm_actions, step_context, trap_script
from tests.support.waiting import wait_until


@pytest.fixture
def actions(slurm: SlurmCluster) -> dict[str, Any]:
    return slurm_actions(slurm)


def running(slurm: SlurmCluster, *jobs: int) -> None:
    wait_until(lambda: all(slurm.job_state(job) == "RUNNING" for job in jobs), 20, interval=0.2,
               message=f"jobs {jobs} running")  # fmt: skip


def test_requeue_sends_the_requeueable_jobs_back_and_names_the_others(
    slurm: SlurmCluster, actions: dict[str, Any]
) -> None:
    again, kept = slurm.sbatch(slurm.host, requeue=True), slurm.sbatch(slurm.host, requeue=False)
    running(slurm, again, kept)
    ctx = step_context(slurm.host, breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10)))
    actions["slurm.drain"].execute({}, ctx)

    plan = actions["slurm.requeue"].plan({}, ctx)
    json.dumps(plan)
    assert plan["would"] == f"requeue jobs {again}" and [j["job_id"] for j in plan["left_running"]] == [kept]
    assert slurm.job_state(again) == "RUNNING"  # the plan changed nothing

    result = actions["slurm.requeue"].execute({}, ctx)
    assert result["outcome"] == "requeued" and [j["job_id"] for j in result["requeued"]] == [again]
    (left,) = result["left_running"]
    assert left["job_id"] == kept and "does not allow requeueing" in left["why"]
    wait_until(lambda: slurm.job_state(again) == "PENDING", 20, message=f"job {again} back in the queue")
    assert slurm.job_state(kept) == "RUNNING"
    assert slurm.run("squeue", "-h", "-j", str(again), "-o", "%r").stdout.strip() == "BeginTime"  # queued again

    retry = actions["slurm.requeue"].execute({}, ctx)
    assert retry["requeued"] == [] and [j["job_id"] for j in retry["left_running"]] == [kept]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def test_a_job_asking_for_a_signal_in_its_comment_gets_it_and_keeps_running(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    seen = tmp_path / "usr1"
    lightning = slurm.sbatch(slurm.host, requeue=True, comment="exp42 remediate-signal=USR1",
                             script=trap_script("USR1", seen))  # fmt: skip
    plain = slurm.sbatch(slurm.host, requeue=True)
    running(slurm, lightning, plain)
    commands: list[str] = []
    actions = slurm_actions(slurm, cache=slurm.node_cache(on_command=commands.append))
    ctx = step_context(slurm.host, breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10)))
    actions["slurm.drain"].execute({}, ctx)

    plan = actions["slurm.requeue"].plan({}, ctx)
    assert plan["would"] == f"requeue jobs {plain}; signal job {lightning} (USR1)"
    (would,) = plan["would_signal"]
    assert (would["job_id"], would["signal"], would["asked_by"]) == (lightning, "USR1", "the job's comment")
    assert [j["job_id"] for j in plan["would_requeue"]] == [plain] and lines(seen) == []  # the plan sent nothing

    commands.clear()
    result = actions["slurm.requeue"].execute({}, ctx)
    assert commands.count("scancel") == 1 and [j["job_id"] for j in result["requeued"]] == [plain]
    assert [(j["job_id"], j["signal"]) for j in result["signalled"]] == [(lightning, "USR1")]
    wait_until(lambda: lines(seen) == ["USR1"], 20, interval=0.2, message="the job's USR1 trap ran")
    wait_until(lambda: slurm.job_state(plain) == "PENDING", 20, message=f"job {plain} back in the queue")
    assert slurm.job_state(lightning) == "RUNNING"  # signalled, not requeued: what it does next is its own
    assert slurm.run("squeue", "-h", "-j", str(lightning), "-o", "%r").stdout.strip() == "None"

    commands.clear()  # a retry of the same run does not signal the job twice
    retry = actions["slurm.requeue"].execute({}, ctx)
    assert "scancel" not in commands and retry["signalled"] == [] and retry["requeued"] == []
    assert [j["job_id"] for j in retry["already_signalled"]] == [lightning]

    later = actions["slurm.requeue"].execute({}, step_context(slurm.host, run_id=43, memory=ctx.memory))
    assert [j["job_id"] for j in later["signalled"]] == [lightning]  # another run asks it again
    wait_until(lambda: lines(seen) == ["USR1", "USR1"], 20, interval=0.2, message="the second USR1 trap ran")
    assert slurm.job_state(lightning) == "RUNNING"


def test_a_job_that_requeues_itself_on_its_signal_goes_back_to_the_queue_by_its_own_hand(
    slurm: SlurmCluster, actions: dict[str, Any]
) -> None:
    # What Lightning's auto-requeue does on USR1 once its checkpoint is saved.
    script = "trap 'scontrol requeue $SLURM_JOB_ID' USR1; while true; do sleep 1 & wait $!; done"
    job = slurm.sbatch(slurm.host, requeue=True, comment="remediate-signal=USR1", script=script)
    running(slurm, job)
    ctx = step_context(slurm.host, breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10)))
    actions["slurm.drain"].execute({}, ctx)

    result = actions["slurm.requeue"].execute({}, ctx)
    assert [j["job_id"] for j in result["signalled"]] == [job] and result["requeued"] == []
    wait_until(lambda: slurm.job_state(job) == "PENDING", 20, message=f"job {job} requeued by its own trap")
    assert slurm.run("squeue", "-h", "-j", str(job), "-o", "%r").stdout.strip() == "BeginTime"
    (read,) = [entry for entry in json.loads(slurm.run("squeue", "--json").stdout)["jobs"] if entry["job_id"] == job]
    assert read["restart_cnt"] == 1  # one requeue, its own: remediate sent none

    retry = actions["slurm.requeue"].execute({}, step_context(slurm.host, run_id=43, memory=ctx.memory))
    assert retry["signalled"] == [] and retry["requeued"] == []  # pending, no longer on the node


def test_the_steps_signal_goes_to_requeueable_jobs_unless_their_comment_opts_out(
    slurm: SlurmCluster, actions: dict[str, Any], tmp_path: Path
) -> None:
    seen = tmp_path / "usr2"
    submitit = slurm.sbatch(slurm.host, requeue=True, script=trap_script("USR2", seen))
    opted_out = slurm.sbatch(slurm.host, requeue=True, comment="remediate-signal=none")
    running(slurm, submitit, opted_out)
    ctx = step_context(slurm.host, breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10)))
    actions["slurm.drain"].execute({}, ctx)

    result = actions["slurm.requeue"].execute({"signal": "USR2"}, ctx)
    assert [(j["job_id"], j["asked_by"]) for j in result["signalled"]] == [(submitit, "the step's signal param")]
    assert [j["job_id"] for j in result["requeued"]] == [opted_out]
    wait_until(lambda: lines(seen) == ["USR2"], 20, interval=0.2, message="the job's USR2 trap ran")
    wait_until(lambda: slurm.job_state(opted_out) == "PENDING", 20, message=f"job {opted_out} back in the queue")
    assert slurm.job_state(submitit) == "RUNNING"


def test_requeue_leaves_a_node_remediate_did_not_drain_alone(slurm: SlurmCluster, actions: dict[str, Any]) -> None:
    job = slurm.sbatch(slurm.host, requeue=True)
    running(slurm, job)
    ctx = step_context(slurm.host)
    plan = actions["slurm.requeue"].plan({}, ctx)
    assert plan["can_act"] is False and "not drained by remediate" in plan["why_not"]
    slurm.drain_by_hand(slurm.host, "maintenance at 18:00")
    result = actions["slurm.requeue"].execute({}, ctx)
    assert result["outcome"] == "left_alone" and "maintenance at 18:00" in result["reason"]
    assert slurm.job_state(job) == "RUNNING"
