"""Real-GPU check of the NVML backend: reads every GPU through NVML and prints it. It never sets anything.

Deselected by default (marker `nvml`). On a machine with an NVIDIA GPU and driver:

    pytest -m nvml tests/gpu/test_nvml_real.py -s

Without a driver every test here is skipped with NVML's error as the reason. The
backend is wrapped in `ReadOnly`, which fails the test if anything tries to set
a power limit; no test here calls set_power_limit on a real GPU.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from remediate.gpu import (
    GpuBackend,
    GpuInfo,
    GpuNotFound,
    NvmlBackend,
    NvmlUnavailable,
    parse_gpu_ref,
    resolve,
)

pytestmark = pytest.mark.nvml


class ReadOnly:
    """A GpuBackend that passes reads to NVML and refuses every write."""

    name = "nvml"

    def __init__(self, backend: GpuBackend) -> None:
        self._backend = backend

    def devices(self) -> list[GpuInfo]:
        return self._backend.devices()

    def device(self, uuid: str) -> GpuInfo:
        return self._backend.device(uuid)

    def parent_of_mig(self, mig_uuid: str) -> str:
        return self._backend.parent_of_mig(mig_uuid)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        pytest.fail(f"the real-GPU check must never set a power limit (asked: {uuid} -> {milliwatts} mW)")


@pytest.fixture(scope="module")
def backend() -> ReadOnly:
    real = ReadOnly(NvmlBackend())
    try:
        real.devices()
    except NvmlUnavailable as exc:
        pytest.skip(f"no usable NVML here: {exc}")
    return real


@pytest.fixture(scope="module")
def gpus(backend: ReadOnly) -> list[GpuInfo]:
    found = backend.devices()
    assert found, "NVML initialised but reports no GPUs"
    return found


def _w(milliwatts: int | None) -> str:
    return "n/a" if milliwatts is None else f"{milliwatts / 1000:.1f} W"


def test_every_gpu_reports_sane_limits_constraints_and_processes(gpus: list[GpuInfo]) -> None:
    print()
    for gpu in gpus:
        print(
            f"GPU {gpu.index} {gpu.uuid} {gpu.pci_bus_id} {gpu.name}: limit {_w(gpu.power_limit_mw)} "
            f"(default {_w(gpu.default_limit_mw)}, min {_w(gpu.min_limit_mw)}, max {_w(gpu.max_limit_mw)}, "
            f"enforced {_w(gpu.enforced_limit_mw)}), usage {_w(gpu.power_usage_mw)}, "
            f"temperature {gpu.temperature_c} C, {len(gpu.processes)} processes, MIG {list(gpu.mig_uuids)}"
        )
        for process in gpu.processes:
            print(f"    pid {process.pid} {process.name!r} {process.used_memory_bytes} bytes")
        print(json.dumps(gpu.to_dict(), indent=2))
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", gpu.uuid)
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", gpu.pci_bus_id)
        assert 0 < gpu.min_limit_mw <= gpu.max_limit_mw
        assert gpu.min_limit_mw <= gpu.default_limit_mw <= gpu.max_limit_mw
        assert gpu.min_limit_mw <= gpu.power_limit_mw <= gpu.max_limit_mw
        assert 0 < gpu.enforced_limit_mw <= gpu.max_limit_mw
    assert [gpu.index for gpu in gpus] == list(range(len(gpus)))


def test_reading_one_gpu_by_uuid_matches_the_list(backend: ReadOnly, gpus: list[GpuInfo]) -> None:
    for gpu in gpus:
        again = backend.device(gpu.uuid)
        # Usage, temperature and processes move between two reads; identity and limits do not.
        stable: dict[str, Any] = {k: v for k, v in again.to_dict().items() if k.startswith(("index", "uuid", "pci"))}
        assert stable == {k: v for k, v in gpu.to_dict().items() if k.startswith(("index", "uuid", "pci"))}
        assert (again.min_limit_mw, again.max_limit_mw, again.default_limit_mw) == (
            gpu.min_limit_mw,
            gpu.max_limit_mw,
            gpu.default_limit_mw,
        )


def test_every_label_form_resolves_to_the_same_gpu(backend: ReadOnly, gpus: list[GpuInfo]) -> None:
    for gpu in gpus:
        for text in (str(gpu.index), gpu.uuid, gpu.uuid.upper(), gpu.pci_bus_id, gpu.pci_bus_id[4:].lower()):
            assert [g.uuid for g in resolve(parse_gpu_ref(text), backend)] == [gpu.uuid], text
        for mig in gpu.mig_uuids:
            assert backend.parent_of_mig(mig) == gpu.uuid
    assert [g.uuid for g in resolve(parse_gpu_ref("all"), backend)] == [g.uuid for g in gpus]


def test_an_unknown_uuid_is_not_found_by_the_real_driver(backend: ReadOnly) -> None:
    with pytest.raises(GpuNotFound) as caught:
        backend.device("GPU-00000000-0000-0000-0000-000000000000")
    print(f"\nNVML on an unknown UUID: code {caught.value.code}: {caught.value}")
