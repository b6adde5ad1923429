"""Fixtures for the GPU backend tests: a real simulator file in tmp_path (8 H100-like GPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.gpu import GpuInfo, SimulatedBackend


@pytest.fixture
def sim_file(tmp_path: Path) -> Path:
    return SimulatedBackend.write_example(tmp_path / "gpus.yaml")


@pytest.fixture
def sim(sim_file: Path) -> SimulatedBackend:
    return SimulatedBackend(sim_file)


@pytest.fixture
def gpu3(sim: SimulatedBackend) -> GpuInfo:
    return sim.devices()[3]
