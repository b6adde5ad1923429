"""The shipped gpu-degraded ladder on a real Slurm cluster (tests/support/slurm.py) through `remediate serve`
(REMEDIATE_SCHEDULERS=slurm): the agent's GPUPcieDowntrained (posted here as AlertManager sends it) notifies
on-call; still firing after holds_for (AlertManager's re-send) it drains the node in the real slurmctld, the
reason naming the run and the values read; the resolve resumes it. Only holds_for (1h) and the cooldown (30m)
shrink; the steps and messages are as shipped."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer
from tests.support.shipped import shipped_playbook
from tests.support.slurm import SlurmCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]


def downtrained(node: str, status: str = "firing") -> dict[str, Any]:
    labels = {"severity": "warning", "source": "nvml", "node": node, "UUID": "GPU-5151", "gpu": "1"}
    notes = {
        "summary": f"GPU 1 (GPU-5151) on {node}: PCIe link downtrained: pcie width x8 < max x16",
        "evidence": "pcie width x8 < max x16",
        "pcie_width": "x8 of x16",
        "pcie_gen": "5 of 5",
        "utilization": "0%",
    }
    return alert_payload(
        "GPUPcieDowntrained", status=status, labels=labels, annotations=notes, starts_at="2026-12-03T10:00:00Z"
    )


def test_a_persistent_downtrained_link_drains_the_slurm_node_on_rung_two_and_the_resolve_resumes_it(
    start_server: Callable[..., RemediateServer], tmp_path: Path, slurm: SlurmCluster, recorder: WebhookRecorder
) -> None:
    playbook = shipped_playbook("gpu-degraded")
    playbook["cooldown"] = "0s"
    playbook["escalate"][0]["holds_for"] = "2s"
    playbooks = tmp_path / "degraded"
    playbooks.mkdir()
    (playbooks / "gpu-degraded.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    server = start_server(
        playbooks=playbooks,
        env={
            "REMEDIATE_SCHEDULERS": "slurm",
            "REMEDIATE_SLURM_CONF": str(slurm.conf),
            "REMEDIATE_SLURM_POLL_INTERVAL": "1s",
            "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": recorder.url}}),
        },
    )
    node = slurm.nodes[0]

    server.post_webhook(notification_payload(downtrained(node))).raise_for_status()
    first = server.wait_for_run(playbook="gpu-degraded")
    told = server.wait_for_run_status(first["run_id"], "succeeded", "failed")
    assert told["status"] == "succeeded", told
    assert first["rung"] == 1
    assert [s["action"] for s in server.run(first["run_id"])["steps"]] == ["notify"]
    assert "drain" not in slurm.show_node(node).lower()  # rung 1 only tells on-call

    def climbed() -> dict[str, Any] | None:  # AlertManager re-sends the alert while it fires
        server.post_webhook(notification_payload(downtrained(node))).raise_for_status()
        return next((e for e in server.runs(playbook="gpu-degraded") if e["rung"] == 2), None)

    second = wait_until(climbed, 30, interval=0.5)
    drained = server.wait_for_run_status(second["run_id"], "succeeded", "failed")
    assert drained["status"] == "succeeded", drained
    assert [s["name"] for s in drained["steps"]] == ["slurm-drain", "notify"]  # the k8s steps are left out
    shown = slurm.show_node(node)  # the whole reason (sinfo -R's column here is 60 characters wide)
    print(f"\nsinfo -R while drained:\n{slurm.reasons()}scontrol show node: {shown}")
    expected = f"Reason=remediate run {second['run_id']}: GPUPcieDowntrained GPU 1 (width x8 of x16, gen 5 of 5)"
    assert expected in shown and re.search(r"State=\S*DRAIN", shown)
    told = [json.dumps(r.json) for r in recorder.requests]
    assert any("Drained in Slurm (running jobs finish)" in t for t in told), told

    server.post_webhook(notification_payload(downtrained(node, "resolved"))).raise_for_status()
    undo = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook="gpu-degraded")
    undone = server.wait_for_run_status(undo["run_id"], "succeeded", "failed")
    assert undone["status"] == "succeeded", undone
    assert [s["name"] for s in undone["steps"]] == ["resume", "notify-resolved"]
    assert "DRAIN" not in slurm.show_node(node)
