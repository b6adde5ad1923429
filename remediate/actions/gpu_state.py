"""What every GPU clock/reset plan shows of a GPU: clocks, power limits, processes, XID-relevant memory state.

The operator reading a dry-run or the history of gpu.lock_clocks, gpu.unlock_clocks or
gpu.reset sees the GPU as it was read just before: a missing capability or a reading the
GPU does not support shows as "not supported" rather than failing the plan.
"""

from __future__ import annotations

from typing import Any

from remediate.gpu import GpuBackend, GpuInfo, GpuNotSupported, supports


def watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000, 3)


def _optional_read(backend: GpuBackend, method: str, uuid: str) -> Any:
    """`backend.method(uuid).to_dict()`, or "not supported" where the backend or the GPU cannot say."""
    if not supports(backend, method):
        return f"not supported by the {backend.name} GPU backend"
    try:
        return getattr(backend, method)(uuid).to_dict()
    except GpuNotSupported as exc:
        return f"not supported: {exc}"


def identify(gpu: GpuInfo) -> dict[str, Any]:
    """Which GPU a plan's or a result's entry is about."""
    return {"gpu": gpu.uuid, "index": gpu.index, "name": gpu.name, "pci_bus_id": gpu.pci_bus_id}


def describe_gpu(backend: GpuBackend, gpu: GpuInfo) -> dict[str, Any]:
    """The state of one GPU for a plan or a result (JSON-able)."""
    return {
        **identify(gpu),
        "temperature_c": gpu.temperature_c,
        "clocks": _optional_read(backend, "clocks", gpu.uuid),
        "power": {
            "limit_w": watts(gpu.power_limit_mw),
            "default_w": watts(gpu.default_limit_mw),
            "min_w": watts(gpu.min_limit_mw),
            "max_w": watts(gpu.max_limit_mw),
            "enforced_w": watts(gpu.enforced_limit_mw),
            "usage_w": watts(gpu.power_usage_mw),
        },
        "processes": [process.to_dict() for process in gpu.processes],
        "memory_health": _optional_read(backend, "memory_health", gpu.uuid),
    }
