"""End to end: the shipped gpu-xid-quarantine's re-admission gate run where a site runs it, on the node's agent.

A real AlertManager -> the real ``remediate serve`` (gunicorn, no GPUs and no node name of its own: every node
step goes to an agent, signed with the node's credential derived from agent_token) -> the test Kubernetes API
server (the chart's RBAC), and a real ``remediate agent`` for NODE with its own simulated GPUs (a `health`
section each: what NVML would answer there). The playbook is the shipped one but for its waits: proven-healthy
holds 2 s, the gate soaks seconds instead of 30 minutes (tests.support.shipped). On-call and breakfix post to
one HTTP recorder. What happened is read back from /runs/<id>, the node and the recorder.

A healthy node passes every soak round on its agent and is given back; a node whose GPU shows volatile
double-bit ECC errors is kept out, handed to breakfix, and on-call reads the evidence; an agent killed in the
middle of the soak fails the gate (it never passes for want of an answer) and on-call reads that the agent was
unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dcgm_exporter import exporting_gpus
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import AlertManager, WebhookRecorder
from tests.support.server import AGENT_TOKEN, NodeAgent, RemediateServer
from tests.support.shipped import quicken_checks, quicken_gate, shipped_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

PLAYBOOK = "gpu-xid-quarantine"
NODE = "gpu-node-03"  # one of cluster()'s nodes
LABELS = {"alertname": "GPUXidCritical", "severity": "critical", "Hostname": NODE}  # the shipped rule's
SUMMARY = {"summary": f"1 GPU(s) on {NODE} reported a serious XID error"}

StartSite = Callable[..., RemediateServer]


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        # The server may do exactly what the Helm chart's RBAC grants its ServiceAccount (else 403).
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        cluster(api, 20)
        yield api


@pytest.fixture
def agent(start_agent: Callable[..., NodeAgent]) -> NodeAgent:
    return start_agent(NODE)


@pytest.fixture
def start_site(
    start_server: Callable[..., RemediateServer],
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    agent: NodeAgent,
    tmp_path: Path,
) -> Iterator[StartSite]:
    """start_site(soak=...) -> the server, running the shipped playbook with the gate's soak `soak` (a round a
    second), Prometheus seeing every GPU of the agent's node."""
    uuids = [gpu.uuid for gpu in agent.gpus.devices()]
    with exporting_gpus(tmp_path / "prom", NODE, uuids) as (_, prom):

        def start(*, soak: str = "2s") -> RemediateServer:
            playbook = quicken_checks(shipped_playbook(PLAYBOOK), holds="2s", gives_up=scaled(10))
            quicken_gate(playbook, soak=soak, every="1s")
            (playbooks_dir / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
            sink = {"type": "webhook", "url": recorder.url}
            return start_server(
                env={
                    "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
                    "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
                    "REMEDIATE_PROMETHEUS_URL": prom.url,
                    "REMEDIATE_SINKS": json.dumps({"oncall": sink, "breakfix": sink}),
                    # NODE's steps go to its agent; the server runs none of them itself (no node name).
                    "REMEDIATE_AGENTS": f"{NODE}={agent.url}",
                    "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
                }
            )

        yield start


def _steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def _quarantined(server: RemediateServer, am: AlertManager, kube_api: FakeKubeAPI) -> None:
    am.fire(LABELS, SUMMARY)
    server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK)
    assert kube_api.node(NODE)["spec"]["unschedulable"] is True


def _resolved(server: RemediateServer, am: AlertManager) -> dict[str, dict[str, Any]]:
    """The alert resolved; the steps of its resolve run, once the run is over (the gate's soak comes on top)."""
    am.resolve(LABELS)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)
    return _steps(server.wait_for_run_status(entry["run_id"], "succeeded", "failed", timeout=60))


def _kept_out_and_handed_off(kube_api: FakeKubeAPI) -> None:
    node = kube_api.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == ["remediate.io/gpu-unhealthy"]
    assert node["metadata"]["annotations"]["remediate.io/owner"] == "breakfix"
    assert "failed the re-admission gate" in node["metadata"]["annotations"]["remediate.io/owner-why"]


def test_a_healthy_node_passes_the_gate_on_its_agent_and_is_given_back(
    start_site: StartSite,
    start_alertmanager: Callable[..., AlertManager],
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    agent: NodeAgent,
) -> None:
    server = start_site()
    am = start_alertmanager(server.webhook_url)
    _quarantined(server, am, kube_api)

    undo = _resolved(server, am)
    gate = undo["gate"]
    assert gate["status"] == "succeeded", gate
    # Where it ran: on NODE's agent (the server has no GPUs and plays no node), the plan as much as the soak.
    assert gate["plan"]["ran_on"] == gate["result"]["ran_on"] == f"{NODE} (agent {agent.url})"
    soak = gate["result"]["soak"]
    assert (soak["window_s"], soak["every_s"], soak["rounds_run"]) == (2.0, 1.0, 3), soak
    assert [r["verdict"] for r in soak["rounds"]] == ["ok", "ok", "ok"]
    # Every one of the agent's four GPUs read, by its UUID there.
    assert sorted(g["gpu"] for g in gate["result"]["gpus"]) == sorted(g.uuid for g in agent.gpus.devices())
    assert [undo[n]["status"] for n in ("proven-healthy", "untaint", "uncordon", "handoff", "notify-resolved")] == [
        "succeeded"
    ] * 5
    assert undo["untaint"]["result"]["outcome"] == "untainted"
    assert undo["uncordon"]["result"]["outcome"] == "uncordoned"
    assert undo["handoff"]["result"]["outcome"] == "not_needed"  # `always`, but the gate passed
    node = kube_api.node(NODE)
    assert node["spec"].get("unschedulable") is None and node["spec"].get("taints") == []
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    assert "It passed the re-admission gate" in told.json["message"], told.json["message"]


def test_a_node_whose_agent_reads_double_bit_ecc_errors_stays_out_and_on_call_reads_the_evidence(
    start_site: StartSite,
    start_alertmanager: Callable[..., AlertManager],
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    agent: NodeAgent,
) -> None:
    """Prometheus sees every GPU again, but on the node NVML counts volatile double-bit ECC errors on GPU 2."""
    server = start_site()
    am = start_alertmanager(server.webhook_url)
    _quarantined(server, am, kube_api)
    bad = agent.gpus.devices()[2]
    section = {"ecc_dbe_volatile": 2, "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}}
    agent.gpus.update_device(bad.uuid, health=section)

    kept = _resolved(server, am)
    assert [kept[n]["status"] for n in ("proven-healthy", "gate", "untaint", "uncordon", "handoff")] == [
        "succeeded",
        "failed",
        "skipped",
        "skipped",
        "succeeded",
    ]
    gate = kept["gate"]
    evidence = f"GPU 2 ({bad.uuid}): ecc_dbe_volatile: 2 > 0"
    assert evidence in gate["error"] and "soak round 1 of 3" in gate["error"], gate["error"]
    # The agent's partial result crossed the wire: every GPU's checks stay with the failed step.
    assert gate["result"]["ran_on"] == f"{NODE} (agent {agent.url})"
    assert gate["result"]["failed"] == [evidence]
    assert {g["gpu"]: g["verdict"] for g in gate["result"]["gpus"]}[bad.uuid] == "fail"
    assert kept["handoff"]["result"]["outcome"] == "handed_off"
    _kept_out_and_handed_off(kube_api)
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert "The node stays out: it FAILED the re-admission gate: node unhealthy" in message, message
    assert evidence in message and "It is handed to breakfix." in message, message
    ticket = recorder.wait_for(lambda r: "failed the re-admission gate" in (r.json or {}).get("message", ""))
    assert evidence in ticket.json["message"]


def test_an_agent_killed_in_the_middle_of_the_soak_fails_the_gate_and_on_call_reads_it_was_unreachable(
    start_site: StartSite,
    start_alertmanager: Callable[..., AlertManager],
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    agent: NodeAgent,
) -> None:
    """A soak of a minute; the agent is SIGKILLed once it runs the gate: no answer is never a pass."""
    server = start_site(soak="60s")
    am = start_alertmanager(server.webhook_url)
    _quarantined(server, am, kube_api)

    am.resolve(LABELS)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)
    # The agent's audit line of the gate's execute: the soak is running there.
    wait_until(
        lambda: any(
            "call execute" in line and "action gpu.health" in line for line in agent.log_tail(200).splitlines()
        ),
        30,
        interval=0.1,
        message="the agent never ran the gate",
    )
    agent.kill()

    run = server.wait_for_run_status(entry["run_id"], "succeeded", "failed", timeout=60)
    assert run["status"] == "failed"
    kept = _steps(run)
    gate = kept["gate"]
    assert gate["status"] == "failed", gate
    assert f"agent of node {NODE} unreachable" in gate["error"], gate["error"]
    assert gate["finished_at"] - gate["started_at"] < 60  # failed on the cut call, not at the soak's end
    assert [kept[n]["status"] for n in ("untaint", "uncordon", "handoff")] == ["skipped", "skipped", "succeeded"]
    assert kept["handoff"]["result"]["outcome"] == "handed_off"
    _kept_out_and_handed_off(kube_api)
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert f"The node stays out: it FAILED the re-admission gate: agent of node {NODE} unreachable" in message, message
    assert "It is handed to breakfix." in message, message
