"""slurm.requeue against a real slurmctld and slurmd (tests/support/slurm.py) with real sbatch jobs: the jobs on
a node remediate drained go back to the queue, a job that cannot be requeued is named and keeps running, a
retry requeues nothing twice, and a node remediate did not drain is left alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from remediate.breaker import BreakerLimits, memory_breaker
from tests.support.slurm import SlurmCluster, slurm_actions, step_context
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
