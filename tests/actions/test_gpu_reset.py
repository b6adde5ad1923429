"""gpu.reset against a real simulated GPU file: refusals first, then the reset itself.

The example GPUs each run one compute process (pid 4200 + index); a test that wants a
reset to go through drains the GPU by removing it, as a drain of the node would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.actions.base import ActionRegistry, InMemoryMemory, StepContext
from remediate.actions.gpu import MEMORY_PREFIX as POWER_PREFIX
from remediate.actions.gpu import SetPowerLimitAction
from remediate.actions.gpu_lock_clocks import MEMORY_PREFIX as CLOCK_PREFIX
from remediate.actions.gpu_lock_clocks import LockClocksAction
from remediate.actions.gpu_reset import ResetGpuAction
from remediate.gpu import BackendNotSupported, GpuInfo, GpuLost, GpuNoPermission, GpuResetRefused, SimulatedBackend
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.support.gpu import PowerOnlyBackend, alert_on_gpu, node_playbook, simulated_registry
from tests.support.store_json import run_json_of

T0 = 1_767_225_600.0
MIG = "MIG-0b8d3a5e-5f0c-5b33-9a43-6f2b8c1d4e7a"


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=3))


@pytest.fixture
def resetter(sim: SimulatedBackend) -> ResetGpuAction:
    return ResetGpuAction(lambda: sim)


def drained(sim: SimulatedBackend, *gpus: GpuInfo) -> None:
    for gpu in gpus:
        sim.update_device(gpu.uuid, processes=[])


def test_a_gpu_with_compute_processes_is_refused_naming_the_pids_in_plan_and_execute(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    sim.update_device(
        gpus[0].uuid,
        processes=[{"pid": 4200, "name": "python", "used_memory_bytes": 1}, {"pid": 4300, "name": "nccl-test"}],
    )
    params = resetter.validate({"gpu": gpus[0].uuid})
    plan = resetter.plan(params, ctx)
    (entry,) = plan["gpus"]
    assert entry["would"] == "refuse"
    assert entry["blocked_by"] == ["2 compute process(es) on the GPU: pid 4200 (python), 4300 (nccl-test)"]
    assert [p["pid"] for p in entry["processes"]] == [4200, 4300]
    assert entry["reset_state"] == {
        "mig_mode": "disabled",
        "mig_devices": [],
        "active_nvlinks": "not supported",
        "nvlink_peers": [],
        "nvlink_gpu_peers": [],
        "persistence_mode": "on",
    }
    assert plan["would_reset"] == 0
    with pytest.raises(GpuResetRefused) as caught:
        resetter.execute(params, ctx)
    assert str(caught.value).startswith(
        f"GPU reset refused, nothing was reset: GPU 0 {gpus[0].uuid}: 2 compute process(es) on the GPU: "
        "pid 4200 (python), 4300 (nccl-test); drain the node"
    )
    assert sim.reset_count(gpus[0].uuid) == 0


def test_gpu_all_resets_none_when_one_gpu_is_busy(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    drained(sim, gpus[0], gpus[2])
    with pytest.raises(GpuResetRefused, match=f"GPU 1 {gpus[1].uuid}: 1 compute process"):
        resetter.execute(resetter.validate({"gpu": "all"}), ctx)
    assert [sim.reset_count(g.uuid) for g in gpus] == [0, 0, 0]


def test_mig_instances_refuse_the_reset_mig_mode_alone_does_not(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    drained(sim, gpus[0])
    sim.update_device(gpus[0].uuid, mig_uuids=[MIG])
    params = resetter.validate({"gpu": gpus[0].uuid})
    (entry,) = resetter.plan(params, ctx)["gpus"]
    assert entry["blocked_by"] == [f"MIG mode is enabled with 1 MIG instance(s) ({MIG}): destroy them first"]
    assert entry["reset_state"]["mig_mode"] == "enabled"
    with pytest.raises(GpuResetRefused, match="MIG mode is enabled with 1 MIG instance"):
        resetter.execute(params, ctx)
    # The simulator refuses on its own as the driver does, whatever the action checked.
    with pytest.raises(GpuResetRefused, match="MIG instances exist on it"):
        sim.reset_gpu(gpus[0].uuid)

    sim.update_device(gpus[0].uuid, mig_uuids=[], mig_enabled=True)
    assert resetter.execute(params, ctx)["reset"] == 1


def test_a_direct_nvlink_to_another_gpu_refuses_unless_allowed_switch_links_do_not(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    drained(sim, gpus[0])
    sim.update_device(
        gpus[0].uuid,
        nvlinks=[
            {"link": 0, "peer": "0000:2a:00.0", "peer_type": "gpu"},
            {"link": 1, "peer": "00000000:05:00.0", "peer_type": "switch"},
        ],
    )
    params = resetter.validate({"gpu": gpus[0].uuid})
    (entry,) = resetter.plan(params, ctx)["gpus"]
    assert entry["reset_state"]["active_nvlinks"] == [0, 1]
    assert entry["reset_state"]["nvlink_peers"] == ["link 0: gpu 00000000:2A:00.0", "link 1: switch 00000000:05:00.0"]
    assert entry["blocked_by"] == [
        "active NVLinks [0, 1] connect it directly to GPU(s) 00000000:2A:00.0: the driver resets directly linked "
        "GPUs only together (set allow_nvlink_peers when they are drained too)"
    ]
    with pytest.raises(GpuResetRefused, match="connect it directly to GPU"):
        resetter.execute(params, ctx)
    assert sim.reset_count(gpus[0].uuid) == 0

    allowed = resetter.validate({"gpu": gpus[0].uuid, "allow_nvlink_peers": True})
    assert resetter.plan(allowed, ctx)["gpus"][0]["would"] == "reset"
    assert resetter.execute(allowed, ctx)["reset"] == 1

    # NVSwitch links only (HGX): the fabric manager retrains them, nothing to refuse.
    sim.update_device(gpus[0].uuid, nvlinks=[{"link": 0, "peer": "00000000:05:00.0", "peer_type": "switch"}])
    assert resetter.plan(params, ctx)["gpus"][0]["blocked_by"] == []


def test_the_reset_restores_defaults_applies_pending_remaps_and_drops_remediates_records(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    uuid = gpus[0].uuid
    SetPowerLimitAction(lambda: sim).execute({"gpu": uuid, "watts": 500, "allow_increase": False}, ctx)
    LockClocksAction(lambda: sim).execute(LockClocksAction(lambda: sim).validate({"gpu": uuid, "max_mhz": 1200}), ctx)
    sim.update_device(
        uuid,
        locked_memory_clocks_mhz=[2619, 2619],
        retired_pages={"single_bit": 2, "double_bit": 1, "pending": True},
        remapped_rows={"correctable": 0, "uncorrectable": 3, "pending": True, "failure": False},
    )
    drained(sim, gpus[0])
    params = resetter.validate({"gpu": uuid})
    (planned,) = resetter.plan(params, ctx)["gpus"]
    assert planned["would"] == "reset"
    assert planned["memory_health"]["remapped_rows"]["pending"] is True
    assert planned["clocks"]["locked_graphics_mhz"] == [345, 1200]
    assert set(memory.values) == {POWER_PREFIX + uuid, CLOCK_PREFIX + uuid}

    result = resetter.execute(params, ctx)
    (entry,) = result["gpus"]
    assert entry["outcome"] == "reset"
    assert entry["dropped_records"] == ["gpu.power_limit", "gpu.locked_clocks"]
    assert entry["power"]["limit_w"] == 700.0
    assert entry["clocks"]["locked_graphics_mhz"] == "unlocked"
    assert entry["memory_health"] == {
        "retired_pages": {"single_bit_ecc": 2, "double_bit_ecc": 1, "pending": False},
        "remapped_rows": {"correctable": 0, "uncorrectable": 3, "pending": False, "failure": False},
    }
    assert sim.reset_count(uuid) == 1
    assert sim.locked_clocks(uuid) == {"gpu_mhz": None, "memory_mhz": None}
    assert memory.values == {}
    assert sim.reset_count(gpus[1].uuid) == 0


def test_without_root_the_reset_is_no_permission(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    drained(sim, gpus[0])
    sim.set_as_root(False)
    params = resetter.validate({"gpu": gpus[0].uuid})
    assert resetter.plan(params, ctx)["gpus"][0]["would"] == "reset"  # the plan cannot know, NVML answers the set
    with pytest.raises(GpuNoPermission, match=r"reset GPU .* failed: NVML error 4"):
        resetter.execute(params, ctx)
    assert sim.reset_count(gpus[0].uuid) == 0


def test_a_failure_on_one_gpu_of_all_names_those_already_reset(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    drained(sim, *gpus)
    sim.update_device(gpus[1].uuid, fail={"reset_gpu": {"error": "gpu_lost", "times": 1}})
    with pytest.raises(GpuLost, match=f"already done in this step: GPU 0 {gpus[0].uuid} reset"):
        resetter.execute(resetter.validate({"gpu": "all"}), ctx)
    assert [sim.reset_count(g.uuid) for g in gpus] == [1, 0, 0]


def test_a_backend_without_the_capability_plans_a_warning_and_fails_not_supported(
    sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    resetter = ResetGpuAction(lambda: PowerOnlyBackend(sim))  # type: ignore[arg-type, return-value]
    params = resetter.validate({"gpu": gpus[0].uuid})
    plan = resetter.plan(params, ctx)
    assert plan["notes"] == ["the power-only GPU backend cannot reset GPUs: the step would fail"]
    assert plan["gpus"][0]["reset_state"] == {"state": "not supported by the power-only GPU backend"}
    with pytest.raises(BackendNotSupported, match="no reset_gpu"):
        resetter.execute(params, ctx)


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    """Overrides the shared fixture: the shipped actions with the simulated GPU backend."""
    return simulated_registry(sim, db_url)


def test_a_refused_reset_fails_the_run_permanently_and_is_not_retried(
    store: Store,
    registry: ActionRegistry,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    make_engine: Callable[..., Engine],
) -> None:
    spec = {"action": "gpu.reset", "with": {"gpu": "{{ labels.UUID }}"}, "retries": 3}
    engine = make_engine(node_playbook("gpu-xid-reset", "GPUXidError", spec))
    run = run_json_of(store, alert_on_gpu(engine, store, registry, "GPUXidError", gpus[2].uuid, T0))
    assert run["status"] == "failed"
    (step,) = run["steps"]
    assert step["plan"]["gpus"][0]["blocked_by"] == ["1 compute process(es) on the GPU: pid 4202 (python)"]
    assert "GPU reset refused, nothing was reset" in step["error"]
    assert [a["outcome"] for a in step["attempts"]] == ["failed"]  # permanent: the 3 retries are not used
    assert sim.reset_count(gpus[2].uuid) == 0


def test_another_client_holding_the_gpu_fails_the_reset_as_the_driver_says(
    resetter: ResetGpuAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    """DCGM or Fabric Manager are no compute processes: NVML does not list them, only the reset finds them."""
    drained(sim, gpus[0])
    sim.update_device(gpus[0].uuid, other_clients=["nv-hostengine"])
    params = resetter.validate({"gpu": gpus[0].uuid})
    assert resetter.plan(params, ctx)["gpus"][0]["would"] == "reset"
    with pytest.raises(GpuResetRefused, match=r"in use by another client \(nv-hostengine\)"):
        resetter.execute(params, ctx)
    assert sim.reset_count(gpus[0].uuid) == 0
