"""`remediate node release NODE` on a real Slurm cluster (tests/support/slurm.py): a node slurm.handoff gave to
breakfix (its reason `breakfix: ... (from remediate run N)`) is resumed once the re-admission gate passes on the
node's real `remediate agent` (simulated GPUs); a failed gate leaves it drained with breakfix's reason. With the
site's burnin_* settings the soak is followed by the burn-in (slurm.burnin, srun --no-allocate) on the handed-off
node itself (this host, the cluster's one slurmd): it passes the `cpu` baseline and the node is resumed, or the
table does not name the model and the node stays drained. Slurm on Kubernetes: a node both hold is given back by
both."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.actions.burnin_common import NOT_CONFIGURED
from remediate.kube import OWNER
from remediate.slurm.client import DEFAULT_PATH
from remediate.slurm.reason import handoff_reason
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.gpu import HEALTHY
from tests.support.processes import run_remediate
from tests.support.server import AGENT_TOKEN, NodeAgent
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration]

NODE = "gpu-01"
HANDED = handoff_reason("breakfix", 42, why="XID 79 still reported after a reset")


def _agent_of(tmp_path: Path, name: str) -> Iterator[NodeAgent]:
    node = NodeAgent(tmp_path / name, name).start()
    for gpu in node.gpus.devices():
        node.gpus.update_device(gpu.uuid, health=HEALTHY)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[NodeAgent]:
    """The node's real `remediate agent`, its four simulated GPUs healthy."""
    yield from _agent_of(tmp_path, NODE)


@pytest.fixture
def host_agent(tmp_path: Path, slurm: SlurmCluster) -> Iterator[NodeAgent]:
    """The agent of this host's node, the one a burn-in can run on (its slurmd is the cluster's one)."""
    yield from _agent_of(tmp_path, slurm.host)


def _env(slurm: SlurmCluster, agent: NodeAgent, schedulers: str = "slurm", node: str = NODE) -> dict[str, str]:
    return {"REMEDIATE_SCHEDULERS": schedulers, "REMEDIATE_SLURM_CONF": str(slurm.conf),
            "REMEDIATE_AGENTS": f"{node}={agent.url}", "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_LOG_FORMAT": "json"}  # fmt: skip


def _state_and_reason(slurm: SlurmCluster, node: str = NODE) -> tuple[str, str]:
    """sinfo's state and reason of the node, without its `*` (not responding): the cluster's nodes without a slurmd
    of their own come and go NOT_RESPONDING (tests/support/slurm.py), whatever their drain."""
    state, _, reason = slurm.run("sinfo", "-h", "-n", node, "-o", "%T|%E").stdout.strip().partition("|")
    return state.rstrip("*"), reason


def _release(env: dict[str, str], *extra: str, node: str = NODE) -> tuple[int, str, str]:
    done = run_remediate("node", "release", node, "--soak", "2s", "--every", "1s", *extra, env=env, timeout=180)
    return done.returncode, done.stdout, done.stderr


def _burnin(table: dict[str, float]) -> dict[str, str]:
    """The site's burn-in settings: `table`, and this interpreter (torch and remediate installed) on the node."""
    return {"REMEDIATE_BURNIN_BASELINES": json.dumps(table), "REMEDIATE_BURNIN_PYTHON": sys.executable}


def test_a_handed_off_node_whose_gate_passes_is_resumed(slurm: SlurmCluster, agent: NodeAgent) -> None:
    slurm.drain_by_hand(NODE, HANDED)
    assert _state_and_reason(slurm) == ("drained", HANDED)

    rc, out, err = _release(_env(slurm, agent), "--reason", "GPU replaced")

    assert rc == 0, out + err
    assert [line for line in out.splitlines() if line.startswith("round ")] == [
        "round 1/3 at +0s: ok", "round 2/3 at +1s: ok", "round 3/3 at +2s: ok",
    ]  # fmt: skip
    assert f"burn-in: skipped: {NOT_CONFIGURED}" in out.splitlines()  # no burnin_baselines
    assert f"released {NODE} is owned by breakfix" in out and "(resumed in Slurm)" in out
    assert _state_and_reason(slurm) == ("idle", "none")
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert (audit["owner"], audit["gate"], audit["burnin"], audit["released"]) == (
        "breakfix", "passed", "skipped", ["slurm"],
    )  # fmt: skip

    again = run_remediate("node", "release", NODE, env=_env(slurm, agent))
    assert again.returncode == 0 and "not owned by another system: nothing to release" in again.stdout


def test_with_baselines_the_release_burns_the_handed_off_node_in_and_then_resumes_it(
    slurm: SlurmCluster, host_agent: NodeAgent
) -> None:
    """The burn-in runs on the node breakfix holds (the release takes it back; slurm.burnin refuses a handed-off
    node only in a run), while it is still drained, and only its pass resumes it."""
    host = slurm.host
    slurm.drain_by_hand(host, HANDED)

    rc, out, err = _release({**_env(slurm, host_agent, node=host), **_burnin({"cpu": 0.0001})}, "--reason", "new GPU",
                            node=host)  # fmt: skip

    assert rc == 0, out + err
    (line,) = [line for line in out.splitlines() if line.startswith("burn-in")]
    assert line.startswith(f"burn-in (slurm.burnin) passed on {host}: ") and "on 'cpu' >= 8e-05" in line, line
    assert "(0.8 x baseline 0.0001)" in line, line
    assert out.index("gate passed on") < out.index(line) < out.index(f"released {host} is owned by breakfix")
    assert _state_and_reason(slurm, host) == ("idle", "none")
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert (audit["gate"], audit["burnin"], audit["released"]) == ("passed", "passed", ["slurm"])
    print(f"\nrelease of {host}: {line}")


def test_a_burnin_whose_model_the_table_does_not_name_refuses_the_release_and_the_node_stays_drained(
    slurm: SlurmCluster, host_agent: NodeAgent
) -> None:
    host = slurm.host
    slurm.drain_by_hand(host, HANDED)

    rc, out, err = _release({**_env(slurm, host_agent, node=host), **_burnin({"NVIDIA H100 80GB HBM3": 300})},
                            node=host)  # fmt: skip

    assert rc == 7, out + err
    (line,) = [line for line in out.splitlines() if line.startswith("burn-in")]
    assert line.startswith(f"burn-in (slurm.burnin) failed on {host}: ") and "no baseline for this model" in line
    assert f"{host} not released: the re-admission gate's burn-in (slurm.burnin) failed, so breakfix keeps it" in err
    assert f"remediate node release {host} --no-burnin --reason WHY" in err
    assert _state_and_reason(slurm, host) == ("drained", HANDED)
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_release_refused"' in line]
    assert (audit["gate"], audit["failed_at"]) == ("failed", "slurm.burnin")
    assert "no baseline for this model" in audit["evidence"][0] and "'cpu'" in audit["evidence"][0]

    # The operator's way out the refusal names: the soak alone, said why.
    env = {**_env(slurm, host_agent, node=host), **_burnin({"NVIDIA H100 80GB HBM3": 300})}
    rc, out, err = _release(env, "--no-burnin", "--reason", "burnt in by the vendor", node=host)
    assert rc == 0 and not any(line.startswith("burn-in") for line in out.splitlines()), out + err
    assert _state_and_reason(slurm, host) == ("idle", "none")
    (audit,) = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert (audit["gate"], audit["burnin"], audit["reason"]) == ("passed", "not run", "burnt in by the vendor")


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
    audits = [json.loads(line) for line in err.splitlines() if '"node_released"' in line]
    assert [audit["released"] for audit in audits] == [["kubernetes"], ["slurm"]]  # one per hold, as released


def _audits(err: str, event: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if f'"{event}"' in line]


def test_a_fully_qualified_name_finds_both_holds_by_the_spellings_each_system_has(
    slurm: SlurmCluster, agent: NodeAgent, kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """`gpu-01.cluster.example` typed: Slurm has NodeName gpu-01 (its first label), and so has Kubernetes."""
    slurm.drain_by_hand(NODE, HANDED)
    kube_api.add_node(NODE, annotations={OWNER: "breakfix"})
    env = {**_env(slurm, agent, "kubernetes,slurm"), "REMEDIATE_KUBECONFIG": str(kubeconfig)}

    rc, out, err = _release(env, "--skip-gate", "--reason", "GPU replaced", node=f"{NODE}.cluster.example")

    assert rc == 0, out + err
    assert "(owner annotation removed)" in out and "(resumed in Slurm)" in out
    assert OWNER not in kube_api.node(NODE)["metadata"].get("annotations", {})
    assert _state_and_reason(slurm) == ("idle", "none")
    assert [audit["released"] for audit in _audits(err, "node_released")] == [["kubernetes"], ["slurm"]]


def _failing_resume(tmp_path: Path) -> Path:
    """A slurm_bin_dir whose scontrol refuses `State=RESUME` (as a controller that rejects the update does) and
    runs the real one for everything else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sinfo", "squeue", "srun", "scancel"):
        real = shutil.which(tool, path=DEFAULT_PATH)
        assert real is not None, tool
        (bin_dir / tool).symlink_to(real)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        '#!/bin/sh\ncase "$*" in *State=RESUME*) echo "scontrol: error: Invalid node state specified" >&2; exit 1;; '
        f'esac\nexec {shutil.which("scontrol", path=DEFAULT_PATH)} "$@"\n'
    )
    scontrol.chmod(0o755)
    return bin_dir


def test_a_release_that_fails_part_way_says_and_audits_which_holds_were_given_back(
    slurm: SlurmCluster, agent: NodeAgent, kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    slurm.drain_by_hand(NODE, HANDED)
    kube_api.add_node(NODE, annotations={OWNER: "breakfix"})
    env = {**_env(slurm, agent, "kubernetes,slurm"), "REMEDIATE_KUBECONFIG": str(kubeconfig),
           "REMEDIATE_SLURM_BIN_DIR": str(_failing_resume(tmp_path))}  # fmt: skip

    rc, out, err = _release(env, "--skip-gate", "--reason", "GPU replaced")

    assert rc == 2, out + err  # an error: neither nothing released (7) nor all
    assert "(owner annotation removed)" in out and "resumed in Slurm" not in out  # told as it was released
    assert f"{NODE} released only in part: released in kubernetes; not released in slurm (slurm: " in err
    assert "Invalid node state specified" in err and "so breakfix keeps it there" in err
    assert OWNER not in kube_api.node(NODE)["metadata"].get("annotations", {})
    assert _state_and_reason(slurm) == ("drained", HANDED)
    assert [audit["released"] for audit in _audits(err, "node_released")] == [["kubernetes"]]
    (incomplete,) = _audits(err, "node_release_incomplete")
    assert (incomplete["level"], incomplete["released"], incomplete["not_released"], incomplete["owner"]) == (
        "ERROR", ["kubernetes"], ["slurm"], "breakfix",
    )  # fmt: skip
    assert "Invalid node state specified" in incomplete["error"]


def test_on_slurm_alone_a_name_kubernetes_could_not_have_is_looked_up_in_slurm(
    slurm: SlurmCluster, agent: NodeAgent
) -> None:
    """Upper case and '_' make a valid Slurm NodeName: asked of Slurm (this cluster has no such node), not
    refused as a Kubernetes name would be."""
    rc, out, err = _release(_env(slurm, agent), "--skip-gate", "--reason", "GPU replaced", node="GPU_01")

    assert rc == 3, out + err
    assert err.strip().endswith("Error: node GPU_01 does not exist in the cluster (slurm)"), err


def test_skip_gate_releases_where_the_burnin_settings_could_not_run_a_burnin(
    slurm: SlurmCluster, agent: NodeAgent
) -> None:
    """A baseline table without burnin_python would fail every burn-in; --skip-gate runs none, so it is no bar."""
    slurm.drain_by_hand(NODE, HANDED)
    env = {**_env(slurm, agent), "REMEDIATE_BURNIN_BASELINES": json.dumps({"cpu": 0.0001})}

    rc, out, err = _release(env, "--skip-gate", "--reason", "GPU replaced")

    assert rc == 0 and "(resumed in Slurm)" in out, out + err
    assert _state_and_reason(slurm) == ("idle", "none")


def test_a_node_slurm_has_in_service_is_not_burnt_in_there_and_the_other_hold_is_released(
    slurm: SlurmCluster, agent: NodeAgent, kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """The owner resumed the node in Slurm; only its Kubernetes annotation is left to release. slurm.burnin
    would refuse a node not drained: it does not apply, and the release goes on."""
    kube_api.add_node(NODE, annotations={OWNER: "breakfix"})
    env = {**_env(slurm, agent), **_burnin({"cpu": 0.0001}), "REMEDIATE_KUBECONFIG": str(kubeconfig)}

    rc, out, err = _release(env, "--reason", "GPU replaced")

    assert rc == 0, out + err
    (line,) = [line for line in out.splitlines() if line.startswith("burn-in")]
    assert line.startswith(f"burn-in (slurm.burnin): not applicable: {NODE} is in service in Slurm ("), line
    assert "and Slurm does not hold it" in line, line
    assert "(owner annotation removed)" in out
    assert OWNER not in kube_api.node(NODE)["metadata"].get("annotations", {})
    assert [audit["released"] for audit in _audits(err, "node_released")] == [["kubernetes"]]
