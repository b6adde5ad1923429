"""End to end on a real Slurm cluster: a straggling rank of a real training job climbs the shipped fail-slow ladder
to rung 2, as a Slurm site runs it (`schedulers: slurm`: drain, checkpoint, requeue; no k8s.* step, no exit-75
restart).

The parts are real: a requeueable `sbatch` job on the real slurmctld and slurmd of tests/support/slurm.py, whose
batch script runs `torchrun --nproc_per_node 2` of tests/support/jobs/torchrun_job.py (gloo, CPU; each rank exports
StepMetrics, its `node` label from Slurm's SLURMD_NODENAME); Prometheus scraping both ranks and evaluating the
shipped TrainingStragglerRank; AlertManager; `remediate serve` with REMEDIATE_SCHEDULERS=slurm and the shipped
training-fail-slow playbook, which runs the `training.command checkpoint` itself (the job registered on this host,
the server's node_name: a site runs it on the node's agent). Only the times shrink (tests/support/failslow.py).

What one host can and cannot show. The cluster has one slurmd (this host's node); its other nodes (gpu-01 ...)
share that slurmd, which launches their jobs too. So Slurm's own decisions are real: the drained node does not take
the requeued job (Slurm allocates it gpu-01, where the first start went to this host), and the job runs again,
from the checkpoint. But it runs on the same machine: its processes' SLURMD_NODENAME is still this host's name
(so are its step metrics' `node` label), and "slow" is the job's emulation of a slow GPU: rank 1 steps slower while
the job's allocation (SLURM_JOB_NODELIST) is this host. And the one slurmd keeps a gpu-01 job only until it next
registers with slurmctld: slurmctld then finds a job it placed on gpu-01 running on this host's node and has it
killed (SIGKILL, "job 1 abort"), while squeue still shows it RUNNING on gpu-01 (its completion came from the wrong
node). That is when the drained node is resumed, right after the test's last check (the cluster's SlurmdTimeout=0
spares it slurmctld's pings, which would ask every 100 s; tests/support/slurm.py). The test cancels the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.failslow import PLAYBOOK, alerting, fast_failslow_playbook, finished_at, finished_runs
from tests.support.realsystems import AlertManager, Prometheus, WebhookRecorder, parse_timestamp
from tests.support.server import RemediateServer
from tests.support.slurm import SlurmCluster
from tests.support.training import require
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

require("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "jobs" / "torchrun_job.py"
JOB = "llm-slurm-straggler"
SLOW_RANK = 1
SLOW_AFTER = 6.0
"""Seconds of even steps before rank 1 slows (a Prometheus baseline: both ranks scraped first)."""


@dataclass
class BatchJob:
    """The sbatch job: torchrun of torchrun_job.py with 2 ranks, and what its ranks recorded (every start of it
    appends to the same files)."""

    slurm: SlurmCluster
    out: Path
    id: int = 0

    @property
    def stop_file(self) -> Path:
        return self.out / "stop"

    def submit(self, control_root: Path, ports: list[int]) -> None:
        self.out.mkdir()
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                "--max-restarts", "0", str(SCRIPT), "--root", str(control_root), "--job", JOB,
                "--checkpoints", str(self.out / "ckpt"), "--out", str(self.out),
                "--metrics-ports", ",".join(map(str, ports)), "--slow-node", self.slurm.host,
                "--slow-rank", str(SLOW_RANK), "--slow-seconds", "0.1", "--slow-after", str(SLOW_AFTER),
                "--batch-seconds", "0.05", "--checkpoint-every", "1000000", "--max-iterations", "1000000",
                "--stop-file", str(self.stop_file)]  # fmt: skip
        # Only the checkpoint the playbook asks for (no periodic one): the restart must start from that one.
        script = self.out / "job.sh"
        script.write_text(f"#!/bin/sh\nexec {shlex.join(argv)}\n", encoding="utf-8")
        script.chmod(0o755)
        env = {**self.slurm.env(), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # fmt: skip
        # No --nodelist: where it runs (and runs again) is Slurm's choice among the `train` partition's nodes.
        done = self.slurm.run_with(env, "sbatch", "--parsable", "--partition=train", "--requeue",
                                   f"--job-name={JOB}", "--ntasks=1", "--cpus-per-task=2", "--mem=100",
                                   f"--output={self.out}/slurm-%j.out", f"--chdir={ROOT}", str(script))  # fmt: skip
        self.id = int(done.stdout.strip().split(";")[0])

    def field(self, name: str) -> str:
        return self.slurm.job_field(self.id, name)

    def state(self) -> str:
        return self.slurm.job_state(self.id)

    def events(self, rank: int, name: str, requeues: int | None = None) -> list[dict[str, Any]]:
        path = self.out / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        found = [e for e in (json.loads(line) for line in lines if line.endswith("}")) if e["event"] == name]
        return [e for e in found if requeues is None or e.get("requeues") == requeues]

    def wait_for(self, rank: int, name: str, *, requeues: int | None = None, timeout: float) -> dict[str, Any]:
        found: list[dict[str, Any]] = wait_until(
            lambda: self.events(rank, name, requeues), timeout, interval=0.1,
            message=f"rank {rank} never recorded {name!r}; the job's output: {self.output()}",
        )  # fmt: skip
        return found[0]

    def stop(self) -> None:
        """Every rank ends (the stop file: at its next step, else SIGKILL to the pids they recorded), then the job
        is cancelled: a job on a gpu-0x node never ends by itself (the `slurm` fixture cancels the others too)."""
        self.stop_file.touch()

        try:
            wait_until(lambda: not self.live_pids(), 30, interval=0.2, message="the ranks never stopped")
        except AssertionError:
            for pid in self.live_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.id:
            self.slurm.run("scancel", str(self.id), check=False)

    def live_pids(self) -> list[int]:
        """The ranks' processes (of every start) still running."""
        pids = [started["pid"] for rank in (0, 1) for started in self.events(rank, "registered")]
        return [pid for pid in pids if Path(f"/proc/{pid}").exists()]

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.out.glob("slurm-*.out"))


@dataclass
class Timeline:
    """Wall-clock times (the ranks' events and remediate's history are wall-clock), shown from the slowdown."""

    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, what: str, at: float | None = None) -> None:
        self.marks.append((what, time.time() if at is None else at))

    def show(self, start: float) -> str:
        return "\n".join(f"  {at - start:7.1f} s  {what}" for what, at in sorted(self.marks, key=lambda m: m[1]))


@dataclass
class Site:
    slurm: SlurmCluster
    prometheus: Prometheus
    server: RemediateServer
    oncall: WebhookRecorder
    job: BatchJob

    def drained(self) -> bool:
        return self.slurm.drained(self.slurm.host)

    def finished_runs(self, count: int) -> list[dict[str, Any]]:
        return finished_runs(self.server, count)


@pytest.fixture
def site(
    slurm: SlurmCluster,
    tmp_path: Path,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> Iterator[Site]:
    fast_failslow_playbook(playbooks_dir, holds_for=("8s", "60s", "120s"))
    control_root = tmp_path / "control"
    control_root.mkdir()
    sink = {"type": "webhook", "url": recorder.url}
    server = RemediateServer(
        tmp_path / "remediate",
        playbooks_dir,
        env={
            **slurm.server_env(),
            "REMEDIATE_SINKS": json.dumps({"oncall": sink, "breakfix": sink}),
            # The job registers on this host, Slurm's node `slurm.host`: the server runs its node steps there.
            "REMEDIATE_NODE_NAME": slurm.host,
            "REMEDIATE_TRAINING_CONTROL_ROOT": str(control_root),
        },
    )
    with alerting(tmp_path, server, start_alertmanager, watch_log, repeat_interval="3s") as (prometheus, ports):
        job = BatchJob(slurm, tmp_path / "job")
        try:
            job.submit(control_root, ports)
            yield Site(slurm, prometheus, server, recorder, job)
        finally:
            job.stop()
            server.stop()


def test_a_straggling_rank_of_a_slurm_job_drains_its_node_the_job_checkpoints_requeues_and_resumes_elsewhere(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm, job, host, timeline = site.slurm, site.job, site.slurm.host, Timeline()
    wait_until(lambda: job.state() == "RUNNING", 30, message=f"the job never ran: {job.field('Reason')}")
    assert job.field("NodeList") == host, "Slurm's first pick among idle nodes is the first in slurm.conf"
    site.prometheus.wait_until_scraping(timeout=60)
    slowed = job.wait_for(SLOW_RANK, "slowed", timeout=60)
    assert slowed["node"] == host and not job.events(0, "slowed")

    # Rung 1: on-call hears the evidence; nothing changes in Slurm.
    (notify,) = site.finished_runs(1)
    assert (notify["rung"], notify["status"], notify["target"]) == (1, "succeeded", host), notify
    labels = site.server.run(notify["run_id"])["alert"]["labels"]
    (alert,) = [a for a in site.prometheus.alerts() if a["labels"]["alertname"] == "TrainingStragglerRank"]
    assert alert["state"] == "firing" and alert["labels"]["node"] == host, alert
    timeline.mark("rule true in Prometheus (pending: ratio > 1.2 over its 10 s window)", parse_timestamp(
        alert["activeAt"]).timestamp())  # fmt: skip
    assert (labels["training_job"], labels["rank"], labels["node"], labels["control_node"]) == (
        JOB, str(SLOW_RANK), host, host
    ), labels  # fmt: skip
    assert not site.drained() and job.state() == "RUNNING"

    # Rung 2 (the alert still fires holds_for later): drain, checkpoint, requeue, tell on-call.
    climbed = site.finished_runs(2)[1]
    assert (climbed["rung"], climbed["status"], climbed["target"]) == (2, "succeeded", host), climbed
    rung2 = site.server.run(climbed["run_id"])
    steps = {s["name"]: s for s in rung2["steps"]}
    assert [(s["action"], s["status"]) for s in rung2["steps"]] == [
        ("slurm.drain", "succeeded"),
        ("training.command", "succeeded"),  # checkpoint (jobs: slurm); the exit-75 restart is left out
        ("slurm.requeue", "succeeded"),
        ("notify", "succeeded"),
    ], rung2["steps"]
    node = slurm.show_node(host)
    assert site.drained() and f"Reason=remediate run {climbed['run_id']}: TrainingStragglerRank" in node, node
    assert f"rank {SLOW_RANK} of {JOB} is slow here" in node, node
    reasons, whole = slurm.reasons(), node.split("Reason=", 1)[1].strip()
    checkpoint = steps["checkpoint"]["result"]
    assert checkpoint["ran_on"] == f"{host} (server)" and checkpoint["status"] == "applied", checkpoint
    saved = checkpoint["checkpoint"]["step"]  # what the job saved when the command reached it
    assert saved > 0 and checkpoint["checkpoint"]["good"], checkpoint
    assert str(job.id) in json.dumps(steps["requeue"]["result"])
    told = site.oncall.wait_for(lambda r: "still straggled" in (r.json or {}).get("message", ""))
    assert "node drained in Slurm, job checkpointed and requeued" in told.json["message"], told.json["message"]
    wait_until(lambda: job.state() == "PENDING", 10, interval=0.2, message="the job was never requeued")
    timeline.mark("job PENDING (requeued; reason BeginTime)")
    assert (job.field("Reason"), job.field("Restarts")) == ("BeginTime", "1")

    # Slurm makes a requeued job eligible ~2 minutes after its requeue; an operator in a hurry brings that forward.
    eligible = job.field("EligibleTime")
    slurm.run("scontrol", "update", f"JobId={job.id}", "StartTime=now")
    wait_until(lambda: job.state() == "RUNNING", 30, interval=0.2, message=f"never ran again: {job.field('Reason')}")
    timeline.mark("job RUNNING again (after StartTime=now)")
    elsewhere = job.field("NodeList")
    assert elsewhere != host and elsewhere in slurm.train, elsewhere  # Slurm kept it off the drained node
    zero, one = (job.wait_for(rank, "resumed", requeues=1, timeout=60) for rank in (0, 1))
    assert zero["allocation"] == elsewhere and zero["checksum"] == one["checksum"]
    assert zero["step"] == one["step"] == saved  # its step counter goes on from the checkpoint, not from 0

    # The alert resolves (the job left the slow node); the undo waits for even step times, then resumes the node.
    undo = site.finished_runs(3)[2]
    alive = f"the restarted ranks' live processes: {job.live_pids()} (see the module's note on one slurmd)"
    assert undo["run"]["phase"] == "resolved" and undo["status"] == "succeeded", f"{undo}; {alive}"
    resolved = site.server.run(undo["run_id"])
    evidence = finished_at(resolved)["job-fast-for-10m"]
    assert evidence >= max(zero["t"], one["t"]) + 10  # 10 s of even steps: the restarted job's own
    assert [(s["name"], s["status"]) for s in resolved["steps"]] == [
        ("job-fast-for-10m", "succeeded"),
        ("resume", "succeeded"),
    ], resolved["steps"]
    assert resolved["steps"][1]["result"]["outcome"] == "resumed"
    assert not site.drained() and f"remediate run {climbed['run_id']}" not in slurm.reasons()
    assert len(site.server.runs(playbook=PLAYBOOK)) == 3  # no rung 3: the job left the slow node

    rung1 = site.server.run(notify["run_id"])
    done = finished_at(rung2)
    timeline.mark("alert received, rung 1: on-call told the evidence", finished_at(rung1)["notify"])
    timeline.mark("rung 2 accepted (still firing)", climbed["time"])
    timeline.mark("node drained (its reason names the run and the rank)", done["slurm-drain"])
    timeline.mark("checkpoint acknowledged by the job", done["checkpoint"])
    timeline.mark("job requeued (scontrol requeue)", done["requeue"])
    timeline.mark(f"both ranks resumed from that checkpoint, on {elsewhere}", max(zero["t"], one["t"]))
    timeline.mark("alert resolved, undo accepted", undo["time"])
    timeline.mark("undo: the job's step times even for 10 s", finished_at(resolved)["job-fast-for-10m"])
    timeline.mark("node resumed", finished_at(resolved)["resume"])
    with capsys.disabled():
        print(f"\nsinfo -R while drained:\n{reasons.rstrip()}\nthe whole reason: {whole}")
        print(f"the checkpoint: {checkpoint['detail']}")
        print(f"Slurm's EligibleTime for the requeued job: {eligible}")
        print("fail-slow on Slurm (seconds after rank 1 slowed; rule window 10 s, for 8 s; holds_for 8 s):")
        print(timeline.show(slowed["t"]))
