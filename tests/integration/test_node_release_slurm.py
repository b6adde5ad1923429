"""`remediate node release NODE` on a real Slurm cluster (tests/support/slurm.py): a node slurm.handoff gave to
breakfix (its reason `breakfix: ... (from remediate run N)`) is resumed once the re-admission gate passes on the
node's real `remediate agent` (simulated GPUs); a failed gate leaves it drained with breakfix's reason. Slurm on
Kubernetes: a node both hold is given back by both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.kube import OWNER
from remediate.slurm.reason import handoff_reason
from tests.actions.test_gpu_health import HEALTHY
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.processes import run_remediate
from tests.support.server import AGENT_TOKEN, NodeAgent
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration]

NODE = "gpu-01"
HANDED = handoff_reason("breakfix", 42, why="XID 79 still reported after a reset")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[NodeAgent]:
    """The node's real `remediate agent`, its four simulated GPUs healthy."""
    node = NodeAgent(tmp_path / NODE, NODE).start()
    for gpu in node.gpus.devices():
        node.gpus.update_device(gpu.uuid, health=HEALTHY)
    try:
        yield node
    finally:
        node.stop()


def _env(slurm: SlurmCluster, agent: NodeAgent, schedulers: str = "slurm") -> dict[str, str]:
    return {"REMEDIATE_SCHEDULERS": schedulers, "REMEDIATE_SLURM_CONF": str(slurm.conf),
            "REMEDIATE_AGENTS": f"{NODE}={agent.url}", "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_LOG_FORMAT": "json"}  # fmt: skip


def _state_and_reason(slurm: SlurmCluster) -> tuple[str, str]:
    """sinfo's state and reason of the node, without its `*` (not responding): the cluster's nodes without a slurmd
    of their own come and go NOT_RESPONDING (tests/support/slurm.py), whatever their drain."""
    state, _, reason = slurm.run("sinfo", "-h", "-n", NODE, "-o", "%T|%E").stdout.strip().partition("|")
    return state.rstrip("*"), reason


def _release(env: dict[str, str], *extra: str) -> tuple[int, str, str]:
    done = run_remediate("node", "release", NODE, "--soak", "2s", "--every", "1s", *extra, env=env)
    return done.returncode, done.stdout, done.stderr


def test_a_handed_off_node_whose_gate_passes_is_resumed(slurm: SlurmCluster, agent: NodeAgent) -> None:
    slurm.drain_by_hand(NODE, HANDED)
    assert _state_and_reason(slurm) == ("drained", HANDED)

    rc, out, err = _release(_env(slurm, agent), "--reason", "GPU replaced")

    assert rc == 0, out + err
    assert [line for line in out.splitlines() if line.startswith("round ")] == [
        "round 1/3 at +0s: ok", "round 2/3 at +1s: ok", "round 3/3 at +2s: ok",
    ]  # fmt: skip
    assert f"released {NODE} is owned by breakfix" in out and "(resumed in Slurm)" in out
    assert _state_and_reason(slurm) == ("idle", "none")
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert (audit["owner"], audit["gate"], audit["released"]) == ("breakfix", "passed", ["slurm"])

    again = run_remediate("node", "release", NODE, env=_env(slurm, agent))
    assert again.returncode == 0 and "not owned by another system: nothing to release" in again.stdout


def test_a_handed_off_node_whose_gate_fails_stays_drained_with_its_owners_reason(
    slurm: SlurmCluster, agent: NodeAgent
) -> None:
    slurm.drain_by_hand(NODE, HANDED)
    bad = agent.gpus.devices()[1]
    agent.gpus.update_device(bad.uuid, health={**HEALTHY, "ecc_dbe_volatile": 1})

    rc, out, err = _release(_env(slurm, agent))

    assert rc == 7, out + err
    assert f"  GPU 1 ({bad.uuid})  ecc_dbe_volatile  fail  ecc_dbe_volatile: 1 > 0" in out.splitlines()
    assert f"{NODE} not released: the re-admission gate failed, so breakfix keeps it" in err
    assert _state_and_reason(slurm) == ("drained", HANDED)
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_release_refused"' in line]
    assert audit["evidence"] == [f"GPU 1 ({bad.uuid}): ecc_dbe_volatile: 1 > 0"]


def test_a_node_not_handed_off_is_left_as_it_is_and_another_systems_drain_too(
    slurm: SlurmCluster, agent: NodeAgent
) -> None:
    """Only a hand-off reason is a hold this releases: a drain a person made is theirs, and stays."""
    slurm.drain_by_hand(NODE, "bad fan, ticket 12")

    rc, out, err = _release(_env(slurm, agent))

    assert rc == 0 and "not owned by another system: nothing to release" in out, out + err
    assert _state_and_reason(slurm) == ("drained", "bad fan, ticket 12")


def test_on_slurm_on_kubernetes_a_node_both_hold_is_given_back_by_both(
    slurm: SlurmCluster, agent: NodeAgent, kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    slurm.drain_by_hand(NODE, HANDED)
    kube_api.add_node(NODE, annotations={OWNER: "breakfix"})
    env = {**_env(slurm, agent, "kubernetes,slurm"), "REMEDIATE_KUBECONFIG": str(kubeconfig)}

    rc, out, err = _release(env, "--reason", "GPU replaced")

    assert rc == 0, out + err
    assert "(owner annotation removed)" in out and "(resumed in Slurm)" in out
    assert OWNER not in kube_api.node(NODE)["metadata"].get("annotations", {})
    assert _state_and_reason(slurm) == ("idle", "none")
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert audit["released"] == ["kubernetes", "slurm"]
