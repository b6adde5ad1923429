"""The shipped gpu-degraded ladder on a real Slurm cluster (tests/support/slurm.py) through `remediate serve`
(REMEDIATE_SCHEDULERS=slurm): the agent's GPUPcieDowntrained (posted here as AlertManager sends it) notifies
on-call; still firing after holds_for (AlertManager's re-send) it drains the node in the real slurmctld, the
reason naming the run and the values read; the resolve resumes it. Only holds_for (1h) and the cooldown (30m)
shrink (tests/support/degraded.py); the steps and messages are as shipped."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.degraded import start_ladder
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration]


def test_a_persistent_downtrained_link_drains_the_slurm_node_on_rung_two_and_the_resolve_resumes_it(
    start_server: Callable[..., RemediateServer], tmp_path: Path, slurm: SlurmCluster, recorder: WebhookRecorder
) -> None:
    slurm_env = {
        "REMEDIATE_SCHEDULERS": "slurm",
        "REMEDIATE_SLURM_CONF": str(slurm.conf),
        "REMEDIATE_SLURM_POLL_INTERVAL": "1s",
    }
    node = slurm.nodes[0]
    ladder = start_ladder(start_server, tmp_path, recorder, node, slurm_env)

    first = ladder.fire()
    told = ladder.settled(first)
    assert told["status"] == "succeeded", told
    assert first["rung"] == 1
    assert [s["action"] for s in ladder.server.run(first["run_id"])["steps"]] == ["notify"]
    assert "drain" not in slurm.show_node(node).lower()  # rung 1 only tells on-call

    second = ladder.climb()
    drained = ladder.settled(second)
    assert drained["status"] == "succeeded", drained
    assert [s["name"] for s in drained["steps"]] == ["slurm-drain", "notify"]  # the k8s steps are left out
    shown = slurm.show_node(node)  # the whole reason (sinfo -R's column here is 60 characters wide)
    print(f"\nsinfo -R while drained:\n{slurm.reasons()}scontrol show node: {shown}")
    expected = f"Reason=remediate run {second['run_id']}: GPUPcieDowntrained GPU 1 (width x8 of x16, gen 5 of 5)"
    assert expected in shown and re.search(r"State=\S*DRAIN", shown)
    told = [json.dumps(r.json) for r in recorder.requests]
    assert any("Drained in Slurm (running jobs finish)" in t for t in told), told

    undone = ladder.settled(ladder.resolve())
    assert undone["status"] == "succeeded", undone
    assert [s["name"] for s in undone["steps"]] == ["resume", "notify-resolved"]
    assert "DRAIN" not in slurm.show_node(node)
