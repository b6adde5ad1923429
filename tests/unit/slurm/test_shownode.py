"""`scontrol -o show node NAME` (remediate.slurm.shownode), the fresh read of the node a step decides on: against
the real slurmctld (tests/support/slurm.py) the same SlurmNode as `sinfo --json` gives, for a drained node, a
node with a job and a drain (MIXED+DRAIN), a node a person set DOWN, a node without a slurmd of its own, and
reasons with spaces, '=' and brackets; and the lines 22.05.8 printed, parsed as they are."""

from __future__ import annotations

import dataclasses

import pytest

from remediate.slurm import SlurmError, SlurmNode, SlurmNodeNotFound
from remediate.slurm.shownode import parse_show_node
from tests.support.slurm import SlurmCluster
from tests.support.waiting import wait_until

# Printed by slurmctld 22.05.8 on the test cluster (trimmed in the middle, where no field is read).
DRAINED = (
    "NodeName=gpu-01 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=3.50 AvailableFeatures=gpu "
    "ActiveFeatures=gpu Gres=(null) NodeAddr=127.0.0.1 NodeHostName=gpu-01  RealMemory=1000 AllocMem=0 "
    "State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=train  "
    "BootTime=None SlurmdStartTime=None ExtSensorsTemp=n/s Reason=XID 79 on GPU 3 [root@2026-12-02T14:19:41]\n"
)
MIXED = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 AvailableFeatures=(null) ActiveFeatures=(null) "
    "NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 State=MIXED+DRAIN ThreadsPerCore=1 Partitions=train  AllocTRES=cpu=1,mem=100M "
    "ExtSensorsTemp=n/s Reason=hello there = friend [x] [root@2026-12-02T14:19:43]\n"
)
IDLE = "NodeName=gpu-03 NodeHostName=gpu-03  State=IDLE ThreadsPerCore=1 Partitions=train,debug  BootTime=None\n"


def test_the_lines_slurm_printed_parse_into_the_node_the_actions_read() -> None:
    drained = parse_show_node(DRAINED)
    assert (drained.name, drained.hostname, drained.state, drained.flags) == ("gpu-01", "gpu-01", "idle", {"DRAIN"})
    assert (drained.reason, drained.reason_set_by, drained.partitions, drained.features) == (
        "XID 79 on GPU 3", "root", ("train",), ("gpu",)
    )  # fmt: skip
    assert drained.reason_changed_at > 0 and drained.drained and drained.drained_by_run is None

    mixed = parse_show_node(MIXED)
    assert (mixed.state, mixed.flags, mixed.features) == ("mixed", {"DRAIN"}, ())
    assert (mixed.reason, mixed.reason_set_by) == ("hello there = friend [x]", "root")  # '=' and brackets kept

    idle = parse_show_node(IDLE)
    assert (idle.state, idle.flags, idle.reason, idle.reason_set_by) == ("idle", frozenset(), "", None)
    assert idle.partitions == ("train", "debug") and not idle.out_of_service


def test_an_answer_without_a_node_is_a_named_error() -> None:
    with pytest.raises(SlurmError, match="no NodeName or State"):
        parse_show_node("")
    with pytest.raises(SlurmError, match="no NodeName or State"):
        parse_show_node("Node gpu-99 not found")


def steady(node: SlurmNode) -> SlurmNode:
    """The node less NOT_RESPONDING, which the nodes without a slurmd of their own gain and lose between two reads."""
    return dataclasses.replace(node, flags=node.flags - {"NOT_RESPONDING"})


def test_scontrol_and_sinfo_agree_on_every_kind_of_node(slurm: SlurmCluster) -> None:
    """A drained node, a node with a job then drained (MIXED+DRAIN), a node set DOWN, nodes without a slurmd
    of their own (gpu-0x), a reason remediate wrote: the fresh read equals sinfo --json's node."""
    client = slurm.client()
    slurm.drain_by_hand("gpu-01", "XID 79 on GPU 3")
    slurm.drain_by_hand("gpu-02", "remediate run 42: GPUXidCritical GPU 3 (xid 79)")
    job = slurm.sbatch(slurm.host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", 30, interval=0.2, message=f"job {job} running")
    slurm.drain_by_hand(slurm.host, "a person's words = theirs [x]")
    # Last, just before the reads: gpu-0x share the real slurmd's address, so slurmctld's next ping of gpu-05
    # is answered and ReturnToService=2 brings it back (it once did in the seconds the job took to start).
    slurm.run("scontrol", "update", "NodeName=gpu-05", "State=DOWN", "Reason=broken fan")

    listed = {node.name: steady(node) for node in client.nodes()}
    for name in slurm.nodes:
        # reason_changed_at: sinfo's epoch against scontrol's local time to the second: the same moment.
        assert steady(client.node(name)) == listed[name], f"{name}: {slurm.show_node(name)}"
    host = client.node(slurm.host)
    assert (host.state, host.flags, host.reason) == ("mixed", {"DRAIN"}, "a person's words = theirs [x]")
    assert client.node("gpu-02").drained_by_run == 42 and client.node("gpu-01").reason_set_by == "root"
    down = client.node("gpu-05")
    assert down.state == "down" and down.out_of_service and not down.drained and down.reason == "broken fan"


def test_an_unknown_node_is_slurm_node_not_found(slurm: SlurmCluster) -> None:
    with pytest.raises(SlurmNodeNotFound, match="scontrol -o show node gpu-99: Node gpu-99 not found"):
        slurm.client().node("gpu-99")
    with pytest.raises(SlurmError, match="not a single Slurm node name"):
        slurm.client().node("gpu-[01-02]")  # checked before it reaches argv
