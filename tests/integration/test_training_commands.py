"""training.command end to end inside remediate, with a real job process (tests/support/jobs/batch_job.py).

The shipped gpu-memory-pressure playbook, run by the engine and the executor on a real store, sends
reduce_batch_size; the job (a `Batching` with gradient accumulation) applies it at its next optimizer
step and every optimizer step, before and after, sees the same effective batch. The shipped
training-throughput-drop playbook, against a job that did not declare set_dataloader_workers, is
refused by `remediate dry-run`'s plan and its run fails without writing anything into the job's inbox.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.config.settings import load_settings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import load_playbooks
from remediate.playbooks.model import PlaybookSet
from remediate.rehearsal.dryrun import dry_run
from remediate.store import Store
from remediate.training.files import JobPaths
from tests.conftest import alert_payload, notification_payload
from tests.support.processes import JobProcess, job_starter
from tests.support.store_json import run_json_of
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "jobs" / "batch_job.py"
MEMORY_LABELS = {
    "Hostname": "gpu-node-1",
    "UUID": "GPU-aaaaaaaa-1111-5222-8333-444444444444",
    "gpu": "0",
    "namespace": "ml",
    "severity": "warning",
}


class BatchJob(JobProcess):
    """One batch_job.py process and its EVENT lines."""

    def __init__(self, workdir: Path, root: Path, name: str, *args: str) -> None:
        super().__init__(
            workdir / f"{name}.log", sys.executable, str(SCRIPT), "--root", str(root), "--job", name, *args
        )
        self.pid = self.wait_for("registered")[0]["pid"]


@pytest.fixture
def start(tmp_path: Path, root: Path) -> Iterator[Callable[..., BatchJob]]:
    yield from job_starter(BatchJob, tmp_path, root)


@pytest.fixture
def registry(root: Path) -> ActionRegistry:
    return default_registry(load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)}))


def shipped(registry: ActionRegistry, name: str) -> PlaybookSet:
    return PlaybookSet(p for p in load_playbooks(REPO / "playbooks", registry).playbooks if p.name == name)


def ingest(engine: Engine, alertname: str, labels: dict[str, str]) -> Any:
    alert = alert_payload(alertname, labels=labels)
    result = engine.ingest_body(json.dumps(notification_payload(alert)).encode(), received_at=time.time())
    return result.decisions[0]


def test_the_gpu_memory_pressure_playbook_halves_the_micro_batch_and_the_effective_batch_stays(
    start: Any, registry: ActionRegistry, store: Store
) -> None:
    job = start("llm-train-0", "--micro", "32", "--accumulation", "1")
    wait_until(lambda: len(job.events("step")) >= 5, timeout=10)
    engine = Engine(store=store, playbooks=shipped(registry, "gpu-memory-pressure"), registry=registry)
    executor = Executor(store=store, registry=registry, retry_wait_max=0.01)

    decision = ingest(engine, "GPUMemoryPressure", {**MEMORY_LABELS, "pod": "llm-train-0"})
    assert decision.decision.value == "accepted", decision.reason
    assert executor.drain() == 1
    run = run_json_of(store, decision.run_id)
    assert run["status"] == "succeeded", run["error"]
    (step,) = run["steps"]
    result = step["result"]
    assert result["kind"] == "reduce_batch_size" and result["params"] == {"factor": 0.5}
    assert result["found_by"] == "label pod" and result["applied_by_pid"] == job.pid
    assert (result["micro_batch_size_before"], result["micro_batch_size_after"]) == (32, 16)
    assert (result["accumulation_steps_before"], result["accumulation_steps_after"]) == (1, 2)
    assert result["effective_batch_size_before"] == result["effective_batch_size_after"] == 32

    applied_at = result["step_before"]
    wait_until(lambda: len([s for s in job.events("step") if s["step"] > applied_at]) >= 5, timeout=10)
    steps = job.events("step")
    before = [s for s in steps if s["step"] <= applied_at]
    after = [s for s in steps if s["step"] > applied_at]
    assert {(s["micro"], s["micro_batches"]) for s in before} == {(32, 1)}
    assert {(s["micro"], s["micro_batches"]) for s in after} == {(16, 2)}
    assert {s["samples"] for s in steps} == {32}  # every optimizer step saw the same effective batch
    (ack,) = job.events("ack")
    assert ack["ack"]["status"] == "applied" and ack["ack"]["result"]["micro_batch_size_after"] == 16


def test_an_undeclared_command_is_refused_at_plan_time_and_its_run_sends_nothing(
    start: Any, registry: ActionRegistry, store: Store, root: Path, tmp_path: Path
) -> None:
    job = start("llm-7b")  # no --workers: the job does not declare set_dataloader_workers
    labels = {"training_job": "llm-7b", "instance": "gpu-node-1:8000", "job": "trainer-metrics", "severity": "warning"}
    settings = load_settings(
        env={
            "REMEDIATE_TRAINING_CONTROL_ROOT": str(root),
            "REMEDIATE_PLAYBOOKS": str(REPO / "playbooks"),
            "REMEDIATE_DATABASE_URL": f"sqlite:///{tmp_path / 'absent.db'}",
            "REMEDIATE_NODE_NAME": "gpu-node-1",
        }
    )
    report = dry_run(
        settings, notification_payload(alert_payload("TrainingThroughputDrop", labels=labels)), now=time.time()
    )
    (playbook,) = report["alerts"][0]["playbooks"]
    assert playbook["playbook"] == "training-throughput-drop" and report["would_run"] is False
    (plan_step,) = playbook["steps"]
    plan = plan_step["plan"]
    assert plan["can_act"] is False
    assert plan["why_not"].startswith("training job 'llm-7b' does not declare command 'set_dataloader_workers'")
    assert "reduce_batch_size" in plan["why_not"]  # what it does declare

    engine = Engine(store=store, playbooks=shipped(registry, "training-throughput-drop"), registry=registry)
    decision = ingest(engine, "TrainingThroughputDrop", labels)
    assert Executor(store=store, registry=registry, retry_wait_max=0.01).drain() == 1
    run = run_json_of(store, decision.run_id)
    assert run["status"] == "failed"
    assert "does not declare command 'set_dataloader_workers'" in run["steps"][0]["error"]
    assert run["steps"][0]["error"].endswith("nothing was sent")
    paths = JobPaths(root, "llm-7b")
    assert os.listdir(paths.inbox) == [] and os.listdir(paths.outbox) == [] and os.listdir(paths.taken) == []
    assert job.events("ack") == [] and job.proc.poll() is None
