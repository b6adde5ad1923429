"""End to end across "nodes" on loopback: a real AlertManager 0.25 -> the real ``remediate serve`` (gunicorn)
-> two real ``remediate agent`` processes standing for node-a and node-b.

Each agent has its own simulated GPUs (the same example file written twice: identical UUIDs, so a step
that reached the wrong node would visibly change the wrong file), its own scratch disk directory under
its own cleanup policy, and its own state file. The server has no GPUs and no policies of its own: it
finds the agents in the static ``agents`` map (REMEDIATE_AGENTS) and sends them node steps signed with
each node's own credential, derived from the master agent token: node-a's agent has the master (the
compatible set-up), node-b's only its own credential, printed by ``remediate agent-credential node-b``.
What happened is read back as an operator would: ``/history`` and ``/runs/<id>`` (which
record where each step ran), and the devices and directories of each "node".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from remediate.gpu.simulator import SimulatedBackend
from tests.support.realsystems import AlertManager
from tests.support.server import AGENT_TOKEN, HasLogTail, NodeAgent, RemediateServer, agent_credential
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MW, LOWERED_MW = 700_000, 560_000

SCRATCH_PLAYBOOK = """\
name: scratch-full
match:
  alertname: ScratchAlmostFull
target: node
cooldown: 0s
steps:
  - name: cleanup
    action: disk.cleanup
    with: {mountpoint: "{{ labels.mountpoint }}", free_bytes: 1000TiB, max_files: 100}
    timeout: 30s
"""


@pytest.fixture
def nodes(tmp_path: Path, watch_log: Callable[[str, HasLogTail], None]) -> Iterator[dict[str, NodeAgent]]:
    agents = {
        "node-a": NodeAgent(tmp_path / "node-a", "node-a"),
        "node-b": NodeAgent(tmp_path / "node-b", "node-b", own_credential=True),
    }
    try:
        for name, agent in agents.items():
            watch_log(f"agent {name}", agent)
            agent.start()
        yield agents
    finally:
        for agent in agents.values():
            agent.stop()


@pytest.fixture
def server(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, nodes: dict[str, NodeAgent]
) -> RemediateServer:
    shutil.copy(ROOT / "playbooks" / "gpu-overheat.yaml", playbooks_dir)
    (playbooks_dir / "scratch-full.yaml").write_text(SCRATCH_PLAYBOOK)
    agents = ",".join(f"{name}={agent.url}" for name, agent in nodes.items())
    # The server itself has no GPUs (nvml without a driver) and no cleanup policies: node steps can only
    # succeed on the agents.
    return start_server(env={"REMEDIATE_AGENTS": agents, "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN})


def _hot(gpus: SimulatedBackend, index: int, node: str) -> dict[str, str]:
    gpu = gpus.devices()[index]
    return {
        "alertname": "GPUTemperatureHigh",
        "severity": "warning",
        "UUID": gpu.uuid,
        "gpu": str(gpu.index),
        "Hostname": node,
    }


def _steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def test_each_node_step_runs_on_the_agent_of_its_node_and_the_history_says_where(
    server: RemediateServer, start_alertmanager: Callable[..., AlertManager], nodes: dict[str, NodeAgent]
) -> None:
    node_a, node_b = nodes["node-a"], nodes["node-b"]
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")

    # 1. A hot GPU on node-b: node-b's GPU 2 is lowered, node-a's identical GPU 2 is not.
    labels = _hot(node_b.gpus, 2, "node-b")
    am.fire(labels, {"summary": "GPU 2 on node-b is at 91 C"})
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook="gpu-overheat")
    assert entry["target"] == "node-b"
    fired = server.run(entry["run_id"])
    lower = _steps(fired)["lower-power-limit"]
    assert lower["where"] == "node"
    assert lower["plan"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert lower["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert lower["result"]["backend"] == "simulated"
    assert lower["result"]["gpus"][0]["new_w"] == LOWERED_MW / 1000
    assert "ran_on" not in _steps(fired)["log-lowered"]["result"]  # a cluster step: on the server
    assert node_b.limits() == {0: DEFAULT_MW, 1: DEFAULT_MW, 2: LOWERED_MW, 3: DEFAULT_MW}
    assert set(node_a.limits().values()) == {DEFAULT_MW}

    # 2. A full scratch disk on node-a: node-a's old files go, node-b's stay.
    am.fire({"alertname": "ScratchAlmostFull", "Hostname": "node-a", "mountpoint": "/scratch"})
    entry = server.wait_for_run(status="succeeded", playbook="scratch-full")
    assert entry["target"] == "node-a"
    cleanup = _steps(server.run(entry["run_id"]))["cleanup"]
    assert cleanup["result"]["ran_on"] == f"node-a (agent {node_a.url})"
    assert node_a.scratch_files() == ["keep.lock"]
    assert node_b.scratch_files() == ["keep.lock", "old-0.tmp", "old-1.tmp", "old-2.tmp"]
    # Each call to an agent is timed by action and outcome (plan and execute: two calls of the step).
    assert server.metric("remediate_agent_call_duration_seconds_count", action="disk.cleanup", outcome="answered") == 2

    # 3. The server restarts (its database stays); the alert resolves: node-b's agent remembered the
    #    original limit in its own state file and restores it.
    server.restart()
    am.resolve(labels)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="succeeded", playbook="gpu-overheat")
    restore = _steps(server.run(entry["run_id"]))["restore-power-limit"]
    assert restore["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert restore["result"]["gpus"][0]["reason"] == f"restoring 700 W replaced by run {fired['id']}"
    assert set(node_b.limits().values()) == {DEFAULT_MW}

    # /history shows each run's node; `remediate history` on the database says the same.
    history = server.history()
    assert {(e["playbook"], e["target"]) for e in history if e["run_id"]} == {
        ("gpu-overheat", "node-b"),
        ("scratch-full", "node-a"),
    }
    assert {e["target"] for e in server.cli_history(playbook="scratch-full") if e["run_id"]} == {"node-a"}

    # node-b's agent logged every call with its run, step, action, params and caller.
    run_b = min(e["run_id"] for e in history if e["target"] == "node-b" and e["run_id"])  # the firing run
    assert f"call execute run {run_b} step 0 playbook gpu-overheat action gpu.set_power_limit target node-b" in (
        node_b.log_path.read_text()
    )
    # node-a's credential (all node-a's agent would leak) cannot command node-b: not even at full power.
    from remediate.agentwire.auth import sign

    body = (
        b'{"action": "gpu.set_power_limit", "params": {"gpu": "all", "watts": 1}, "context": {"run_id": 1, '
        b'"step_index": 0, "playbook": "x", "target": "node-b", "alert": {}, "timeout": 10}}'
    )
    forged = requests.post(
        f"{node_b.url}/v1/steps/execute",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": sign(agent_credential("node-a"), "node-b", "POST", "/v1/steps/execute", body),
        },
        timeout=scaled(10),
    )
    assert forged.status_code == 401
    assert set(node_b.limits().values()) == {DEFAULT_MW}

    # 4. A node that has no agent: the step fails with that reason, and nothing runs anywhere else.
    am.fire(_hot(node_a.gpus, 0, "node-c"))
    entry = server.wait_for_run(status="failed", playbook="gpu-overheat")
    assert entry["target"] == "node-c"
    step = _steps(server.run(entry["run_id"]))["lower-power-limit"]
    assert step["status"] == "failed"
    assert "no agent configured for node 'node-c' (the agents map knows: node-a, node-b)" in step["error"]
    assert set(node_a.limits().values()) == set(node_b.limits().values()) == {DEFAULT_MW}
