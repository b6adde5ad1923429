"""End to end: real AlertManager 0.25 -> real ``remediate serve`` (gunicorn, 2 workers) running the shipped
``playbooks/gpu-xid-quarantine.yaml`` -> the test Kubernetes API server (real HTTP; the server's official
client reads a kubeconfig named by REMEDIATE_KUBECONFIG, as it would for a real cluster).

What happened is read back the way an operator would: ``GET /history`` and ``GET /runs/<id>``, ``GET
/breaker``, ``remediate breaker status --server``, and from the cluster's side (the node, its pods,
its Events) through the test API server, which authorizes every request of the server against the
RBAC that the Helm chart renders for its ServiceAccount: a call the chart does not grant is a 403 here
as on a cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.gpu import SimulatedBackend
from tests.support.dcgm_exporter import exporting_gpus, gpu_series
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.processes import REMEDIATE, run_remediate
from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, WebhookRecorder
from tests.support.server import TOKEN, RemediateServer
from tests.support.shipped import every_step, quicken_checks, quicken_gate, shipped_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = "gpu-xid-quarantine"
NODE = "gpu-node-03"
SINKS = ("oncall", "breakfix")

StartServer = Callable[..., RemediateServer]
StartAlertManager = Callable[..., AlertManager]


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        # The server may do exactly what the Helm chart's RBAC grants its ServiceAccount (else 403).
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        cluster(api, 20)
        api.add_pod("ml", "trainer-5c7d-aaaaa", NODE, labels={"app": "trainer"})
        api.add_pod("ml", "trainer-5c7d-bbbbb", NODE, labels={"app": "trainer"})
        api.add_pod("ml", "redis-0", NODE, owner="StatefulSet", owner_name="redis", replace_on_delete=True)
        api.add_pod("kube-system", f"dcgm-exporter-{NODE}", NODE, owner="DaemonSet", owner_name="dcgm-exporter")
        api.add_pdb("ml", "trainer", {"app": "trainer"}, disruptions_allowed=1, heal_after=0.5)
        api.add_node("cordoned-by-ops", unschedulable=True)
        api.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
        api.add_pod("kube-system", "coredns-7db6d-ccccc", "cp-1", labels={"k8s-app": "kube-dns"})
        yield api


@pytest.fixture
def gpu_metrics(tmp_path: Path) -> Iterator[tuple[MetricsEndpoint, Prometheus]]:
    """A real Prometheus scraping what dcgm-exporter would export for NODE's two GPUs (the proven-healthy check
    before the undo reads it)."""
    with exporting_gpus(tmp_path / "prom", NODE, [f"GPU-{NODE}-{gpu}" for gpu in (0, 1)]) as exported:
        yield exported


@pytest.fixture
def gpus(tmp_path: Path) -> SimulatedBackend:
    """NODE's two GPUs as NVML shows them to the re-admission gate (gpu.health): healthy, idle."""
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2))


@pytest.fixture
def server(
    start_server: StartServer,
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    gpu_metrics: tuple[MetricsEndpoint, Prometheus],
    gpus: SimulatedBackend,
    tmp_path: Path,
) -> RemediateServer:
    # As shipped, but for the waits: the proven-healthy check asks for 2 s of evidence, not 10 minutes, and the
    # re-admission gate soaks 2 s (a round a second), not 30 minutes.
    playbook = quicken_gate(quicken_checks(shipped_playbook(PLAYBOOK), holds="2s", gives_up=scaled(10)))
    for step in every_step(playbook):
        if step["action"] == "k8s.drain":
            step["with"]["pdb_retry_interval"] = 0.2
    (playbooks_dir / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    kubeconfig = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    return start_server(
        env={
            "REMEDIATE_KUBECONFIG": str(kubeconfig),
            "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
            "REMEDIATE_PROMETHEUS_URL": gpu_metrics[1].url,
            # The shipped playbook notifies the `oncall` sink and hands off to `breakfix`: the recorder, both.
            "REMEDIATE_SINKS": json.dumps(
                {n: {"type": "webhook", "url": recorder.url} for n in ("oncall", "breakfix")}
            ),
            # NODE's node steps (its gate) run here, on simulated GPUs: the server plays NODE's agent.
            "REMEDIATE_NODE_NAME": NODE,
            "REMEDIATE_GPU_BACKEND": "simulated",
            "REMEDIATE_GPU_SIMULATOR_FILE": str(gpus.path),
        }
    )


def _labels(node: str) -> dict[str, str]:
    # What the shipped GPUXidCritical rule sends (alertmanager/rules/xid.rules.test.yml).
    return {"alertname": "GPUXidCritical", "severity": "critical", "Hostname": node}


def _steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def test_an_xid_alert_quarantines_its_node_and_the_resolution_brings_it_back(
    server: RemediateServer,
    start_alertmanager: StartAlertManager,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
) -> None:
    am = start_alertmanager(server.webhook_url)
    am.fire(_labels(NODE), {"summary": f"1 GPU(s) on {NODE} reported a serious XID error"})

    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK)
    assert entry["target"] == NODE and entry["decision"] == "accepted"
    run = server.run(entry["run_id"])
    steps = _steps(run)
    assert [(s["action"], s["status"]) for s in run["steps"]] == [
        ("training.checkpoint_node", "succeeded"),  # run here (the server plays NODE): no training job to save
        ("k8s.cordon", "succeeded"),
        ("k8s.taint", "succeeded"),
        ("k8s.drain", "succeeded"),
        ("notify", "succeeded"),
    ]
    assert steps["checkpoint-jobs"]["continue_on_error"]
    assert run["status"] == "succeeded" and run["error"] is None
    assert steps["cordon"]["plan"]["breaker"]["cap"] == 2  # min(10% of 22 nodes, 3)
    assert steps["cordon"]["result"]["outcome"] == "cordoned"
    assert steps["taint"]["result"]["taint"] == "remediate.io/gpu-unhealthy=gpuxidcritical:NoSchedule"
    drain = steps["drain"]["result"]
    assert sorted(e["pod"] for e in drain["evicted"]) == [
        "ml/redis-0",
        "ml/trainer-5c7d-aaaaa",
        "ml/trainer-5c7d-bbbbb",
    ]
    assert [s["pod"] for s in drain["skipped"]] == [f"kube-system/dcgm-exporter-{NODE}"]
    assert drain["complete"] is True and drain["blocked"] == []

    # The cluster's side: cordoned and tainted with remediate's marks, pods gone, Events on the node.
    node = kube_api.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["remediate.io/cordoned-by-run"] == str(run["id"])
    assert [t["key"] for t in node["spec"]["taints"]] == ["remediate.io/gpu-unhealthy"]
    assert sorted(e["reason"] for e in kube_api.events_about(NODE)) == [
        "RemediateCordoned",
        "RemediateDrained",
        "RemediateTainted",
    ]
    assert all(e["regarding"]["uid"] == node["metadata"]["uid"] for e in kube_api.events_about(NODE))
    # The trainer PDB blocked the second eviction until the first replacement was healthy.
    assert 429 in [code for method, path, code in kube_api.requests if method == "POST" and "eviction" in path]
    notified = recorder.wait_for(lambda r: "Quarantined" in (r.json or {}).get("message", ""))
    assert notified.json["target"] == NODE

    breaker = server.get("/breaker")
    assert breaker["open"] is False and breaker["held_nodes"] == [NODE]

    am.resolve(_labels(NODE))
    resolved = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)
    server.wait_for_run_status(resolved["run_id"], "succeeded", "failed")  # the gate's soak comes on top
    undo = _steps(server.run(resolved["run_id"]))
    # Both GPUs the node reported today report again (Prometheus, for the check's window): proven, undone.
    assert undo["proven-healthy"]["status"] == "succeeded", undo["proven-healthy"]
    # ... and the node's own NVML checks passed every round of the soak: the re-admission gate.
    assert [r["verdict"] for r in undo["gate"]["result"]["soak"]["rounds"]] == ["ok", "ok", "ok"], undo["gate"]
    # ... and its burn-in, which with no burnin_* settings (the default) succeeds as skipped: no Job is created.
    burnin = undo["k8s-burnin"]
    assert (burnin["status"], burnin["result"]["outcome"]) == ("succeeded", "skipped"), burnin
    assert "no burn-in configured: set burnin_baselines" in burnin["result"]["reason"]
    assert not [path for method, path, _ in kube_api.requests if method == "POST" and "/jobs" in path]
    assert undo["handoff"]["result"]["outcome"] == "not_needed"  # `always`, but the gate passed
    assert undo["untaint"]["result"]["outcome"] == "untainted"
    assert undo["uncordon"]["result"]["outcome"] == "uncordoned"
    node = kube_api.node(NODE)
    assert node["spec"].get("unschedulable") is None and node["spec"].get("taints") == []
    assert not any(k.startswith("remediate.io/") for k in node["metadata"]["annotations"])
    assert len(kube_api.changes_of("cordon")) == len(kube_api.changes_of("uncordon")) == 1
    assert server.get("/breaker")["held_nodes"] == []
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    assert "NO burn-in ran: no burn-in configured: set burnin_baselines" in told.json["message"], told.json["message"]

    # The CLI against the running server.
    shown = run_remediate(
        "breaker", "status", "--server", server.url, "--json", env={"REMEDIATE_TOKEN": TOKEN}, timeout=30
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "closed"


def test_a_node_whose_gpu_fell_off_the_bus_stays_out_when_its_alert_resolves(
    server: RemediateServer,
    start_alertmanager: StartAlertManager,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    gpu_metrics: tuple[MetricsEndpoint, Prometheus],
) -> None:
    """The alert resolves (the exporter restarted and no longer latches the XID, or went silent), but one of the
    two GPUs the node reported today is gone from Prometheus: not proven healthy, so nothing is undone."""
    am = start_alertmanager(server.webhook_url)
    am.fire(_labels(NODE), {"summary": f"1 GPU(s) on {NODE} reported a serious XID error"})
    server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK)
    metrics, prom = gpu_metrics
    metrics.remove("DCGM_FI_DEV_GPU_TEMP", gpu_series(NODE, 1, f"GPU-{NODE}-1"))
    # Gone from Prometheus (its next scrape marks it stale) before the resolution: a resolution that arrives
    # faster than that scrape would find both GPUs reporting, and the node proven healthy.
    wait_until(
        lambda: not prom.query(f'DCGM_FI_DEV_GPU_TEMP{{UUID="GPU-{NODE}-1"}}'),
        scaled(10),
        interval=0.2,
        message="GPU 1's series never went stale",
    )
    am.resolve(_labels(NODE))
    held = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="failed", playbook=PLAYBOOK)
    kept = _steps(server.run(held["run_id"]))
    assert kept["proven-healthy"]["status"] == "failed", kept["proven-healthy"]
    assert [kept[n]["status"] for n in ("gate", "k8s-burnin", "untaint", "uncordon", "handoff", "notify-resolved")] == [
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "succeeded",  # `always`: nothing handed off, the gate did not fail (it never ran)
        "succeeded",
    ]
    assert kept["handoff"]["result"]["outcome"] == "not_needed"
    node = kube_api.node(NODE)
    assert node["spec"]["unschedulable"] is True and [t["key"] for t in node["spec"]["taints"]] == [
        "remediate.io/gpu-unhealthy"
    ]
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    assert "The node stays out: its GPUs did not all report again" in told.json["message"]


def test_a_node_that_fails_the_readmission_gate_stays_out_is_handed_off_and_on_call_reads_why(
    server: RemediateServer,
    start_alertmanager: StartAlertManager,
    kube_api: FakeKubeAPI,
    recorder: WebhookRecorder,
    gpus: SimulatedBackend,
) -> None:
    """Prometheus sees both GPUs again, but NVML says GPU 0's PCIe link trained down to x8 (of x16): the gate's
    first round fails, the node stays cordoned and tainted, is handed to breakfix (remediate.io/owner), and
    on-call's message names the check and its values."""
    am = start_alertmanager(server.webhook_url)
    am.fire(_labels(NODE), {"summary": f"1 GPU(s) on {NODE} reported a serious XID error"})
    server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK)
    bad = gpus.devices()[0]
    gpus.update_device(bad.uuid, health={"pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}})

    am.resolve(_labels(NODE))
    held = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="failed", playbook=PLAYBOOK)
    kept = _steps(server.run(held["run_id"]))
    assert [kept[n]["status"] for n in ("proven-healthy", "gate", "k8s-burnin", "untaint", "uncordon", "handoff")] == [
        "succeeded",
        "failed",
        "skipped",
        "skipped",
        "skipped",
        "succeeded",
    ]
    evidence = f"GPU 0 ({bad.uuid}): pcie_width: pcie width x8 < max x16"
    assert evidence in kept["gate"]["error"], kept["gate"]["error"]
    assert kept["gate"]["result"]["failed"] == [evidence]  # every GPU's checks stay with the failed step
    assert kept["handoff"]["result"]["outcome"] == "handed_off"
    node = kube_api.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == ["remediate.io/gpu-unhealthy"]
    assert node["metadata"]["annotations"]["remediate.io/owner"] == "breakfix"
    assert "failed the re-admission gate" in node["metadata"]["annotations"]["remediate.io/owner-why"]
    told = recorder.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert "The node stays out: it FAILED the re-admission gate: node unhealthy" in message, message
    assert evidence in message and "It is handed to breakfix." in message, message
    ticket = recorder.wait_for(lambda r: "failed the re-admission gate" in (r.json or {}).get("message", ""))
    assert evidence in ticket.json["message"]


def test_a_server_whose_playbooks_cordon_watches_the_nodes_from_its_start(
    server: RemediateServer, kube_api: FakeKubeAPI
) -> None:
    """Before any alert: the first cordon must not wait for a list of the whole cluster (a minute at 10,000
    nodes on the test API server)."""
    wait_until(
        lambda: (server.get("/readyz").get("node_cache") or {}).get("fresh") is True,
        scaled(20),
        message="the node cache never showed in /readyz before any alert",
    )
    assert kube_api.request_count(verb="list", resource="nodes") == 1
    assert kube_api.request_count(verb="watch", resource="nodes") >= 1
    assert server.history() == []


def test_an_alert_naming_a_control_plane_node_changes_nothing_and_the_run_says_why(
    server: RemediateServer, start_alertmanager: StartAlertManager, kube_api: FakeKubeAPI
) -> None:
    """`Hostname=cp-1` cordoned a control-plane node."""
    am = start_alertmanager(server.webhook_url)
    am.fire(_labels("cp-1"), {"summary": "XID on a control-plane node"})

    entry = server.wait_for_run(lambda e: e["target"] == "cp-1", status="failed", playbook=PLAYBOOK)
    run = server.run(entry["run_id"])
    cordon = _steps(run)["cordon"]
    assert cordon["status"] == "failed"
    assert "node cp-1 (from label Hostname) is a control-plane node" in cordon["error"]
    assert "kube_allow_control_plane" in run["error"]
    assert not [s for s in run["steps"] if s["action"] in ("k8s.taint", "k8s.drain") and s["status"] == "succeeded"]
    assert kube_api.node("cp-1")["spec"].get("unschedulable") is None
    assert kube_api.changes == []
    assert server.get("/breaker")["held_nodes"] == []


def test_a_storm_trips_the_breaker_which_stays_open_until_reset(
    server: RemediateServer, start_alertmanager: StartAlertManager, kube_api: FakeKubeAPI
) -> None:
    am = start_alertmanager(server.webhook_url, group_by=["alertname", "Hostname"])
    nodes = [f"gpu-node-{i:02d}" for i in range(10, 16)]
    for node in nodes:
        am.fire(_labels(node), {"summary": "storm"})

    def settled() -> list[dict[str, Any]] | None:
        entries = server.history(playbook=PLAYBOOK)
        done = [e for e in entries if e["status"] in ("succeeded", "failed", "breaker_open")]
        return entries if len(done) >= len(nodes) else None

    entries = wait_until(settled, 40, interval=0.2, message="the storm's runs did not all finish")
    cordoned = [n for n in nodes if kube_api.node(n)["spec"].get("unschedulable")]
    assert len(cordoned) == 2  # min(10% of 22 nodes, 3) = 2
    refused = [e for e in entries if e["status"] in ("failed", "breaker_open")]
    assert len(refused) == len(nodes) - 2
    for entry in refused:
        reason = entry["run"]["error"] if entry["run"] else entry["reason"]
        assert "breaker open" in reason
    assert kube_api.node("cordoned-by-ops")["spec"]["unschedulable"] is True
    assert server.get("/breaker")["open"] is True
    assert server.metric("remediate_breaker_open") == 1

    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env["REMEDIATE_TOKEN"] = TOKEN
    reset = subprocess.run(
        [
            str(REMEDIATE),
            "breaker",
            "reset",
            "--server",
            server.url,
            "--by",
            "e2e",
            "--reason",
            "ok",
        ],
        capture_output=True,
        text=True,
        timeout=scaled(30),
        env=env,
        check=False,
    )
    assert reset.returncode == 0, reset.stderr
    assert "circuit breaker reset by e2e: ok" in reset.stdout and "breaker: closed" in reset.stdout
    assert server.get("/breaker")["reset_by"] == "token (note: e2e)"
    assert server.metric("remediate_breaker_open") == 0
