"""End to end, silent degradations: a real `remediate agent` (simulated GPUs, whose health section says x8 of
x16 and HW slowdown) reads its GPUs' health every poll and raises GPUPcieDowntrained and GPUHwSlowdownPersistent
in a real AlertManager 0.25, which notifies its webhook (a recorder standing in for remediate); once the GPU
reads clear the agent resolves them and AlertManager sends the resolved notification. The shipped route sends
both alertnames to remediate through the node agents' sub-route.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.realsystems import AMTOOL, AlertManager, ShippedAlertManager, WebhookRecorder
from tests.support.server import NodeAgent
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-05"
HEALTHY = {"pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}, "utilization_percent": 0}


@pytest.mark.parametrize("alertname", ["GPUPcieDowntrained", "GPUHwSlowdownPersistent"])
def test_the_shipped_route_sends_degradations_to_remediate_in_the_node_agents_sub_route(alertname: str) -> None:
    shown = subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={ShippedAlertManager.shipped}",
         "--verify.receivers=remediate", f"alertname={alertname}", "severity=warning", "source=nvml", "node=n1",
         "UUID=GPU-1", "gpu=0"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr


def notified(recorder: WebhookRecorder, alertname: str, status: str) -> list[dict[str, Any]]:
    return [
        alert
        for request in recorder.requests
        for alert in (request.json or {}).get("alerts", [])
        if alert["labels"]["alertname"] == alertname and alert["status"] == status
    ]


def test_the_agent_raises_a_downtrained_link_and_a_persistent_slowdown_and_resolves_them_when_clear(
    tmp_path: Path,
    recorder: WebhookRecorder,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> None:
    am = start_alertmanager(recorder.url, token=None, group_by=["alertname", "node", "UUID"])
    agent = NodeAgent(
        tmp_path / "agent",
        NODE,
        env={
            "REMEDIATE_GPU_EVENTS_ALERTMANAGER_URL": am.url,
            "REMEDIATE_GPU_HEALTH_POLL_INTERVAL": "0.3s",
            "REMEDIATE_GPU_HEALTH_SLOWDOWN_POLLS": "3",
        },
    )
    watch_log("agent", agent)
    gpus = agent.gpus.devices()
    link, slow = gpus[1].uuid, gpus[3].uuid
    agent.gpus.update_device(link, health={**HEALTHY, "pcie": {**HEALTHY["pcie"], "width": 8}})
    agent.gpus.update_device(slow, health={**HEALTHY, "clock_event_reasons": ["hw_slowdown"]})
    agent.start()
    try:
        wait_until(lambda: notified(recorder, "GPUPcieDowntrained", "firing"), 30)
        wait_until(lambda: notified(recorder, "GPUHwSlowdownPersistent", "firing"), 30)
        held = {a["labels"]["alertname"]: a for a in am.alerts()}
        pcie, throttle = held["GPUPcieDowntrained"], held["GPUHwSlowdownPersistent"]
        assert (pcie["labels"]["UUID"], pcie["labels"]["gpu"], pcie["labels"]["node"]) == (link, "1", NODE)
        assert pcie["annotations"]["evidence"] == "pcie width x8 < max x16"
        assert pcie["annotations"]["pcie_width"] == "x8 of x16"
        assert (throttle["labels"]["UUID"], throttle["annotations"]["clock_event_reasons"]) == (slow, "hw_slowdown")
        assert throttle["annotations"]["persistence"] == "set on 3 consecutive reads 0.3 s apart"
        assert all(a["status"]["state"] == "active" for a in held.values())

        agent.gpus.update_device(link, health=HEALTHY)
        agent.gpus.update_device(slow, health=HEALTHY)
        (resolved,) = wait_until(lambda: notified(recorder, "GPUPcieDowntrained", "resolved"), 30)
        assert resolved["labels"]["UUID"] == link
        wait_until(lambda: notified(recorder, "GPUHwSlowdownPersistent", "resolved"), 30)
        assert [a for a in am.alerts() if a["labels"].get("source") == "nvml"] == []
        assert agent.running
    finally:
        agent.stop()


def test_a_downtrained_link_reaches_the_shipped_playbook_through_the_shipped_route_and_on_call_is_told(
    tmp_path: Path,
    start_server: Callable[..., Any],
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    watch_log: Callable[..., None],
) -> None:
    """Agent -> AlertManager (the shipped routes) -> `remediate serve` (the shipped gpu-degraded): rung 1 notifies
    on-call with the agent's evidence (the resolve waits for the shipped group_interval, 1m: not run here)."""
    shipped = Path(__file__).resolve().parents[2] / "playbooks" / "gpu-degraded.yaml"
    (playbooks_dir / "gpu-degraded.yaml").write_text(shipped.read_text())
    server = start_server(env={"REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": recorder.url}})})
    am = ShippedAlertManager(tmp_path / "alertmanager", server.webhook_url, token=server.token)
    watch_log("alertmanager", am)
    agent = NodeAgent(tmp_path / "agent", NODE, env={"REMEDIATE_GPU_HEALTH_POLL_INTERVAL": "0.5s"})
    watch_log("agent", agent)
    link = agent.gpus.devices()[2].uuid
    agent.gpus.update_device(link, health={**HEALTHY, "pcie": {**HEALTHY["pcie"], "width": 8}})
    with am:
        agent.extra_env["REMEDIATE_GPU_EVENTS_ALERTMANAGER_URL"] = am.url
        agent.start()
        try:
            entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", playbook="gpu-degraded")
            assert (entry["target"], entry["decision"], entry["rung"]) == (NODE, "accepted", 1)
            told = recorder.wait_for(lambda r: "downtrained" in json.dumps(r.json), 30)
            assert "pcie width x8 < max x16" in json.dumps(told.json) and NODE in json.dumps(told.json)
            labels = server.run(entry["run_id"])["alert"]["labels"]
            assert (labels["alertname"], labels["UUID"], labels["gpu"]) == ("GPUPcieDowntrained", link, "2")
        finally:
            agent.stop()
