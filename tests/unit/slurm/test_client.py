"""remediate.slurm.SlurmClient against a real slurmctld (tests/support/slurm.py): what `sinfo --json` says of
the nodes, `scontrol update` and Slurm's refusals as named errors, slurmctld down or hung as SlurmUnavailable,
no cluster without slurm_conf, and the process's environment left as it is."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path

import pytest

from remediate.errors import RetryableActionError
from remediate.slurm import (
    SlurmClient,
    SlurmConfigError,
    SlurmError,
    SlurmJob,
    SlurmNodeNotFound,
    SlurmUnavailable,
    drain_reason,
)
from tests.support.slurm import SlurmCluster
from tests.support.waiting import scaled, wait_until


def test_sinfo_json_gives_every_node_with_its_partitions_features_and_state(slurm: SlurmCluster) -> None:
    nodes = {node.name: node for node in slurm.client().nodes()}
    assert set(nodes) == set(slurm.nodes)
    assert [name for name in slurm.nodes if nodes[name].partitions == ("train",)] == list(slurm.train)
    assert [name for name in slurm.nodes if nodes[name].partitions == ("debug",)] == list(slurm.debug)
    assert nodes["gpu-05"].features == ("gpu",) and nodes["gpu-05"].hostname == "gpu-05"
    assert nodes[slurm.host].state == "idle" and not nodes[slurm.host].drained
    assert nodes[slurm.host].reason == "" and nodes[slurm.host].reason_set_by is None


def test_a_drain_and_a_resume_are_what_sinfo_and_scontrol_show(slurm: SlurmCluster) -> None:
    client = slurm.client()
    reason = drain_reason(7, alertname="GPUXidCritical", gpu="0", note="xid 48")
    client.drain("gpu-02", reason)
    node = client.node("gpu-02")
    assert node.drained and node.reason == reason and node.reason_set_by == "root" and node.drained_by_run == 7
    assert "DRAIN" in node.state_text and f"Reason={reason} [root@" in slurm.show_node("gpu-02")
    client.resume("gpu-02")
    node = client.node("gpu-02")
    assert not node.drained and node.reason == "" and node.drained_by_run is None


def test_a_new_reason_keeps_a_drained_node_drained_and_never_drains_one_in_service(slurm: SlurmCluster) -> None:
    client = slurm.client()
    client.drain("gpu-02", "remediate run 7: GPUXidCritical")
    client.set_reason("gpu-02", "breakfix: XID 79 (from remediate run 7)")
    node = client.node("gpu-02")
    assert node.drained and node.reason == "breakfix: XID 79 (from remediate run 7)"
    assert node.handed_to == ("breakfix", 7) and node.drained_by_run is None and node.held_by_run == 7
    client.set_reason("gpu-03", "breakfix: XID 79 (from remediate run 7)")  # in service: Slurm keeps nothing
    node = client.node("gpu-03")
    assert not node.drained and node.reason == "" and node.handed_to is None
    with pytest.raises(SlurmError, match="would not keep as written"):
        client.set_reason("gpu-02", "breakfix: a\nb")


def test_slurms_refusals_are_named_errors(slurm: SlurmCluster) -> None:
    client = slurm.client()
    with pytest.raises(SlurmNodeNotFound, match="gpu-99"):
        client.node("gpu-99")
    with pytest.raises(SlurmNodeNotFound, match=r"scontrol update NodeName=gpu-99 State=RESUME: .*Invalid node name"):
        client.resume("gpu-99")
    with pytest.raises(SlurmError, match="Invalid node state specified") as caught:
        client.resume("gpu-03")  # not drained
    assert not isinstance(caught.value, RetryableActionError)
    with pytest.raises(SlurmError, match="not a single Slurm node name"):
        client.drain("gpu-[01-04]", "remediate run 1")
    with pytest.raises(SlurmError, match="would not keep as written"):
        client.drain("gpu-03", "remediate run 1\nsecond line")
    assert not any(node.drained for node in client.nodes())


def test_slurmctld_stopped_or_hung_is_unavailable(slurm: SlurmCluster) -> None:
    client = slurm.client(timeout=1.0)
    ctld = slurm.procs["slurmctld"]
    os.kill(ctld.pid, signal.SIGSTOP)  # hung: the command waits, the client's time-out ends it
    try:
        with pytest.raises(SlurmUnavailable, match=r"sinfo --json: no answer within 1 s \(slurm_command_timeout\)"):
            client.nodes()
    finally:
        os.kill(ctld.pid, signal.SIGCONT)
    slurm.stop_controller()
    with pytest.raises(SlurmUnavailable, match="sinfo --json: slurmctld did not answer"):
        slurm.client().nodes()  # sinfo exits 0 here, with an error list and no nodes
    with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
        slurm.client().drain("gpu-01", "remediate run 1")


def test_no_cluster_without_slurm_conf(tmp_path: Path, slurm: SlurmCluster) -> None:
    with pytest.raises(SlurmConfigError, match="set slurm_conf"):
        SlurmClient().nodes()
    with pytest.raises(SlurmConfigError, match="is not a file"):
        SlurmClient(conf=tmp_path / "slurm.conf").nodes()
    with pytest.raises(SlurmConfigError, match=f"no sinfo in {tmp_path}: install slurm-client"):
        SlurmClient(conf=slurm.conf, bin_dir=tmp_path).nodes()


def test_the_cluster_is_reached_through_the_setting_alone(slurm: SlurmCluster) -> None:
    assert "SLURM_CONF" not in os.environ  # the fixture reaches its cluster the same way
    before = dict(os.environ)
    assert len(SlurmClient(conf=slurm.conf, timeout=scaled(10)).nodes()) == len(slurm.nodes)  # default bin dirs
    assert dict(os.environ) == before


def test_the_jobs_on_a_node_with_whether_slurm_can_requeue_them(slurm: SlurmCluster) -> None:
    again, kept = slurm.sbatch(slurm.host, requeue=True), slurm.sbatch(slurm.host, requeue=False)
    client = slurm.client()

    def both_running() -> dict[int, SlurmJob] | None:
        jobs = {job.job_id: job for job in client.jobs_on(slurm.host) if job.state == "RUNNING"}
        return jobs if {again, kept} <= set(jobs) else None

    jobs = wait_until(both_running, 20, interval=0.2, message="both jobs running")
    assert set(jobs) == {again, kept} and jobs[again].nodes == (slurm.host,) and jobs[again].user == "root"
    assert jobs[again].requeueable and jobs[again].why_not_requeueable() is None
    assert not jobs[kept].requeueable and "does not allow requeueing" in (jobs[kept].why_not_requeueable() or "")
    assert client.jobs_on("gpu-01") == ()
    with pytest.raises(SlurmError, match="not a job id"):
        client.requeue(0)


def test_a_jobs_comment_is_read_as_written_and_only_allowed_signals_are_sent(slurm: SlurmCluster) -> None:
    job = slurm.sbatch(slurm.host, requeue=True, comment="exp42, remediate-signal=USR1")
    commands: list[str] = []
    client = dataclasses.replace(slurm.client(), on_command=commands.append)
    (read,) = wait_until(lambda: client.jobs_on(slurm.host), 20, interval=0.2, message="the job on the node")
    assert read.job_id == job and read.comment == "exp42, remediate-signal=USR1"
    commands.clear()
    for job_id, name in ((0, "USR1"), (True, "USR1"), (job, "KILL"), (job, "SIGUSR1"), (job, "USR1 --full")):
        with pytest.raises(SlurmError, match=r"not a job id|refusing to signal"):
            client.signal(job_id, name)  # type: ignore[arg-type]
    assert commands == []  # refused before any command ran
    slurm.cancel_jobs()
    with pytest.raises(SlurmError, match="Invalid job id"):  # ended since it was read: Slurm's words
        client.signal(job, "USR1")
    assert commands == ["scancel"]
    # Pending by the time it is signalled (it requeued itself): nothing sent, no error, and no wait (without
    # --state=RUNNING scancel retries a pending job until the time-out).
    submit = ("sbatch", "--parsable", f"--nodelist={slurm.host}", "--begin=now+1hour", "--mem=100",
              "--output=/dev/null", f"--chdir={slurm.root}", "--wrap", "sleep 600")  # fmt: skip
    later = int(slurm.run(*submit).stdout.strip())
    wait_until(lambda: slurm.job_state(later) == "PENDING", 20, interval=0.2, message="the job pending")
    dataclasses.replace(client, timeout=scaled(5)).signal(later, "USR1")
    assert slurm.job_state(later) == "PENDING"


def test_srun_no_allocate_refused_to_a_user_not_root_nor_slurmuser_says_who_may_run_it(tmp_path: Path) -> None:
    """srun's own words (22.05.8, run as `nobody` against tests/support/slurm.py's cluster: exit 210), from a
    stand-in srun: the suite runs as root, which Slurm lets run it."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    srun = tmp_path / "srun"
    srun.write_text(
        "#!/bin/sh\necho 'srun: do not allocate resources' >&2\n"
        "echo 'srun: error: Task launch for StepId=4294945032.130877252 failed on node vm: "
        "Access/permission denied' >&2\n"
        "echo 'srun: error: Application launch failed: Access/permission denied' >&2\nexit 210\n"
    )
    srun.chmod(0o755)
    client = SlurmClient(conf=conf, bin_dir=tmp_path)

    with pytest.raises(SlurmError, match="Access/permission denied") as refused:
        client.run_on_drained("gpu-01", ["/bin/true"], chdir=tmp_path, timeout=scaled(10))

    assert "srun --no-allocate runs only as root or SlurmUser" in str(refused.value)
