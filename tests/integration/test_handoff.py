"""One owner per node (issue 28), against the test API server (real HTTP, the official client): node steps
(gpu.*, training.*) on a node a breakfix system owns are refused by the server's dispatch, naming the owner
(`remediate dry-run`'s plan: can_act false), an undo excepted; `remediate node release NODE`, as a real
process, gives the node back to remediate, audited `node_released`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from remediate.actions import default_registry
from remediate.actions.base import StepContext
from remediate.alerts import alert_ref
from remediate.config import Settings
from remediate.dryrun import dry_run
from remediate.gpu import SimulatedBackend
from remediate.kube import CORDONED_BY_RUN, OWNER, OWNER_SINCE, OWNER_WHY
from remediate.kube.owner import NodeOwnedElsewhere
from remediate.runners import Dispatch
from tests.conftest import alert_payload, notification_payload
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.processes import run_remediate

OWNED = {OWNER: "breakfix", OWNER_SINCE: "2026-11-27T10:00:00Z", OWNER_WHY: "XID 79 after a reset (run 3)"}
NODE_STEPS = """
name: gpu-node-steps
match: {alertname: GPUXidCritical}
target: node
cooldown: 0s
steps:
  - name: reset
    action: gpu.reset
    with: {gpu: all}
  - name: restore
    action: gpu.restore_power_limit
    with: {gpu: all}
"""


def test_node_steps_on_a_node_owned_elsewhere_are_refused_naming_the_owner_and_an_undo_is_not(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)
    kube_api.add_node("gpu-08")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "steps.yaml").write_text(NODE_STEPS)
    gpus = SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2)
    settings = Settings.of(
        kubeconfig=kubeconfig, playbooks=tmp_path / "playbooks", database_url=f"sqlite:///{tmp_path / 'r.db'}",
        gpu_backend="simulated", gpu_simulator_file=gpus, node_name="gpu-07", node_aliases=("gpu-08",),
    )  # fmt: skip
    why = "gpu-07 is owned by breakfix since 2026-11-27T10:00:00Z: XID 79 after a reset (run 3): gpu.reset refuses"

    def plan_of(node: str) -> dict:
        alert = alert_payload("GPUXidCritical", labels={"Hostname": node, "severity": "critical"})
        (entry,) = dry_run(settings, notification_payload(alert), now=time.time())["alerts"]
        (playbook,) = entry["playbooks"]
        return playbook

    owned = plan_of("gpu-07")
    steps = {step["name"]: step for step in owned["steps"]}
    assert steps["reset"]["plan"]["can_act"] is False and steps["reset"]["plan"]["why_not"].startswith(why)
    assert "can_act" not in steps["restore"]["plan"]  # the undo of remediate's own change is planned as usual
    assert owned["cannot_succeed"] is True and owned["cannot_act"].startswith(f"step 0 reset: {why}")
    assert "can_act" not in {step["name"]: step for step in plan_of("gpu-08")["steps"]}["reset"]["plan"]

    registry = default_registry(settings)
    dispatch = Dispatch.from_settings(settings)
    reset = registry.get("gpu.reset")
    ctx = StepContext(run_id=1, step_index=0, playbook="gpu-node-steps", target="gpu-07", alert=alert_ref({}))
    with pytest.raises(NodeOwnedElsewhere, match="owned by breakfix"):
        dispatch.runner_for(reset, "gpu-07").execute(reset, reset.validate({"gpu": "all"}), ctx)
    assert [SimulatedBackend(gpus).reset_count(g.uuid) for g in SimulatedBackend(gpus).devices()] == [0, 0]


def test_release_removes_only_the_owner_annotations_and_is_audited(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    kube_api.add_node("gpu-07", annotations={**OWNED, CORDONED_BY_RUN: "3"}, unschedulable=True)
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig), "REMEDIATE_LOG_FORMAT": "json"}

    done = run_remediate("node", "release", "gpu-07", "--by", "alice", "--reason", "GPU replaced", env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("released gpu-07 is owned by breakfix since 2026-11-27T10:00:00Z: XID 79")
    annotations = kube_api.node("gpu-07")["metadata"]["annotations"]
    assert annotations == {CORDONED_BY_RUN: "3"}  # remediate's own marks stay: its undo still applies
    assert kube_api.node("gpu-07")["spec"]["unschedulable"] is True
    (audit,) = [json.loads(line) for line in done.stderr.splitlines() if '"node_released"' in line]
    assert {k: audit[k] for k in ("event", "level", "node", "owner", "owner_since", "principal", "reason")} == {
        "event": "node_released",
        "level": "WARNING",
        "node": "gpu-07",
        "owner": "breakfix",
        "owner_since": "2026-11-27T10:00:00Z",
        "principal": "alice",
        "reason": "GPU replaced",
    }

    again = run_remediate("node", "release", "gpu-07", env=env)

    assert again.returncode == 0 and "not owned by another system: nothing to release" in again.stdout
    assert "node_released" not in again.stderr


def test_release_of_a_missing_or_invalid_node_is_one_line_and_changes_nothing(
    kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig)}
    missing = run_remediate("node", "release", "gpu-99", env=env)
    assert missing.returncode == 3 and missing.stderr.strip() == "Error: node gpu-99 does not exist in the cluster"

    invalid = run_remediate("node", "release", "GPU_07", env=env)
    assert invalid.returncode == 2 and "Invalid value for NAME" in invalid.stderr and "Traceback" not in invalid.stderr
    assert kube_api.count("PATCH", "/nodes/") == 0
