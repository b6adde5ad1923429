"""End to end, the node-local fault path: a real `remediate agent` (simulated GPUs, the same event
interface as NVML) raises an injected XID in a real AlertManager 0.25 running the SHIPPED route
(alertmanager/alertmanager.yml: source="nvml" -> group_wait 1s), which sends it to a real `remediate serve`
running the shipped playbooks/gpu-xid-quarantine.yaml, which cordons the node on the test Kubernetes API
server (real HTTP, the chart's RBAC). A second fault on the same node is its own alert, and the playbook's
cooldown keeps it to one run. Bounds come from the scale setting (tests/support/waiting.py), never tight:
bench/gpu_fault_path.py measures the latency.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import AMTOOL, ShippedAlertManager, WebhookRecorder
from tests.support.server import NodeAgent, RemediateServer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_ROUTES = ShippedAlertManager.shipped
PLAYBOOK = "gpu-xid-quarantine"
NODE = "gpu-node-03"


def test_the_shipped_route_sends_node_agent_faults_at_once_in_a_group_of_their_own() -> None:
    shown = subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={SHIPPED_ROUTES}", "--verify.receivers=remediate",
         "alertname=GPUXidCritical", "severity=critical", "source=nvml", "node=n1", "occurrence=1-1"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    routes = yaml.safe_load(SHIPPED_ROUTES.read_text())["route"]["routes"]
    (remediate,) = [r for r in routes if r["receiver"] == "remediate"]
    (nvml,) = remediate["routes"]
    assert nvml["matchers"] == ['source="nvml"']
    assert nvml["group_wait"] == "1s" and "occurrence" in nvml["group_by"] and "node" in nvml["group_by"]


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        cluster(api, 20)
        api.add_node(NODE)
        yield api


def test_an_xid_the_agent_sees_cordons_its_node_through_alertmanager_once_per_node(
    tmp_path: Path,
    start_server: Callable[..., RemediateServer],
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    watch_log: Callable[..., None],
) -> None:
    (playbooks_dir / f"{PLAYBOOK}.yaml").write_text((ROOT / "playbooks" / f"{PLAYBOOK}.yaml").read_text())
    server = start_server(
        env={
            "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
            "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
            "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": recorder.url}}),
        }
    )
    am = ShippedAlertManager(tmp_path / "alertmanager", server.webhook_url, token=server.token)
    watch_log("alertmanager", am)
    agent = NodeAgent(
        tmp_path / "agent", NODE, env={"REMEDIATE_GPU_EVENTS_ALERTMANAGER_URL": "http://placeholder.invalid"}
    )
    watch_log("agent", agent)
    with am:
        agent.extra_env["REMEDIATE_GPU_EVENTS_ALERTMANAGER_URL"] = am.url
        agent.start()
        try:
            gpus = agent.gpus.devices()
            agent.gpus.inject_event(gpus[2].uuid, xid=79)

            entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", playbook=PLAYBOOK)
            wait_until(lambda: kube_api.node(NODE)["spec"].get("unschedulable") is True, 30)
            assert entry["target"] == NODE and entry["decision"] == "accepted"
            labels = server.run(entry["run_id"])["alert"]["labels"]
            assert (labels["source"], labels["node"], labels["UUID"], labels["xid"]) == (
                "nvml",
                NODE,
                gpus[2].uuid,
                "79",
            )
            (held,) = [a for a in am.alerts() if a["labels"].get("source") == "nvml"]
            assert held["labels"]["occurrence"] == labels["occurrence"]

            # Another fault of the same node: its own alert, judged, but the node has its one run (cooldown).
            agent.gpus.inject_event(gpus[5 % len(gpus)].uuid, "double_bit_ecc")
            second = wait_until(
                lambda: [e for e in server.history(playbook=PLAYBOOK) if e["fingerprint"] != entry["fingerprint"]], 30
            )
            assert [e["decision"] for e in second] == ["cooldown"], second
            assert len([e for e in server.runs(playbook=PLAYBOOK) if e["run"]["phase"] == "firing"]) == 1
            assert len(kube_api.changes_of("cordon")) == 1
        finally:
            agent.stop()
