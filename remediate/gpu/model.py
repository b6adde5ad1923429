"""What a GPU backend reports: one frozen snapshot per GPU.

Backends build these; selection, the gpu actions, the `remediate gpu status`
command and the node agent (which ships them as JSON, hence `to_dict` /
`from_dict`) read them. Power values are milliwatts, as in NVML; `to_dict` adds
watts as floats for people reading the audit history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


@dataclass(frozen=True)
class GpuProcess:
    """A compute process running on a GPU (host PID on most drivers)."""

    pid: int
    used_memory_bytes: int | None
    """None where the driver cannot say (NVML_VALUE_NOT_AVAILABLE, e.g. under MIG or WDDM)."""
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_memory_bytes": self.used_memory_bytes, "name": self.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuProcess:
        return cls(pid=int(data["pid"]), used_memory_bytes=data.get("used_memory_bytes"), name=data.get("name", ""))


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as read at one moment."""

    index: int
    uuid: str
    """"GPU-<lower-case hex>" as NVML reports it."""
    pci_bus_id: str
    """Canonical "00000000:3B:00.0" (upper-case hex, 8-digit domain)."""
    name: str
    power_limit_mw: int
    """The limit set by software (nvmlDeviceGetPowerManagementLimit)."""
    default_limit_mw: int
    min_limit_mw: int
    max_limit_mw: int
    enforced_limit_mw: int
    """What the GPU actually enforces (the lowest of all limits that apply)."""
    power_usage_mw: int | None
    """None where the GPU cannot report it."""
    temperature_c: int | None
    processes: tuple[GpuProcess, ...] = ()
    mig_uuids: tuple[str, ...] = ()
    """UUIDs of the MIG devices on this GPU (empty when MIG is off or unsupported)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; every milliwatt field also appears in watts (`power_limit_mw` -> `power_limit_w`)."""
        data: dict[str, Any] = {}
        for name in (f.name for f in fields(self)):
            data[name] = getattr(self, name)
            if name.endswith("_mw"):
                data[name.removesuffix("_mw") + "_w"] = _watts(data[name])
        return data | {"processes": [p.to_dict() for p in self.processes], "mig_uuids": list(self.mig_uuids)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuInfo:
        """Inverse of `to_dict` (the watt fields are derived, so they are ignored)."""
        return cls(
            index=int(data["index"]),
            uuid=str(data["uuid"]),
            pci_bus_id=str(data["pci_bus_id"]),
            name=str(data["name"]),
            power_limit_mw=int(data["power_limit_mw"]),
            default_limit_mw=int(data["default_limit_mw"]),
            min_limit_mw=int(data["min_limit_mw"]),
            max_limit_mw=int(data["max_limit_mw"]),
            enforced_limit_mw=int(data["enforced_limit_mw"]),
            power_usage_mw=None if data.get("power_usage_mw") is None else int(data["power_usage_mw"]),
            temperature_c=None if data.get("temperature_c") is None else int(data["temperature_c"]),
            processes=tuple(GpuProcess.from_dict(p) for p in data.get("processes", ())),
            mig_uuids=tuple(str(u) for u in data.get("mig_uuids", ())),
        )


@dataclass(frozen=True)
class ClockState:
    """A GPU's clocks as read at one moment (MHz), for the clock-lock actions and every GPU plan.

    NVML has no read of the clocks locked with nvmlDeviceSetGpuLockedClocks: the NVML backend
    reports `lock_known=False` and `locked_graphics_mhz=None`; the simulator knows its lock.
    """

    graphics_mhz: int | None
    memory_mhz: int | None
    max_graphics_mhz: int | None
    max_memory_mhz: int | None
    supported_graphics_mhz: tuple[int, ...]
    """Ascending; empty where the GPU cannot lock its clocks (then a lock is NOT_SUPPORTED)."""
    supported_memory_mhz: tuple[int, ...] = ()
    locked_graphics_mhz: tuple[int, int] | None = None
    """(min, max) locked now; None when not locked, or when not known (see `lock_known`)."""
    lock_known: bool = True

    def to_dict(self) -> dict[str, Any]:
        supported = self.supported_graphics_mhz
        now = ("graphics_mhz", "memory_mhz", "max_graphics_mhz", "max_memory_mhz")
        return {name: getattr(self, name) for name in now} | {
            "supported_graphics_mhz": [supported[0], supported[-1]] if supported else "not supported",
            "supported_graphics_count": len(supported),
            "supported_memory_mhz": list(self.supported_memory_mhz),
            "locked_graphics_mhz": (
                list(self.locked_graphics_mhz)
                if self.locked_graphics_mhz is not None
                else ("unlocked" if self.lock_known else "unknown (NVML cannot read a clock lock)")
            ),
        }


@dataclass(frozen=True)
class MemoryHealth:
    """The XID-relevant memory state of a GPU; None wherever NVML answers NOT_SUPPORTED.

    Retired pages (nvmlDeviceGetRetiredPages / ...PendingStatus) are what GPUs before Ampere do after
    ECC errors (XID 48, 63, 64); row remapping (nvmlDeviceGetRemappedRows) is what Ampere and later do
    instead. A pending retirement or remap takes effect only after a GPU reset.
    """

    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        def shown(value: int | bool | None) -> int | bool | str:
            return "not supported" if value is None else value

        return {
            "retired_pages": {
                "single_bit_ecc": shown(self.retired_pages_single_bit),
                "double_bit_ecc": shown(self.retired_pages_double_bit),
                "pending": shown(self.retired_pages_pending),
            },
            "remapped_rows": {
                "correctable": shown(self.remapped_rows_correctable),
                "uncorrectable": shown(self.remapped_rows_uncorrectable),
                "pending": shown(self.remapped_rows_pending),
                "failure": shown(self.remapped_rows_failure),
            },
        }


@dataclass(frozen=True)
class ResetState:
    """What decides whether a GPU may be reset, beyond its processes (which GpuInfo has)."""

    mig_enabled: bool | None
    """nvmlDeviceGetMigMode's current mode; None where the GPU has no MIG."""
    mig_devices: tuple[str, ...]
    active_nvlinks: tuple[int, ...] | None
    """Links nvmlDeviceGetNvLinkState reports active; None where the GPU has no NVLink."""
    nvlink_peers: tuple[str, ...] = ()
    """The far end of each active link as NVML reports it ("link 0: switch 00000000:05:00.0")."""
    nvlink_gpu_peers: tuple[str, ...] = ()
    """PCI bus ids of GPUs linked directly (no NVSwitch between): the driver resets such GPUs only together."""
    persistence_mode: bool | None = None
    """nvmlDeviceGetPersistenceMode (None: not supported); the reset turns it off and on again around itself."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "mig_mode": "not supported"
            if self.mig_enabled is None
            else ("enabled" if self.mig_enabled else "disabled"),
            "mig_devices": list(self.mig_devices),
            "active_nvlinks": "not supported" if self.active_nvlinks is None else list(self.active_nvlinks),
            "nvlink_peers": list(self.nvlink_peers),
            "nvlink_gpu_peers": list(self.nvlink_gpu_peers),
            "persistence_mode": (
                "not supported" if self.persistence_mode is None else ("on" if self.persistence_mode else "off")
            ),
        }
