"""What a node health read reports of each GPU (the `health_scan` capability, read by gpu.health).

Read-only: every value comes from an NVML getter (remediate.gpu.nvml_health) or the simulator's
file (remediate.gpu.sim_health); None wherever NVML answers NOT_SUPPORTED, so that a check the GPU
cannot answer is "skipped", never a failure. A GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST on
any call of its read) is a `GpuHealth` with `lost` set and no reading: one lost GPU must not hide
the state of the other seven.

The bit values and counter numbers are nvml.h's (copied, as remediate.gpu.errors copies the return
codes, so that this module never imports pynvml; a test checks they match).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remediate.gpu.model import MemoryHealth

CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
"""nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*): name -> bit of the current reasons mask."""

NVLINK_COUNTERS: dict[str, int] = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3, "ecc_data": 4}
"""NVML_NVLINK_ERROR_DL_*: name -> the counter nvmlDeviceGetNvLinkErrorCounter reads."""


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clock event reasons mask (unknown bits as hex)."""
    names = [name for name, bit in CLOCK_EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_EVENT_REASONS.values())
    return names + ([hex(rest)] if rest else [])


@dataclass(frozen=True)
class PcieLink:
    """The PCIe link now and at best. `max_*` is what NVML's GetMaxPcieLink* say: the most the GPU *and*
    the slot allow, so a Gen5 GPU in a Gen4 slot is not a downtrained link."""

    gen: int | None = None
    max_gen: int | None = None
    width: int | None = None
    max_width: int | None = None


@dataclass(frozen=True)
class HealthReading:
    """One GPU's health-relevant state, read at one moment."""

    memory: MemoryHealth = field(default_factory=MemoryHealth)
    """Pending page retirements and row remaps, row-remap failure (the counts where known)."""
    ecc_dbe_volatile: int | None = None
    """Uncorrected (double-bit) ECC errors since the driver loaded; None: ECC off or not supported."""
    pcie: PcieLink = field(default_factory=PcieLink)
    utilization_percent: int | None = None
    """GPU utilisation now (nvmlDeviceGetUtilizationRates): whether the link is under load."""
    clock_event_reasons: int | None = None
    """The current clock event (throttle) reasons mask; None: not supported."""
    nvlink_errors: Mapping[int, Mapping[str, int]] | None = None
    """Active link -> counter name -> count, the counters a link supports; None: no NVLink."""

    def to_dict(self) -> dict[str, Any]:
        def shown(value: object) -> object:
            return "not supported" if value is None else value

        reasons = self.clock_event_reasons
        return {
            "memory": self.memory.to_dict(),
            "ecc_dbe_volatile": shown(self.ecc_dbe_volatile),
            "pcie": {k: shown(getattr(self.pcie, k)) for k in ("gen", "max_gen", "width", "max_width")},
            "utilization_percent": shown(self.utilization_percent),
            "clock_event_reasons": "not supported" if reasons is None else reason_names(reasons),
            "nvlink_errors": (
                "not supported"
                if self.nvlink_errors is None
                else {str(link): dict(counts) for link, counts in sorted(self.nvlink_errors.items())}
            ),
        }


@dataclass(frozen=True)
class GpuHealth:
    """One GPU of a health scan: who it is, and its reading or why there is none (it is lost)."""

    index: int
    uuid: str
    """"" where NVML lost the GPU before its UUID could be read."""
    pci_bus_id: str = ""
    name: str = ""
    reading: HealthReading | None = None
    lost: str | None = None
    """The GpuLost message when the GPU fell off the bus during the read; then `reading` is None."""

    def ident(self) -> dict[str, Any]:
        return {"gpu": self.uuid or "unknown", "index": self.index, "name": self.name, "pci_bus_id": self.pci_bus_id}
