"""A simulated GPU backend with NVML's semantics, its state in one YAML or JSON file (remediate.gpu.simfile).

Selected only explicitly (`open_backend("simulated", simulator_file=...)`), for
tests, demos and trying playbooks on a laptop. It behaves like the driver where
remediate can tell the difference: power in milliwatts; a limit outside
[min, max] is GpuInvalidArgument; without root every change (power limit, clock
lock or unlock, reset) is GpuNoPermission while reads still work; a lost GPU
fails every call with GpuLost; the enforced limit is the current limit.

A reset (`reset_gpu`, what `nvidia-smi --gpu-reset` does) is refused like the driver refuses it while a
compute process is on the GPU, MIG instances exist on it, or another client holds it; otherwise
it unlocks the clocks, puts the power limit back to the default, applies pending page retirements
and row remaps (pending becomes false) and bumps `reset_count`.
`SimulatedBackend.write_example(path)` writes an 8 x H100-like file to start from (`remediate gpu
simulate init FILE` writes one with every field explained, simfile.example_text);
`update_device` and `set_as_root` change the file for tests and demos.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from remediate.gpu import simfile
from remediate.gpu.errors import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_IN_USE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    GpuInvalidArgument,
    GpuLost,
    GpuNotFound,
    GpuResetRefused,
    error_for_code,
)
from remediate.gpu.events import XID
from remediate.gpu.health import GpuHealth
from remediate.gpu.model import ClockState, GpuInfo, MemoryHealth, ResetState
from remediate.gpu.sim_events import INJECTABLE, SimEventWatch, append_event
from remediate.gpu.simfile import SimDevice, SimState


class SimulatedBackend:
    """GpuBackend over a device file; see remediate.gpu.simfile for the format."""

    name = "simulated"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        simfile.read_state(self.path)  # fail at construction, with the file's name, rather than on the first alert

    # --- GpuBackend

    def devices(self) -> list[GpuInfo]:
        with simfile.transaction(self.path) as state:
            for device in state.devices:
                _raise_injected(state, device, "read", f"read GPU {device.info.index}")
            return [device.info for device in state.devices]

    def device(self, uuid: str) -> GpuInfo:
        return self._read(uuid, "").info

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        if isinstance(milliwatts, bool) or not isinstance(milliwatts, int) or milliwatts < 0:
            raise GpuInvalidArgument(f"power limit must be a non-negative integer of milliwatts, got {milliwatts!r}")
        doing = f"set the power limit of {uuid} to {milliwatts} mW"
        with self._change(uuid, "set_power_limit", doing) as (state, device):
            info = device.info
            if not info.min_limit_mw <= milliwatts <= info.max_limit_mw:
                raise error_for_code(
                    NVML_ERROR_INVALID_ARGUMENT,
                    doing=doing,
                    detail=f"outside the device's constraints {info.min_limit_mw}..{info.max_limit_mw} mW",
                )
            state.change(device, power_limit_mw=milliwatts)

    def reset_locked_clocks(self, uuid: str) -> None:
        """The optional capability (see remediate.gpu.backend): unlock GPU and memory clocks, as NVML's resets."""
        with self._change(uuid, "reset_locked_clocks", f"reset the locked clocks of {uuid}") as (state, device):
            state.change(device, locked_gpu_clocks_mhz=None, locked_memory_clocks_mhz=None)

    def clocks(self, uuid: str) -> ClockState:
        """The optional capability: current, maximum and supported clocks, and the graphics lock."""
        return self._read(uuid, "the clocks of ").clocks

    def lock_gpu_clocks(self, uuid: str, min_mhz: int, max_mhz: int) -> None:
        """The optional capability: nvmlDeviceSetGpuLockedClocks (nvidia-smi -lgc MIN,MAX)."""
        doing = f"lock the GPU clocks of {uuid} to {min_mhz}..{max_mhz} MHz"
        with self._change(uuid, "lock_gpu_clocks", doing, clock_lock=True) as (state, device):
            supported = device.clocks.supported_graphics_mhz
            if min_mhz > max_mhz or min_mhz not in supported or max_mhz not in supported:
                raise error_for_code(
                    NVML_ERROR_INVALID_ARGUMENT,
                    doing=doing,
                    detail=f"not a range of supported graphics clocks ({supported[0]}..{supported[-1]} MHz, "
                    f"{len(supported)} values)",
                )
            state.change(device, locked_gpu_clocks_mhz=[min_mhz, max_mhz])

    def unlock_gpu_clocks(self, uuid: str) -> None:
        """The optional capability: nvmlDeviceResetGpuLockedClocks (nvidia-smi -rgc); memory clocks stay."""
        doing = f"reset the locked GPU clocks of {uuid}"
        with self._change(uuid, "unlock_gpu_clocks", doing, clock_lock=True) as (state, device):
            state.change(device, locked_gpu_clocks_mhz=None)

    def memory_health(self, uuid: str) -> MemoryHealth:
        """The optional capability: retired pages and remapped rows (None where the file leaves them out)."""
        return self._read(uuid, "the memory health of ").health

    def reset_state(self, uuid: str) -> ResetState:
        """The optional capability: MIG mode and devices, active NVLinks and their far ends."""
        return self._read(uuid, "the MIG and NVLink state of ").reset

    def reset_gpu(self, uuid: str) -> None:
        """The optional capability: what `nvidia-smi --gpu-reset -i BUS` does, refused like the driver refuses it."""
        doing = f"reset GPU {uuid}"
        with self._change(uuid, "reset_gpu", doing) as (state, device):
            info, entry = device.info, device.entry
            if info.processes:
                pids = ", ".join(str(p.pid) for p in info.processes)
                raise GpuResetRefused(f"{doing} refused: the GPU is in use by processes {pids}", code=NVML_ERROR_IN_USE)
            if entry.get("other_clients"):
                raise GpuResetRefused(
                    f"{doing} failed: the driver says the GPU is in use by another client "
                    f"({', '.join(entry['other_clients'])}); "
                    "stop what holds it (DCGM's nv-hostengine, dcgm-exporter, Fabric Manager) or reboot the node",
                    code=NVML_ERROR_IN_USE,
                )
            if info.mig_uuids:
                raise GpuResetRefused(
                    f"{doing} refused: MIG instances exist on it ({', '.join(info.mig_uuids)})", code=NVML_ERROR_IN_USE
                )
            health = ("retired_pages", "remapped_rows")
            pending = {k: {**entry[k], "pending": False} for k in health if isinstance(entry.get(k), dict)}
            state.change(
                device,
                locked_gpu_clocks_mhz=None,
                locked_memory_clocks_mhz=None,
                power_limit_mw=info.default_limit_mw,
                reset_count=device.reset_count + 1,
                **pending,
            )

    def parent_of_mig(self, mig_uuid: str) -> str:
        with simfile.transaction(self.path) as state:
            for device in state.devices:
                if mig_uuid.lower() in (m.lower() for m in device.info.mig_uuids):
                    return device.info.uuid
        raise GpuNotFound(f"no MIG device {mig_uuid} on this (simulated) node")

    def health_scan(self) -> list[GpuHealth]:
        """The optional capability (gpu.health): every GPU's health reads; a lost GPU (or an injected
        gpu_lost read failure) is reported as lost, as the NVML backend reports it, not raised."""
        found = []
        with simfile.transaction(self.path) as state:
            for device in state.devices:
                info = device.info
                who = {"index": info.index, "uuid": info.uuid, "pci_bus_id": info.pci_bus_id, "name": info.name}
                try:
                    _raise_injected(state, device, "read", f"read the health of GPU {info.index} ({info.uuid})")
                except GpuLost as exc:
                    found.append(GpuHealth(**who, lost=str(exc)))
                    continue
                found.append(GpuHealth(**who, reading=device.reading))
        return found

    def open_events(self) -> SimEventWatch:
        """The optional capability (remediate.gpu.events): the events `inject_event` appends from now on."""
        return SimEventWatch(self.path)

    # --- helpers for tests and demos

    def inject_event(self, uuid: str, kind: str = XID, xid: int | None = None) -> None:
        """A GPU fault event, as the driver would send it (remediate.gpu.sim_events): kind xid (give `xid`)
        or double_bit_ecc. A lost GPU is `update_device(uuid, lost=True)` instead: it sends no event."""
        if kind not in INJECTABLE:
            raise ValueError(f"kind must be one of {', '.join(INJECTABLE)}, got {kind!r}")
        if kind == XID and (isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0):
            raise ValueError(f"an xid event needs a positive XID number, got {xid!r}")
        with simfile.transaction(self.path) as state:
            uuid = state.find(uuid).info.uuid
        append_event(self.path, {"kind": kind, "uuid": uuid, **({"xid": xid} if kind == XID else {})})

    def reset_count(self, uuid: str) -> int:
        """How often reset_gpu reset this GPU (the driver keeps no such count: for tests and demos)."""
        with simfile.transaction(self.path) as state:
            return state.find(uuid).reset_count

    def update_device(self, uuid: str, **changes: Any) -> GpuInfo:
        """Change a device's fields in the file (e.g. lost=True, temperature_c=91, fail={...}); validated."""
        unknown = set(changes) - simfile.DEVICE_KEYS
        if unknown:
            raise ValueError(f"unknown device fields: {', '.join(sorted(unknown))}")
        with simfile.transaction(self.path) as state:
            position = state.devices.index(device := state.find(uuid))
            device.entry.update(changes)
            # Re-parse so a bad change fails here, not in the next reader.
            updated = simfile.parse(state.raw, self.path).devices[position].info
            state.dirty = True
            return updated

    def remove_device(self, uuid: str) -> None:
        """Drop a device from the file: NVML no longer lists it, as when a GPU falls off the bus so far (XID 79)
        that the driver stops enumerating it, where `lost=True` is one still listed but answering nothing."""
        with simfile.transaction(self.path) as state:
            position = state.devices.index(state.find(uuid))
            del state.raw["devices"][position]
            state.dirty = True

    def locked_clocks(self, uuid: str) -> dict[str, tuple[int, int] | None]:
        """The clocks locked on a GPU ({"gpu_mhz": (min, max) or None, "memory_mhz": ...}): NVML has no
        simple read of them, so GpuInfo does not carry them; tests and demos read them here."""
        with simfile.transaction(self.path) as state:
            device = state.find(uuid)
        return {"gpu_mhz": device.clocks.locked_graphics_mhz, "memory_mhz": device.locked_memory_clocks_mhz}

    def set_as_root(self, as_root: bool) -> None:
        """Switch between root (sets work) and non-root (sets raise GpuNoPermission)."""
        with simfile.transaction(self.path) as state:
            state.raw["as_root"] = bool(as_root)
            state.dirty = True

    @classmethod
    def write_example(cls, path: Path | str, count: int = 8, *, as_root: bool = True) -> Path:
        """Write a file of `count` H100-like GPUs (700 W default and max, 200 W min) and return its path.

        UUIDs are derived from the index, so the same call always writes the same GPUs.
        """
        path, raw = Path(path), simfile.example(count, as_root=as_root)
        simfile.parse(raw, path)  # what we write must load
        simfile.write_atomically(path, raw)
        return path

    # --- the shape every NVML call shares

    def _read(self, uuid: str, what: str) -> SimDevice:
        """The device, after the injected failures of a read (`what`: "the clocks of ", for the message)."""
        with simfile.transaction(self.path) as state:
            device = state.find(uuid)
            _raise_injected(state, device, "read", f"read {what}{uuid if what else device.info.uuid}")
            return device

    @contextmanager
    def _change(
        self, uuid: str, operation: str, doing: str, *, clock_lock: bool = False
    ) -> Iterator[tuple[SimState, SimDevice]]:
        """A change to one device, checked as NVML checks it: injected failure, then NOT_SUPPORTED (a clock
        lock on a GPU without supported clocks), then NO_PERMISSION without root."""
        with simfile.transaction(self.path) as state:
            device = state.find(uuid)
            _raise_injected(state, device, operation, doing)
            if clock_lock and not device.clocks.supported_graphics_mhz:
                raise error_for_code(NVML_ERROR_NOT_SUPPORTED, doing=doing, detail="this GPU cannot lock its clocks")
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            yield state, device


def _raise_injected(state: SimState, device: SimDevice, operation: str, doing: str) -> None:
    """Raise the failure this operation must raise now, if any (a lost GPU fails everything, like NVML)."""
    failure = simfile.Failure(NVML_ERROR_GPU_IS_LOST, None) if device.lost else device.fail.get(operation)
    if failure is None:
        return
    if failure.times is not None:
        # Count the failure down in the file so that every process sees the same remaining number.
        fail = device.entry["fail"]
        if failure.times <= 1:
            del fail[operation]
        else:
            fail[operation] = {**fail[operation], "times": failure.times - 1}
        state.dirty = True
    raise error_for_code(failure.code, doing=doing, detail="injected by the simulator's file")
