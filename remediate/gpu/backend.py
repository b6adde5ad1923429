"""The GPU backend interface, and the one place that picks an implementation.

The gpu actions, `remediate gpu status` and selection talk to a `GpuBackend`;
`open_backend` builds one from settings. There are two: "nvml" (the real driver,
remediate.gpu.nvml) and "simulated" (a device file, remediate.gpu.simulator).
The simulator is only ever chosen explicitly: a node without NVML gets a clear
NvmlUnavailable error on first use, never a silent switch to fake GPUs.

The protocol holds what every backend has. Anything more an action needs (resetting
locked clocks, ...) is an optional capability: a plain method on the backends that
have it, which the action looks up with `capability` and which a backend without it
answers with `BackendNotSupported` (a GpuNotSupported), never AttributeError. Wrappers
(the power floor) pass every method they do not change through, so a new capability
is the action's module plus the method on each backend that has it.

The optional capabilities (NVML and the simulator have them all):

    reset_locked_clocks(uuid)             unlock GPU and memory clocks (gpu.reset_clocks)
    clocks(uuid) -> ClockState            current/max/supported clocks, the lock where readable
    lock_gpu_clocks(uuid, min, max)       nvmlDeviceSetGpuLockedClocks (gpu.lock_clocks)
    unlock_gpu_clocks(uuid)               nvmlDeviceResetGpuLockedClocks (gpu.unlock_clocks)
    memory_health(uuid) -> MemoryHealth   retired pages and remapped rows (every GPU plan)
    reset_state(uuid) -> ResetState       MIG mode/devices and active NVLinks (gpu.reset)
    reset_gpu(uuid)                       the driver's GPU reset (gpu.reset)
    health_scan() -> list[GpuHealth]      every GPU's health reads, getters only, a lost GPU reported not
                                          raised (remediate.gpu.health; gpu.health)
    open_events() -> EventWatch           XID / double-bit ECC events and lost GPUs (remediate.gpu.events;
                                          the agent's fault watcher, remediate.agent.gpu_faults)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from remediate.errors import ConfigError
from remediate.gpu.errors import BackendNotSupported
from remediate.gpu.model import GpuInfo
from remediate.gpu.nvml import NvmlBackend
from remediate.gpu.simulator import SimulatedBackend

BACKEND_KINDS = ("nvml", "simulated")
SIMULATOR_FILE_SETTING = "gpu_simulator_file"
"""The setting that names the simulator's device file (mentioned in errors so people know what to set)."""


@runtime_checkable
class GpuBackend(Protocol):
    """Reads GPUs and sets power limits. Every method reads fresh state; errors are GpuError subclasses."""

    name: str
    """"nvml" or "simulated"."""

    def devices(self) -> list[GpuInfo]:
        """Every GPU of this node, by index."""
        ...

    def device(self, uuid: str) -> GpuInfo:
        """One GPU, read now; GpuNotFound if no GPU has this UUID."""
        ...

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        """Set the software power limit. No read-back here: callers read back to confirm."""
        ...

    def parent_of_mig(self, mig_uuid: str) -> str:
        """The UUID of the GPU a MIG device belongs to; GpuNotFound if there is no such MIG device."""
        ...


def capability(backend: GpuBackend, method: str, *, doing: str) -> Callable[..., Any]:
    """`backend`'s optional method `method`; BackendNotSupported, naming the backend and `doing`, if it has none."""
    found = getattr(backend, method, None)
    if not callable(found):
        raise BackendNotSupported(f"{doing} failed: the {backend.name} GPU backend does not support it (no {method})")
    return found


def supports(backend: GpuBackend, method: str) -> bool:
    """Whether `backend` has the optional capability `method` (for plans, which must not fail on it)."""
    return callable(getattr(backend, method, None))


def open_backend(kind: str, *, simulator_file: Path | None = None) -> GpuBackend:
    """Build the backend `kind` names; ConfigError for anything else. Cheap: NVML is initialised on first use."""
    if kind == "nvml":
        return NvmlBackend()
    if kind == "simulated":
        if simulator_file is None:
            raise ConfigError(
                f"the simulated GPU backend needs a device file: set {SIMULATOR_FILE_SETTING} "
                "(see remediate.gpu.simulator for the format)"
            )
        return SimulatedBackend(Path(simulator_file))
    raise ConfigError(f"unknown GPU backend {kind!r}: expected one of {', '.join(BACKEND_KINDS)}")
