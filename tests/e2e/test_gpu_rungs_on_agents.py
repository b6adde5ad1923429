"""End to end: the GPU rungs (gpu.lock_clocks / gpu.unlock_clocks, gpu.reset) on a node agent.

A real AlertManager -> the real ``remediate serve`` (gunicorn, no GPUs of its own) -> a real
``remediate agent`` for node-b with simulated GPUs, exactly the path gpu.set_power_limit takes
(tests/e2e/test_agents.py). A hot GPU gets its clocks locked on the agent, and given back there when
the alert resolves; an XID alert asks for a reset, which the agent refuses, naming the process on the
GPU. What happened is read back from /runs/<id> and the agent's GPU file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.realsystems import AlertManager
from tests.support.server import AGENT_TOKEN, NodeAgent, RemediateServer

pytestmark = [pytest.mark.integration]

CLOCK_PLAYBOOK = """\
name: gpu-clock-cap
match:
  alertname: GPUTemperatureHigh
target: node
cooldown: 0s
steps:
  - name: lock-clocks
    action: gpu.lock_clocks
    with: {gpu: "{{ labels.UUID }}", percent_of_max: 70}
on_resolved:
  - name: unlock-clocks
    action: gpu.unlock_clocks
    with: {gpu: "{{ labels.UUID }}"}
"""

RESET_PLAYBOOK = """\
name: gpu-xid-reset
match:
  alertname: GPUXidError
target: node
cooldown: 0s
steps:
  - name: reset-gpu
    action: gpu.reset
    with: {gpu: "{{ labels.UUID }}"}
"""


@pytest.fixture
def node_b(start_agent: Callable[..., NodeAgent]) -> NodeAgent:
    return start_agent("node-b")


@pytest.fixture
def server(start_server: Callable[..., RemediateServer], playbooks_dir: Path, node_b: NodeAgent) -> RemediateServer:
    (playbooks_dir / "gpu-clock-cap.yaml").write_text(CLOCK_PLAYBOOK)
    (playbooks_dir / "gpu-xid-reset.yaml").write_text(RESET_PLAYBOOK)
    return start_server(env={"REMEDIATE_AGENTS": f"node-b={node_b.url}", "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN})


def _step(run: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in run["steps"] if s["name"] == name]
    return step


def test_clock_lock_unlock_and_a_refused_reset_run_on_the_nodes_agent(
    server: RemediateServer, start_alertmanager: Callable[..., AlertManager], node_b: NodeAgent
) -> None:
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    gpus = node_b.gpus
    hot_gpu, xid_gpu = gpus.devices()[1], gpus.devices()[3]

    hot = {"alertname": "GPUTemperatureHigh", "UUID": hot_gpu.uuid, "Hostname": "node-b"}
    am.fire(hot)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook="gpu-clock-cap")
    fired = server.run(entry["run_id"])
    lock = _step(fired, "lock-clocks")
    assert lock["plan"]["ran_on"] == lock["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert lock["plan"]["gpus"][0]["clocks"]["locked_graphics_mhz"] == "unlocked"
    assert lock["result"]["gpus"][0]["change"] == "unlocked -> 345..1380 MHz"
    assert gpus.clocks(hot_gpu.uuid).locked_graphics_mhz == (345, 1380)

    am.fire({"alertname": "GPUXidError", "xid": "79", "UUID": xid_gpu.uuid, "Hostname": "node-b"})
    entry = server.wait_for_run(status="failed", playbook="gpu-xid-reset")
    reset = _step(server.run(entry["run_id"]), "reset-gpu")
    assert reset["plan"]["gpus"][0]["blocked_by"] == ["1 compute process(es) on the GPU: pid 4203 (python)"]
    assert "GPU reset refused, nothing was reset" in reset["error"]
    assert f"(on agent {node_b.url} of node node-b)" in reset["error"]
    assert gpus.reset_count(xid_gpu.uuid) == 0

    am.resolve(hot)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="succeeded", playbook="gpu-clock-cap")
    unlock = _step(server.run(entry["run_id"]), "unlock-clocks")
    assert unlock["result"]["ran_on"] == f"node-b (agent {node_b.url})"
    assert unlock["result"]["gpus"][0]["reason"] == f"unlocking: the clocks were not locked before run {fired['id']}"
    assert gpus.clocks(hot_gpu.uuid).locked_graphics_mhz is None
