"""Fixtures for the GPU tests: a real simulator file in tmp_path (8 H100-like GPUs unless a test file's own `sim`
says otherwise), and what a GPU action's step runs with when a test calls the action directly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry, InMemoryMemory, StepContext
from remediate.config.settings import Settings
from remediate.executor.loop import Executor
from remediate.gpu import GpuInfo, SimulatedBackend
from remediate.intake.alertref import AlertRef
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts

HEALTHY: dict[str, Any] = {
    "ecc_dbe_volatile": 0,
    "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16},
    "utilization_percent": 0,
    "clock_event_reasons": ["gpu_idle"],
    "nvlink_errors": {0: {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}},
}
"""The simulator's `health` section of a GPU that passes every gpu.health check (one active NVLink)."""


def healthy_simulator(directory: Path, count: int = 2) -> SimulatedBackend:
    """A simulator of `count` GPUs in `directory`, each reporting HEALTHY."""
    backend = SimulatedBackend(SimulatedBackend.write_example(directory / "gpus.yaml", count=count))
    for gpu in backend.devices():
        backend.update_device(gpu.uuid, health=HEALTHY)
    return backend


@pytest.fixture
def sim_file(tmp_path: Path) -> Path:
    return SimulatedBackend.write_example(tmp_path / "gpus.yaml")


@pytest.fixture
def sim(sim_file: Path) -> SimulatedBackend:
    return SimulatedBackend(sim_file)


@pytest.fixture
def gpus(sim: SimulatedBackend) -> list[GpuInfo]:
    return sim.devices()


@pytest.fixture
def gpu3(sim: SimulatedBackend) -> GpuInfo:
    return sim.devices()[3]


@pytest.fixture
def memory() -> InMemoryMemory:
    """What the steps of a test remember (an original limit or lock), as the store keeps it for a run."""
    return InMemoryMemory()


def step_context(memory: InMemoryMemory | None = None, *, run_id: int = 7) -> StepContext:
    """The context the executor gives step 0 of run `run_id` on node-a."""
    memory = InMemoryMemory() if memory is None else memory
    return StepContext(run_id=run_id, step_index=0, playbook="gpu", target="node-a", alert=AlertRef(), memory=memory)


@pytest.fixture
def ctx(memory: InMemoryMemory) -> StepContext:
    return step_context(memory)


class PowerOnlyBackend:
    """A GPU backend with the protocol's methods only: no clocks, no reset."""

    name = "power-only"

    def __init__(self, inner: SimulatedBackend) -> None:
        self.devices, self.device = inner.devices, inner.device
        self.set_power_limit, self.parent_of_mig = inner.set_power_limit, inner.parent_of_mig


def simulated_registry(sim: SimulatedBackend, db_url: str, **settings: Any) -> ActionRegistry:
    """The shipped actions with this simulated GPU file as the backend (what a GPU action test's `registry` is)."""
    return default_registry(
        Settings.of(gpu_backend="simulated", gpu_simulator_file=sim.path, database_url=db_url, **settings)
    )


def node_playbook(name: str, alertname: str, *steps: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A node playbook running `steps` when `alertname` fires."""
    return {"name": name, "match": {"alertname": alertname}, "target": "node", "steps": list(steps), **changes}


def alert_on_gpu(
    engine: Engine, store: Store, registry: ActionRegistry, alertname: str, uuid: str, at: float, **alert: Any
) -> int:
    """Alert `alertname` for GPU `uuid` on node-a through the engine, then one executor drains its run: its id."""
    labels = {"UUID": uuid, "Hostname": "node-a"}
    (decision,) = ingest_alerts(engine, alert_payload(alertname, labels=labels, **alert), at=at).decisions
    assert decision.run_id is not None, decision.reason
    assert Executor(store=store, registry=registry, retry_wait_max=0.01).drain() == 1
    return decision.run_id
