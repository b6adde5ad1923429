"""End to end on a real Slurm cluster: real AlertManager 0.25 -> real `remediate serve` (started as a user
starts it, its cluster named by REMEDIATE_SLURM_CONF alone) -> the real slurmctld and slurmd of
tests/support/slurm.py, with a real `sbatch` job on the node. An XID alert drains the node with a reason an
operator reads in `sinfo -R`, its job goes back to the queue, and the alert's resolution resumes the node."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer
from tests.support.slurm import SlurmCluster, xid_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]


def test_an_xid_alert_drains_the_node_requeues_its_job_and_the_resolution_resumes_it(
    slurm: SlurmCluster,
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    playbooks_dir: Path,
) -> None:
    (playbooks_dir / "xid-slurm.yaml").write_text(xid_playbook())
    server = start_server(
        env={
            "REMEDIATE_SCHEDULERS": "slurm",
            "REMEDIATE_SLURM_CONF": str(slurm.conf),
            "REMEDIATE_SLURM_PARTITIONS": "train",
        }
    )
    am = start_alertmanager(server.webhook_url)
    job = slurm.sbatch(slurm.host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    labels = {"alertname": "GPUXidCritical", "severity": "critical", "Hostname": slurm.host, "gpu": "3", "xid": "79"}
    timeline: list[tuple[str, float]] = []
    started = time.monotonic()

    def mark(what: str) -> None:
        timeline.append((what, round(time.monotonic() - started, 2)))

    am.fire(labels, {"summary": f"GPU 3 on {slurm.host}: XID 79 (fallen off the bus)"})
    mark("alert fired (AlertManager)")
    wait_until(lambda: "remediate run" in slurm.show_node(slurm.host), scaled(60), message="never drained")
    mark("node drained")
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded")
    run = server.run(entry["run_id"])
    assert [(s["action"], s["status"]) for s in run["steps"]] == [
        ("slurm.drain", "succeeded"),
        ("slurm.requeue", "succeeded"),
    ]
    reason = f"remediate run {run['id']}: GPUXidCritical GPU 3 (xid 79)"
    shown = slurm.reasons()
    assert reason in shown  # what an operator sees first: `sinfo -R`
    assert "DRAIN" in slurm.show_node(slurm.host)
    wait_until(lambda: slurm.job_state(job) == "PENDING", scaled(30), message="the job was not requeued")
    mark("job requeued (PENDING: its node drained)")

    am.resolve(labels)
    mark("alert resolved (AlertManager)")
    resolved = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="succeeded")
    (resume,) = server.run(resolved["run_id"])["steps"]
    assert (resume["action"], resume["result"]["outcome"]) == ("slurm.resume", "resumed")
    assert "DRAIN" not in slurm.show_node(slurm.host).split("Reason=")[0]
    mark("node resumed")
    # Back in the queue, to run when Slurm schedules it again (a requeued job waits out its BeginTime first).
    assert slurm.job_state(job) in ("PENDING", "RUNNING")
    print("sinfo -R after the drain:", shown.strip())
    print("timeline:", "; ".join(f"{what} +{at:g}s" for what, at in timeline))
