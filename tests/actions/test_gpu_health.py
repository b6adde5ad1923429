"""gpu.health over a simulated GPU file: each check healthy and faulted, the result's shape, the step's failure
carrying the evidence (directly and through the engine and executor), fail_on, and dcgmi diag on PATH or absent.

The action is remediate/actions/gpu_health.py (its verdicts: gpu_health_checks.py) on the backends'
`health_scan` capability; this file is its one test file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry, StepContext
from remediate.actions.gpu_health import DIAG_MARGIN_S, DiagTimedOut, HealthAction, NodeUnhealthy
from remediate.agent.service import AgentService
from remediate.errors import ParamsError, PartialFailure
from remediate.executor.agent_calls import AgentRunner, StaticAgents
from remediate.gpu import BackendNotSupported, GpuInfo, GpuNotFound, SimulatedBackend
from remediate.intake.alertref import AlertRef
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.support.agent import AGENT_TOKEN, agent_settings, serve_agent
from tests.support.gpu import (
    HEALTHY,
    PowerOnlyBackend,
    alert_on_gpu,
    healthy_simulator,
    node_playbook,
    simulated_registry,
    step_context,
)
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled
from tests.unit.gpu.test_dcgm_diag import fake_dcgmi, fixture

T0 = 1_767_225_600.0


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return healthy_simulator(tmp_path)


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    """Overrides the shared fixture; the power floor wraps the backend: the scan must pass through it."""
    return simulated_registry(sim, db_url, gpu_power_floor_watts=300)


@pytest.fixture
def no_dcgm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def checks(result: dict[str, Any], index: int) -> dict[str, tuple[str, str]]:
    gpu = next(g for g in result["gpus"] if g["index"] == index)
    return {c["check"]: (c["verdict"], c["evidence"]) for c in gpu["checks"]}


def run(registry: ActionRegistry, **params: Any) -> dict[str, Any]:
    action = registry.get("gpu.health")
    return action.execute(action.validate(params), step_context())


def failing(registry: ActionRegistry, **params: Any) -> NodeUnhealthy:
    action = registry.get("gpu.health")
    with pytest.raises(NodeUnhealthy) as caught:
        action.execute(action.validate(params), step_context())
    return caught.value


def test_a_healthy_node_passes_every_check_with_its_evidence(registry: ActionRegistry) -> None:
    action = registry.get("gpu.health")
    assert (action.where, action.idempotent, action.runs_if_owner_unknown) == ("node", True, True)
    result = run(registry)
    assert (result["verdict"], result["failed"], result["warnings"]) == ("ok", [], [])
    assert [g["verdict"] for g in result["gpus"]] == ["ok", "ok"]
    assert checks(result, 0) == {
        "on_bus": ("ok", "answers NVML"),
        "retired_pages": (
            "skipped",
            "not supported: this GPU or driver does not report page retirement (Ampere and later remap rows instead)",
        ),
        "row_remap": ("ok", "row remap pending: false, failure: false (remapped rows: 0 correctable, 0 uncorrectable)"),
        "ecc_dbe_volatile": ("ok", "ecc_dbe_volatile: 0 <= 0"),
        "pcie_width": ("ok", "pcie width x16 = max x16"),
        "pcie_gen": ("ok", "pcie gen 5 = max gen 5"),
        "clock_throttle": (
            "ok",
            "clock event reasons ['gpu_idle']: none of ['hw_slowdown', 'hw_power_brake', 'hw_thermal', 'sw_thermal']",
        ),
        "nvlink_errors": ("ok", "1 active link(s) within the error thresholds"),
    }
    gpu0 = result["gpus"][0]
    assert gpu0["read"]["pcie"] == {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}
    assert result["diag"]["verdict"] == "skipped"
    assert result["thresholds"]["max_ecc_dbe_volatile"] == 0


FAULTS = [
    ({"health": {**HEALTHY, "ecc_dbe_volatile": 2}}, "ecc_dbe_volatile", "ecc_dbe_volatile: 2 > 0"),
    (
        {"health": {**HEALTHY, "pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}}},
        "pcie_width",
        "pcie width x8 < max x16",
    ),
    (
        {
            "health": {
                **HEALTHY,
                "pcie": {"gen": 3, "max_gen": 5, "width": 16, "max_width": 16},
                "utilization_percent": 90,
            }
        },
        "pcie_gen",
        "pcie gen 3 < max gen 5 at 90% GPU utilization >= 50%",
    ),
    (
        {"health": {**HEALTHY, "clock_event_reasons": ["sw_power_cap", "hw_slowdown"]}},
        "clock_throttle",
        "clock event reasons ['hw_slowdown'] active (fail on ['hw_slowdown', 'hw_power_brake', 'hw_thermal', "
        "'sw_thermal'])",
    ),
    (
        {"health": {**HEALTHY, "clock_event_reasons": ["hw_power_brake"]}},
        "clock_throttle",
        "clock event reasons ['hw_power_brake'] active (fail on ['hw_slowdown', 'hw_power_brake', 'hw_thermal', "
        "'sw_thermal'])",
    ),
    (
        {"health": {**HEALTHY, "nvlink_errors": {0: {"recovery": 1}, 3: {"replay": 60, "crc_flit": 41}}}},
        "nvlink_errors",
        "link 0 recovery errors: 1 > 0; link 3 replay+CRC errors: 101 > 100",
    ),
    (
        {"remapped_rows": {"correctable": 0, "uncorrectable": 3, "pending": True, "failure": False}},
        "row_remap",
        "row remap pending: true (a GPU reset applies it) (remapped rows: 0 correctable, 3 uncorrectable)",
    ),
    (
        {"remapped_rows": {"correctable": 0, "uncorrectable": 512, "pending": False, "failure": True}},
        "row_remap",
        "row remap failure: true: no spare rows left, the GPU needs service (remapped rows: 0 correctable, "
        "512 uncorrectable)",
    ),
    (
        {"retired_pages": {"single_bit": 0, "double_bit": 1, "pending": True}},
        "retired_pages",
        "retired pages pending: true (a GPU reset applies them)",
    ),
]


@pytest.mark.parametrize(("change", "check", "evidence"), FAULTS, ids=[f[1] for f in FAULTS])
def test_each_fault_fails_its_check_and_the_step_with_the_evidence(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None, change: dict[str, Any], check: str, evidence: str
) -> None:
    uuid = sim.devices()[1].uuid
    sim.update_device(uuid, **change)
    error = failing(registry)
    assert isinstance(error, PartialFailure)  # the executor keeps `result` with the failed step
    said = evidence if evidence.startswith(check) else f"{check}: {evidence}"  # the name once
    assert str(error) == f"node unhealthy: GPU 1 ({uuid}): {said}"
    result = error.result
    assert result["verdict"] == "fail"
    assert result["failed"] == [f"GPU 1 ({uuid}): {said}"]
    assert checks(result, 1)[check] == ("fail", evidence)
    assert [g["verdict"] for g in result["gpus"]] == ["ok", "fail"]  # the other GPU is judged all the same


def test_a_gpu_off_the_bus_fails_on_bus_and_the_others_are_still_read(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None
) -> None:
    lost, _ = sim.devices()
    sim.update_device(lost.uuid, lost=True)
    result = failing(registry).result
    assert [g["verdict"] for g in result["gpus"]] == ["fail", "ok"]
    verdict, evidence = checks(result, 0)["on_bus"]
    assert verdict == "fail" and "NVML error 15 (GPU is lost)" in evidence
    assert {v for name, (v, _) in checks(result, 0).items() if name != "on_bus"} == {"skipped"}
    assert result["gpus"][0]["read"]["lost"].startswith("read the health of GPU 0")


def test_a_low_pcie_generation_at_idle_only_warns_and_a_higher_threshold_moves_the_line(
    registry: ActionRegistry, sim: SimulatedBackend
) -> None:
    uuid = sim.devices()[0].uuid
    low = {**HEALTHY, "pcie": {"gen": 1, "max_gen": 5, "width": 16, "max_width": 16}, "utilization_percent": 30}
    sim.update_device(uuid, health=low)
    result = run(registry)
    assert result["verdict"] == "warn"
    assert checks(result, 0)["pcie_gen"] == (
        "warn",
        "pcie gen 1 < max gen 5 at 30% GPU utilization < 50%: the driver lowers the generation at idle",
    )
    with pytest.raises(NodeUnhealthy):
        registry.get("gpu.health").execute(
            registry.get("gpu.health").validate({"pcie_gen_load_percent": 25}), step_context()
        )


def test_thresholds_are_params_and_fail_on_never_reports_without_failing(
    registry: ActionRegistry, sim: SimulatedBackend
) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, health={**HEALTHY, "ecc_dbe_volatile": 2, "clock_event_reasons": ["sw_thermal"]})
    result = run(registry, max_ecc_dbe_volatile=2, throttle_fail_on=["hw_slowdown"])
    assert result["verdict"] == "ok"
    assert checks(result, 0)["ecc_dbe_volatile"] == ("ok", "ecc_dbe_volatile: 2 <= 2")
    reported = run(registry, fail_on="never")
    assert (reported["verdict"], reported["fail_on"]) == ("fail", "never")
    assert len(reported["failed"]) == 2


def test_unsupported_reads_are_skipped_not_failed(registry: ActionRegistry, sim: SimulatedBackend) -> None:
    for gpu in sim.devices():
        sim.update_device(gpu.uuid, health=None, remapped_rows=None)
    result = run(registry)
    assert result["verdict"] == "ok"
    assert {v for v, _ in checks(result, 0).values()} == {"ok", "skipped"}
    assert checks(result, 0)["on_bus"] == ("ok", "answers NVML")
    assert checks(result, 0)["ecc_dbe_volatile"][1] == (
        "not supported: this GPU or driver does not report ECC counts (ECC off, or a GPU without ECC)"
    )


def test_one_gpu_can_be_chosen_and_an_unknown_one_is_not_found(registry: ActionRegistry, sim: SimulatedBackend) -> None:
    second = sim.devices()[1]
    for ref in ("1", second.uuid, second.pci_bus_id):
        assert [g["index"] for g in run(registry, gpu=ref)["gpus"]] == [1]
    with pytest.raises(GpuNotFound, match="no GPU 7 on this node"):
        run(registry, gpu="7")


def test_bad_params_are_refused_before_anything_runs(registry: ActionRegistry) -> None:
    action = registry.get("gpu.health")
    for bad in ({"diag": 4}, {"fail_on": "warn"}, {"throttle_fail_on": ["hot"]}, {"max_ecc_dbe_volatile": -1}):
        with pytest.raises(ParamsError):
            action.validate(bad)


def test_the_plan_says_what_it_would_read_and_changes_nothing(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None
) -> None:
    before = sim.path.read_text()
    action = registry.get("gpu.health")
    plan = action.plan(action.validate({"diag": 1}), step_context())
    assert [g["index"] for g in plan["gpus"]] == [0, 1]
    assert "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)" in plan["reads"]
    assert plan["checks"][0] == "on_bus" and plan["diag"] == {"level": 1, "command": "skipped: DCGM not installed"}
    assert sim.path.read_text() == before


def test_a_backend_without_the_capability_plans_a_warning_and_fails_not_supported(sim: SimulatedBackend) -> None:
    action = HealthAction(lambda: PowerOnlyBackend(sim))  # type: ignore[arg-type, return-value]
    params = action.validate({})
    assert action.plan(params, step_context())["notes"] == [
        "the power-only GPU backend cannot read GPU health: the step would fail"
    ]
    with pytest.raises(BackendNotSupported):
        action.execute(params, step_context())


def test_diag_is_skipped_without_dcgm_and_judged_with_it(
    registry: ActionRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_dcgm: None
) -> None:
    skipped = run(registry, diag=2)["diag"]
    assert (skipped["verdict"], skipped["reason"]) == ("skipped", "DCGM not installed (no dcgmi on this node's PATH)")

    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_pass.json"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    passed = run(registry, diag=1)
    assert (passed["verdict"], passed["diag"]["verdict"], passed["diag"]["dcgm_version"]) == ("ok", "ok", "4.1.1")
    assert (bin_dir / "argv").read_text().split() == ["diag", "-r", "1", "-j"]

    fake_dcgmi(bin_dir, output=fixture("dcgm4_r1_persistence_fail.json"), exit_code=226)
    error = failing(registry, diag=1)
    assert str(error).startswith("node unhealthy: dcgmi diag -r 1: software: GPU 1: Fail (Persistence Mode:")
    assert [g["verdict"] for g in error.result["gpus"]] == ["ok", "ok"]  # NVML's checks passed; the diag did not


def test_a_playbook_step_fails_on_an_unhealthy_node_and_the_history_keeps_the_evidence(
    store: Store,
    registry: ActionRegistry,
    sim: SimulatedBackend,
    make_engine: Callable[..., Engine],
    no_dcgm: None,
) -> None:
    gpus: list[GpuInfo] = sim.devices()
    sim.update_device(gpus[0].uuid, health={**HEALTHY, "ecc_dbe_volatile": 3})
    engine = make_engine(node_playbook("gpu-health-test", "GPUHealthCheck", {"action": "gpu.health"}))
    run_id = alert_on_gpu(engine, store, registry, "GPUHealthCheck", gpus[0].uuid, T0)

    run_ = run_json_of(store, run_id)
    assert run_["status"] == "failed"
    (step,) = run_["steps"]
    assert step["action"] == "gpu.health" and step["status"] == "failed"
    assert f"GPU 0 ({gpus[0].uuid}): ecc_dbe_volatile: 3 > 0" in step["error"]
    assert step["result"]["failed"] == [f"GPU 0 ({gpus[0].uuid}): ecc_dbe_volatile: 3 > 0"]
    assert checks(step["result"], 0)["ecc_dbe_volatile"] == ("fail", "ecc_dbe_volatile: 3 > 0")


def test_through_the_node_agent_a_failed_check_comes_back_with_its_evidence(
    tmp_path: Path, sim: SimulatedBackend, no_dcgm: None
) -> None:
    """The path a node step takes on a cluster: the server's AgentRunner to the node's agent over HTTP."""
    uuid = sim.devices()[1].uuid
    sim.update_device(uuid, health={**HEALTHY, "pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}})
    settings = agent_settings(tmp_path, gpu_backend="simulated", gpu_simulator_file=sim.path)
    service = AgentService(settings)
    action = default_registry(settings).get("gpu.health")
    ctx = StepContext(
        run_id=12,
        step_index=0,
        playbook="gate",
        target="node-b",
        alert=AlertRef(),
        deadline=time.monotonic() + scaled(30),
    )
    with serve_agent(service, settings) as url:
        remote = AgentRunner("node-b", StaticAgents({"node-b": url}), AGENT_TOKEN, retry_wait_max=0.01)
        assert [g["index"] for g in remote.plan(action, action.validate({}), ctx)["gpus"]] == [0, 1]
        with pytest.raises(PartialFailure) as caught:
            remote.execute(action, action.validate({}), ctx)
    service.close()
    assert f"GPU 1 ({uuid}): pcie_width: pcie width x8 < max x16" in str(caught.value)
    assert caught.value.result["failed"] == [f"GPU 1 ({uuid}): pcie_width: pcie width x8 < max x16"]
    assert checks(caught.value.result, 1)["pcie_width"] == ("fail", "pcie width x8 < max x16")


def test_a_dcgmi_out_of_time_fails_the_step_as_not_judged_not_as_unhealthy(
    registry: ActionRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung or slow dcgmi says nothing of the GPUs: the step fails (nothing passes), as could-not-judge, even
    `fail_on: never` (that reports checks; here there is no check to report)."""
    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_pass.json"), sleep_s=5)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    action = registry.get("gpu.health")
    for fail_on in ("fail", "never"):
        ctx = replace(step_context(), deadline=time.monotonic() + DIAG_MARGIN_S + 1.5)  # dcgmi gets 1.5 s
        with pytest.raises(DiagTimedOut) as caught:
            action.execute(action.validate({"diag": 3, "fail_on": fail_on}), ctx)
        assert not isinstance(caught.value, NodeUnhealthy)
        assert str(caught.value).startswith("gate could not judge the node: dcgmi diag -r 3 gave no answer in 1.")
        assert "not a hardware verdict" in str(caught.value)
        result = caught.value.result
        assert (result["diag"]["timed_out"], result["failed"]) == (True, [])
        assert [g["verdict"] for g in result["gpus"]] == ["ok", "ok"]  # NVML's round, kept as evidence
