"""gpu.reset_clocks against a real simulated GPU file: found by the registry, run directly and through a run.

The action is one module (remediate/actions/gpu_clocks.py) on the backends' optional
`reset_locked_clocks` capability; this file is its one test file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.base import ActionRegistry
from remediate.actions.gpu_clocks import ResetClocksAction
from remediate.gpu import BackendNotSupported, GpuInfo, GpuLost, GpuNotSupported, SimulatedBackend
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.support.gpu import PowerOnlyBackend, alert_on_gpu, node_playbook, simulated_registry, step_context
from tests.support.store_json import run_json_of

T0 = 1_767_225_600.0
LOCKED = {"locked_gpu_clocks_mhz": [1980, 1980], "locked_memory_clocks_mhz": [2619, 2619]}
UNLOCKED = {"gpu_mhz": None, "memory_mhz": None}


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    backend = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=3))
    for gpu in backend.devices():
        backend.update_device(gpu.uuid, **LOCKED)
    return backend


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    """Overrides the shared fixture. A power floor wraps the backend: the clock reset must pass through it."""
    return simulated_registry(sim, db_url, gpu_power_floor_watts=300)


def locked(sim: SimulatedBackend, gpu: GpuInfo) -> dict[str, Any]:
    return sim.locked_clocks(gpu.uuid)


def test_the_registry_finds_it_with_the_configured_backend_behind_the_power_floor(
    registry: ActionRegistry, sim: SimulatedBackend, gpus: list[GpuInfo]
) -> None:
    action = registry.get("gpu.reset_clocks")
    assert (action.where, action.idempotent) == ("node", True)
    params = action.validate({"gpu": gpus[1].uuid})
    plan = action.plan(params, step_context())
    assert plan == {
        "backend": "simulated",
        "gpus": [{"gpu": gpus[1].uuid, "index": 1, "name": gpus[1].name, "change": "unlock GPU and memory clocks"}],
        "notes": [],
    }
    assert locked(sim, gpus[1])["gpu_mhz"] == (1980, 1980)  # the plan changed nothing

    result = action.execute(params, step_context())
    assert result["gpus"] == [{"gpu": gpus[1].uuid, "index": 1, "outcome": "reset"}]
    assert locked(sim, gpus[1]) == UNLOCKED
    assert locked(sim, gpus[0])["gpu_mhz"] == (1980, 1980)  # only the GPU asked for
    assert action.execute(params, step_context())["reset"] == 1  # again: idempotent, still unlocked
    assert locked(sim, gpus[1]) == UNLOCKED


def test_gpu_all_resets_every_gpu_by_index(registry: ActionRegistry, sim: SimulatedBackend) -> None:
    action = registry.get("gpu.reset_clocks")
    result = action.execute(action.validate({"gpu": "all"}), step_context())
    assert [r["index"] for r in result["gpus"]] == [0, 1, 2]
    assert [locked(sim, g) for g in sim.devices()] == [UNLOCKED] * 3


def test_a_failure_on_one_gpu_names_the_gpus_already_reset(
    registry: ActionRegistry, sim: SimulatedBackend, gpus: list[GpuInfo]
) -> None:
    sim.update_device(gpus[2].uuid, fail={"reset_locked_clocks": "gpu_lost"})
    action = registry.get("gpu.reset_clocks")
    with pytest.raises(GpuLost) as caught:
        action.execute(action.validate({"gpu": "all"}), step_context())
    message = str(caught.value)
    assert f"already done in this step: GPU 0 {gpus[0].uuid} reset; GPU 1 {gpus[1].uuid} reset" in message
    assert [locked(sim, g)["gpu_mhz"] for g in gpus] == [None, None, (1980, 1980)]


def test_a_backend_without_the_capability_plans_a_warning_and_fails_not_supported(
    sim: SimulatedBackend, gpus: list[GpuInfo]
) -> None:
    action = ResetClocksAction(lambda: PowerOnlyBackend(sim))  # type: ignore[arg-type, return-value]
    params = action.validate({"gpu": gpus[0].uuid})
    assert action.plan(params, step_context())["notes"] == [
        "the power-only GPU backend cannot reset clocks: the step would fail"
    ]
    with pytest.raises(BackendNotSupported) as caught:
        action.execute(params, step_context())
    assert isinstance(caught.value, GpuNotSupported)  # permanent: the executor does not retry it
    assert str(caught.value) == (
        "reset locked clocks failed: the power-only GPU backend does not support it (no reset_locked_clocks)"
    )
    assert locked(sim, gpus[0])["gpu_mhz"] == (1980, 1980)


def test_a_playbook_step_runs_it_through_the_engine_and_executor(
    store: Store,
    registry: ActionRegistry,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    make_engine: Callable[..., Engine],
) -> None:
    spec = {"action": "gpu.reset_clocks", "with": {"gpu": "{{ labels.UUID }}"}}
    engine = make_engine(node_playbook("gpu-clocks-test", "GPUClocksLocked", spec))
    run_id = alert_on_gpu(engine, store, registry, "GPUClocksLocked", gpus[2].uuid, T0)

    run = run_json_of(store, run_id)
    assert run["status"] == "succeeded"
    (step,) = run["steps"]
    assert step["action"] == "gpu.reset_clocks"
    assert step["result"]["gpus"] == [{"gpu": gpus[2].uuid, "index": 2, "outcome": "reset"}]
    assert locked(sim, gpus[2]) == UNLOCKED
    assert locked(sim, gpus[0])["gpu_mhz"] == (1980, 1980)
