"""What a GPU backend reports: one frozen snapshot per GPU.

Backends build these; selection, the gpu actions, the `remediate gpu status`
command and the node agent (which ships them as JSON, hence `to_dict` /
`from_dict`) read them. Power values are milliwatts, as in NVML; `to_dict` adds
watts as floats for people reading the audit history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
        return {
            "index": self.index,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "name": self.name,
            "power_limit_mw": self.power_limit_mw,
            "power_limit_w": _watts(self.power_limit_mw),
            "default_limit_mw": self.default_limit_mw,
            "default_limit_w": _watts(self.default_limit_mw),
            "min_limit_mw": self.min_limit_mw,
            "min_limit_w": _watts(self.min_limit_mw),
            "max_limit_mw": self.max_limit_mw,
            "max_limit_w": _watts(self.max_limit_mw),
            "enforced_limit_mw": self.enforced_limit_mw,
            "enforced_limit_w": _watts(self.enforced_limit_mw),
            "power_usage_mw": self.power_usage_mw,
            "power_usage_w": _watts(self.power_usage_mw),
            "temperature_c": self.temperature_c,
            "processes": [process.to_dict() for process in self.processes],
            "mig_uuids": list(self.mig_uuids),
        }

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
