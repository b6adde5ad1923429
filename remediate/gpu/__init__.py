"""GPU access for remediate: one backend interface, NVML and a simulator behind it, and GPU selection.

The gpu actions, the `remediate gpu status` command and the node agent import
from here. Nothing here imports pynvml until an NVML backend is first used.

May import: remediate.errors; nothing of a stage (the backends know nothing above them).
"""

from __future__ import annotations

from remediate.gpu.backend import GpuBackend, capability, open_backend, supports
from remediate.gpu.errors import (
    BackendNotSupported,
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotFound,
    GpuNotSupported,
    GpuResetRefused,
    GpuSelectionError,
    NvmlUnavailable,
    RetryableGpuError,
)
from remediate.gpu.model import ClockState, GpuInfo, GpuProcess, MemoryHealth, ResetState
from remediate.gpu.nvml import NvmlBackend
from remediate.gpu.pci import normalize_pci_bus_id
from remediate.gpu.selection import GpuRef, parse_gpu_ref, resolve, select
from remediate.gpu.simulator import SimulatedBackend

__all__ = [
    "BackendNotSupported",
    "ClockState",
    "GpuBackend",
    "GpuError",
    "GpuInfo",
    "GpuInvalidArgument",
    "GpuLost",
    "GpuNoPermission",
    "GpuNotFound",
    "GpuNotSupported",
    "GpuProcess",
    "GpuRef",
    "GpuResetRefused",
    "GpuSelectionError",
    "MemoryHealth",
    "NvmlBackend",
    "NvmlUnavailable",
    "ResetState",
    "RetryableGpuError",
    "SimulatedBackend",
    "capability",
    "normalize_pci_bus_id",
    "open_backend",
    "parse_gpu_ref",
    "resolve",
    "select",
    "supports",
]
