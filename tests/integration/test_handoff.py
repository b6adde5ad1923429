"""One owner per node, against the test API server (real HTTP, the official client): node steps
(gpu.*, training.*) on a node a breakfix system owns are refused by the server's dispatch, naming the owner
(`remediate dry-run`'s plan: can_act false), an undo excepted; `remediate node release NODE`, as a real
process, gives the node back to remediate, audited `node_released`, once the re-admission gate (gpu.health over
a soak, on a real `remediate agent` of the node with simulated GPUs) passes; a failed gate keeps the node with its
owner, audited `node_release_refused` with the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remediate.actions import default_registry
from remediate.actions.base import StepContext, Where
from remediate.actions.burnin_common import NOT_CONFIGURED
from remediate.config.settings import Settings
from remediate.executor.dispatch import Dispatch
from remediate.executor.loop import Executor
from remediate.gpu import SimulatedBackend
from remediate.intake.alerts import alert_ref
from remediate.judging.engine import Engine
from remediate.kube import CORDONED_BY_RUN, OWNER, OWNER_SINCE, OWNER_WHY, KubeClient
from remediate.kube.errors import KubeError
from remediate.kube.owner import NodeOwnedElsewhere
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.rehearsal.dryrun import dry_run
from remediate.store import HistoryQuery, Store
from tests.conftest import alert_payload, notification_payload
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.gpu import HEALTHY
from tests.support.helm import Helm, chart_rbac
from tests.support.processes import run_remediate
from tests.support.server import AGENT_TOKEN, NodeAgent
from tests.support.store_json import history_json_of, run_json_of
from tests.support.waiting import scaled, wait_until

ROOT = Path(__file__).resolve().parents[2]

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


def test_release_with_skip_gate_removes_only_the_owner_annotations_and_is_audited(
    kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    kube_api.add_node("gpu-07", annotations={**OWNED, CORDONED_BY_RUN: "3"}, unschedulable=True)
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig), "REMEDIATE_LOG_FORMAT": "json"}

    no_reason = run_remediate("node", "release", "gpu-07", "--skip-gate", env=env)
    assert no_reason.returncode == 2 and "--skip-gate releases without proof of health" in no_reason.stderr
    assert kube_api.count("PATCH", "/nodes/") == 0

    done = run_remediate("node", "release", "gpu-07", "--skip-gate", "--by", "alice", "--reason", "GPU replaced",
                         env=env)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("released gpu-07 is owned by breakfix since 2026-11-27T10:00:00Z: XID 79")
    annotations = kube_api.node("gpu-07")["metadata"]["annotations"]
    assert annotations == {CORDONED_BY_RUN: "3"}  # remediate's own marks stay: its undo still applies
    assert kube_api.node("gpu-07")["spec"]["unschedulable"] is True
    (audit,) = [json.loads(line) for line in done.stderr.splitlines() if '"node_released"' in line]
    fields = ("event", "level", "node", "owner", "owner_since", "principal", "reason", "gate", "released")
    assert {k: audit[k] for k in fields} == {
        "event": "node_released",
        "level": "WARNING",
        "node": "gpu-07",
        "owner": "breakfix",
        "owner_since": "2026-11-27T10:00:00Z",
        "principal": "alice",
        "reason": "GPU replaced",
        "gate": "skipped",
        "released": ["kubernetes"],
    }

    again = run_remediate("node", "release", "gpu-07", env=env)

    assert again.returncode == 0 and "not owned by another system: nothing to release" in again.stdout
    assert "node_released" not in again.stderr


def test_release_of_a_missing_or_invalid_node_is_one_line_and_changes_nothing(
    kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig)}
    missing = run_remediate("node", "release", "gpu-99", env=env)
    assert missing.returncode == 3
    assert missing.stderr.strip() == "Error: node gpu-99 does not exist in the cluster (kubernetes)"

    invalid = run_remediate("node", "release", "GPU_07", env=env)
    assert invalid.returncode == 2 and "Invalid value for NAME" in invalid.stderr and "Traceback" not in invalid.stderr
    assert kube_api.count("PATCH", "/nodes/") == 0

    reads = kube_api.count("GET", "/nodes/")
    bad_values = [("--soak", "2x", "not a duration: '2x'"), ("--every", "0s", "must be between 1s and 1h")]
    for option, value, why in bad_values:
        bad = run_remediate("node", "release", "gpu-07", option, value, env=env)  # checked as gpu.health's params
        assert bad.returncode == 2 and why in bad.stderr, bad.stderr
    assert kube_api.count("GET", "/nodes/") == reads  # refused before anything was read


# --------------------------------------------------------------------------- the re-admission gate on the node's agent


@pytest.fixture
def gpu_07(tmp_path: Path) -> Iterator[NodeAgent]:
    """A real `remediate agent` for gpu-07, its four simulated GPUs healthy."""
    agent = NodeAgent(tmp_path / "gpu-07", "gpu-07").start()
    for gpu in agent.gpus.devices():
        agent.gpus.update_device(gpu.uuid, health=HEALTHY)
    try:
        yield agent
    finally:
        agent.stop()


def _gate_env(kubeconfig: Path, agents: str) -> dict[str, str]:
    return {"REMEDIATE_KUBECONFIG": str(kubeconfig), "REMEDIATE_LOG_FORMAT": "json", "REMEDIATE_AGENTS": agents,
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN}  # fmt: skip


def _audits(stderr: str, event: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if f'"{event}"' in line]


def test_a_release_whose_gate_passes_on_the_nodes_agent_removes_the_annotation(
    kube_api: FakeKubeAPI, kubeconfig: Path, gpu_07: NodeAgent
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)

    done = run_remediate("node", "release", "gpu-07", "--soak", "2s", "--every", "1s", "--reason", "GPU replaced",
                         env=_gate_env(kubeconfig, f"gpu-07={gpu_07.url}"))  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    where = f"gpu-07 (agent {gpu_07.url})"
    assert lines[0] == f"gate: gpu.health on {where}, 3 round(s); dcgmi: skipped: DCGM not installed"
    assert [line for line in lines if line.startswith("round ")] == [
        "round 1/3 at +0s: ok", "round 2/3 at +1s: ok", "round 3/3 at +2s: ok",
    ]  # fmt: skip
    first = gpu_07.gpus.devices()[0]
    assert f"  GPU 0 ({first.uuid})  ecc_dbe_volatile  ok  ecc_dbe_volatile: 0 <= 0" in lines
    # Every check of every GPU in the first round's table; the later rounds, all ok, print their line only.
    table = [line for line in lines[: lines.index("round 2/3 at +1s: ok")] if line.startswith("  GPU ")]
    assert len(table) >= 4 * 5 and sum(1 for line in lines if line.startswith("  GPU ")) == len(table)
    assert f"gate passed on {where}: 3 rounds, no check failed" in lines
    # No burnin_baselines: the burn-in skips itself (no Job), and says why.
    assert lines[-2] == f"burn-in: skipped: {NOT_CONFIGURED}" and not kube_api.jobs
    assert lines[-1].startswith("released gpu-07 is owned by breakfix since 2026-11-27T10:00:00Z")
    assert OWNER not in kube_api.node("gpu-07")["metadata"].get("annotations", {})
    (audit,) = _audits(done.stderr, "node_released")
    assert (audit["gate"], audit["burnin"], audit["ran_on"], audit["released"], audit["reason"]) == (
        "passed", "skipped", where, ["kubernetes"], "GPU replaced",
    )  # fmt: skip


@pytest.mark.parametrize("typed", ["gpu-07", "gpu-07.cluster.example"])
def test_with_baselines_the_release_burns_the_node_in_with_a_job_pinned_to_it_and_prints_its_verdict(
    kube_api: FakeKubeAPI, kubeconfig: Path, gpu_07: NodeAgent, typed: str
) -> None:
    """After the soak, k8s.burnin as the gate runs it (the site's burnin_* settings): its Job, named for this
    release, pinned to the node remediate cordoned, by the name Kubernetes has (a fully qualified name typed finds
    the node by its first label); the test plays the Job's completion with a real burn-in's output (gloo on this
    host), and the release prints the figure against the baseline before giving it back."""
    kube_api.add_node("gpu-07", annotations={**OWNED, CORDONED_BY_RUN: "3"}, unschedulable=True)
    measured = subprocess.run([sys.executable, "-m", "remediate.burnin", "--megabytes", "4", "--iters", "5"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                              capture_output=True, text=True, timeout=scaled(120), check=True)  # fmt: skip
    env = {**_gate_env(kubeconfig, f"gpu-07={gpu_07.url}"), "REMEDIATE_BURNIN_BASELINES": '{"cpu": 0.0001}',
           "REMEDIATE_BURNIN_PYTHON": "/usr/bin/python3", "REMEDIATE_BURNIN_IMAGE": "registry.example/burnin:1",
           "REMEDIATE_BURNIN_NAMESPACE": "remediate"}  # fmt: skip
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    release = threading.Thread(target=lambda: done.setdefault("it", run_remediate(
        "node", "release", typed, "--soak", "1s", "--every", "1s", "--reason", "GPU replaced", env=env,
        timeout=120)))  # fmt: skip
    release.start()
    wait_until(lambda: bool(kube_api.jobs) or not release.is_alive(), scaled(60), message="the burn-in Job")
    (namespace, name), *others = kube_api.jobs
    job = kube_api.job(namespace, name)
    assert job is not None and not others
    assert namespace == "remediate" and name.startswith("remediate-burnin-release-") and len(name) <= 63
    assert job["spec"]["template"]["spec"]["nodeName"] == "gpu-07"
    assert OWNER in kube_api.node("gpu-07")["metadata"]["annotations"]  # nothing released before its verdict
    kube_api.finish_job(namespace, name, succeeded=True, log=measured.stderr + measured.stdout)
    release.join(scaled(60))

    result = done["it"]
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("burn-in")]
    assert line.startswith("burn-in (k8s.burnin) passed on gpu-07: ") and "on 'cpu' >= 8e-05" in line, line
    assert "(0.8 x baseline 0.0001)" in line, line
    assert OWNER not in kube_api.node("gpu-07")["metadata"].get("annotations", {})
    (audit,) = _audits(result.stderr, "node_released")
    assert (audit["gate"], audit["burnin"]) == ("passed", "passed")


def test_a_release_whose_gate_finds_a_volatile_dbe_is_refused_and_the_owner_keeps_the_node(
    kube_api: FakeKubeAPI, kubeconfig: Path, gpu_07: NodeAgent
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)
    bad = gpu_07.gpus.devices()[2]
    gpu_07.gpus.update_device(bad.uuid, health={**HEALTHY, "ecc_dbe_volatile": 2})

    done = run_remediate("node", "release", "gpu-07", "--soak", "2s", "--every", "1s", "--by", "alice",
                         env=_gate_env(kubeconfig, f"gpu-07={gpu_07.url}"))  # fmt: skip

    assert done.returncode == 7, done.stdout + done.stderr
    evidence = f"GPU 2 ({bad.uuid}): ecc_dbe_volatile: 2 > 0"
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("round ")] == ["round 1/3 at +0s: fail"]  # the first fails it
    assert f"  GPU 2 ({bad.uuid})  ecc_dbe_volatile  fail  ecc_dbe_volatile: 2 > 0" in lines
    assert lines[-1] == f"gate failed on gpu-07 (agent {gpu_07.url}) (round 1): {evidence}"
    assert "Error: gpu-07 not released: the re-admission gate failed, so breakfix keeps it" in done.stderr
    assert "remediate node release gpu-07 --skip-gate --reason WHY" in done.stderr
    assert kube_api.node("gpu-07")["metadata"]["annotations"] == OWNED
    assert kube_api.count("PATCH", "/nodes/") == 0
    assert _audits(done.stderr, "node_released") == []
    (audit,) = _audits(done.stderr, "node_release_refused")
    assert {k: audit[k] for k in ("level", "node", "owner", "principal", "gate", "evidence", "rounds")} == {
        "level": "WARNING", "node": "gpu-07", "owner": "breakfix", "principal": "alice", "gate": "failed",
        "evidence": [evidence], "rounds": 1,
    }  # fmt: skip


@pytest.mark.parametrize("agents", ["gpu-08=http://127.0.0.1:9", "gpu-07=http://127.0.0.1:9"])
def test_a_gate_that_cannot_run_no_agent_or_an_unreachable_one_is_a_failure_not_a_pass(
    kube_api: FakeKubeAPI, kubeconfig: Path, agents: str
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)

    done = run_remediate("node", "release", "gpu-07", "--soak", "2s", "--every", "1s",
                         env=_gate_env(kubeconfig, agents))  # fmt: skip

    assert done.returncode == 7, done.stdout + done.stderr
    why = "no agent configured for node 'gpu-07'" if agents.startswith("gpu-08") else "agent of node gpu-07 unreachable"
    assert done.stdout.startswith("gate could not run on gpu-07 (agent ") and why in done.stdout, done.stdout
    assert "the re-admission gate could not run" in done.stderr and "--skip-gate --reason WHY" in done.stderr
    assert kube_api.node("gpu-07")["metadata"]["annotations"] == OWNED
    (audit,) = _audits(done.stderr, "node_release_refused")
    assert audit["gate"] == "error" and why in audit["evidence"][0]


def test_on_the_node_itself_the_gate_runs_here_and_without_nvml_it_is_a_failure(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    """No agents and node_name naming the node: the gate runs in this process, as the executor runs the step. On
    a machine without NVML (the default backend, none here) the gate cannot run: refused, not passed."""
    kube_api.add_node("gpu-07", annotations=OWNED)
    gpus = SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2)
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig), "REMEDIATE_NODE_NAME": "gpu-07", "REMEDIATE_LOG_FORMAT": "json"}

    no_nvml = run_remediate("node", "release", "gpu-07", "--soak", "0s", env=env)

    assert no_nvml.returncode == 7, no_nvml.stdout + no_nvml.stderr
    assert no_nvml.stdout.splitlines()[-1].startswith("gate could not run on gpu-07 (server): ")
    assert kube_api.node("gpu-07")["metadata"]["annotations"] == OWNED

    here = run_remediate("node", "release", "gpu-07", "--soak", "1s", "--every", "1s", "--gpu-backend", "simulated",
                         "--gpu-simulator-file", str(gpus), env=env)  # fmt: skip

    assert here.returncode == 0, here.stdout + here.stderr
    assert "gate passed on gpu-07 (server): 2 rounds, no check failed" in here.stdout.splitlines()
    assert OWNER not in kube_api.node("gpu-07")["metadata"].get("annotations", {})


# --------------------------------------------------------------------------- an owner that cannot be read

CAP_THEN_RESET = """
name: gpu-cap-then-reset
match: {alertname: GPUTemperatureHigh}
target: node
cooldown: 0s
steps:
  - name: cap
    action: gpu.set_power_limit
    with: {gpu: all, percent_of_default: 80}
    retries: 0
  - name: reset
    action: gpu.reset
    with: {gpu: all}
    retries: 0
"""


def _run_on(settings: Settings, store: Store, node: str) -> dict:
    """One alert for `node` through the engine and an executor with the server's own dispatch; the run."""
    registry = default_registry(settings)
    playbooks = PlaybookSet([parse_playbook(yaml.safe_load(CAP_THEN_RESET), registry)])
    executor = Executor(store=store, registry=registry, dispatch=Dispatch.from_settings(settings), retry_wait_max=0.01)
    engine = Engine(store=store, playbooks=playbooks, registry=registry)
    alert = alert_payload("GPUTemperatureHigh", labels={"Hostname": node, "severity": "warning"})
    engine.ingest_body(json.dumps(notification_payload(alert)).encode(), received_at=time.time())
    assert executor.drain() == 1
    ((entry, *_), _) = history_json_of(store, HistoryQuery(limit=1))
    return run_json_of(store, entry["run_id"])


@pytest.mark.parametrize("cause", ["forbidden", "api-down"])
def test_a_power_cap_runs_when_the_nodes_owner_cannot_be_read_and_a_gpu_reset_does_not(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path, store: Store, cause: str
) -> None:
    """A ServiceAccount that may not get nodes (no `get nodes` granted: every request a 403), or an API that is
    down, failed every node step at the owner check: a power cap, a training rollback. A step that keeps the
    node in service runs and says why its owner was not checked; a GPU reset still waits for the API."""
    kube_api.add_node("gpu-07")
    if cause == "forbidden":
        kube_api.authorize_as([], ("gpu-ops", "rel-remediate"))
        why = 'GET nodes/gpu-07: 403 Forbidden: nodes "gpu-07" is forbidden'
    else:
        kube_api.close()
        why = "GET nodes/gpu-07: "
    gpus = SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2)
    default_limits = [g.power_limit_mw for g in SimulatedBackend(gpus).devices()]
    settings = Settings.of(
        kubeconfig=kubeconfig, kube_request_timeout=1.0, gpu_backend="simulated", gpu_simulator_file=gpus,
        node_name="gpu-07",
    )  # fmt: skip

    run = _run_on(settings, store, "gpu-07")

    cap, reset = run["steps"]
    assert cap["status"] == "succeeded", cap
    unchecked = "the owner of node gpu-07 could not be read: " + why
    for recorded in (cap["plan"], cap["result"]):
        assert recorded["owner_check"].startswith(unchecked), recorded
        assert recorded["owner_check"].endswith(
            "gpu.set_power_limit keeps the node in service, so it ran without that check"
        )
    assert [g.power_limit_mw for g in SimulatedBackend(gpus).devices()] == [m * 8 // 10 for m in default_limits]
    assert reset["status"] == "failed" and reset["attempts"] == []
    assert (
        reset["error"].startswith("plan failed: " + unchecked)
        and "gpu.reset does not run without that check" in (reset["error"])
    )
    assert [SimulatedBackend(gpus).reset_count(g.uuid) for g in SimulatedBackend(gpus).devices()] == [0, 0]


def test_with_the_charts_rbac_without_kubernetes_actions_node_steps_still_check_the_owner(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path, store: Store, helm: Helm
) -> None:
    """`rbac.kubernetesActions: false` granted nothing on nodes, so every node step failed with `GET nodes: 403`.
    The chart grants `get nodes` alone then: the owner is read, an owned node is still refused, and nothing
    else on nodes is allowed (a cordon's PATCH is the API's 403)."""
    rbac = chart_rbac(helm, {"rbac": {"kubernetesActions": False}})
    kube_api.authorize_as(rbac.objects, rbac.service_account)
    kube_api.add_node("gpu-07")
    kube_api.add_node("gpu-08", annotations=OWNED)
    gpus = SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2)
    settings = Settings.of(
        kubeconfig=kubeconfig, gpu_backend="simulated", gpu_simulator_file=gpus, node_name="gpu-07",
        node_aliases=("gpu-08",),
    )  # fmt: skip

    free = _run_on(settings, store, "gpu-07")
    cap, reset = free["steps"]
    assert cap["status"] == "succeeded" and "owner_check" not in cap["plan"], cap  # checked: nobody else owns it
    assert "GPU reset refused, nothing was reset" in reset["error"]  # past the check: the GPU's own refusal
    owned = _run_on(settings, store, "gpu-08")
    assert owned["steps"][0]["status"] == "failed" and "gpu-08 is owned by breakfix" in owned["steps"][0]["error"]

    with pytest.raises(KubeError, match=r"PATCH nodes/gpu-07: 403 Forbidden"):
        KubeClient(kubeconfig=kubeconfig).patch_node("gpu-07", {"spec": {"unschedulable": True}})


def test_the_node_steps_that_run_without_an_owner_check_are_those_docs_kubernetes_md_names() -> None:
    """Which node steps run when the owner cannot be read is a safety decision: the code and the page agree."""
    registry = default_registry(Settings())
    node_actions = [a for a in map(registry.get, registry.names()) if a.where == Where.NODE and not a.undoes]
    unchecked = sorted(a.name for a in node_actions if a.runs_if_owner_unknown)
    waiting = sorted(a.name for a in node_actions if not a.runs_if_owner_unknown)
    assert waiting == ["disk.cleanup", "gpu.reset"]
    page = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    section = page.split("### When the owner cannot be read", 1)[1].split("\n## ", 1)[0]
    for name in unchecked:
        family = name.split(".")[0] + ".*"
        assert f"`{name}`" in section or f"`{family}`" in section, name
    assert all(f"`{name}`" in section for name in waiting)
