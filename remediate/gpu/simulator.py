"""A simulated GPU backend with NVML's semantics, its state in one YAML or JSON file.

Selected only explicitly (`open_backend("simulated", simulator_file=...)`), for
tests, demos and trying playbooks on a laptop. It behaves like the driver where
remediate can tell the difference: power in milliwatts; a limit outside
[min, max] is GpuInvalidArgument; without root a set is GpuNoPermission while
reads still work; a lost GPU fails every call with GpuLost; the enforced limit
is the current limit.

State is shared and survives restarts like the driver's: every call re-reads the
file, and every change is a read-modify-write under an exclusive `fcntl.flock`
on a sidecar lock file (`<file>.lock`), written atomically (temp file +
os.replace). So two backends on the same file, in one process or in many (server
workers, agent, CLI, a test's subprocess), see one set of GPUs. Comments in a
YAML file are lost on the first write.

File format (YAML; JSON with the same keys when the name ends in .json):

    as_root: true                 # false: set_power_limit raises GpuNoPermission (NVML code 4)
    devices:
      - index: 0                  # required, unique
        uuid: GPU-8b9c...         # required, unique, "GPU-..."
        pci_bus_id: "00000000:18:00.0"   # any NVML form; default derived from the index
        name: NVIDIA H100 80GB HBM3      # default "Simulated GPU"
        default_limit_mw: 700000  # required
        min_limit_mw: 200000      # required
        max_limit_mw: 700000      # required
        power_limit_mw: 700000    # current limit; default: default_limit_mw
        power_usage_mw: 312000    # optional (null: the GPU cannot report it)
        temperature_c: 54         # optional
        processes:                # optional
          - {pid: 4242, used_memory_bytes: 1073741824, name: python}
        mig_uuids: [MIG-...]      # optional: this GPU's MIG devices (parent_of_mig finds it)
        locked_gpu_clocks_mhz: [1980, 1980]     # optional: clocks locked (nvidia-smi -lgc); null: not locked
        locked_memory_clocks_mhz: [2619, 2619]  # optional: (nvidia-smi -lmc); reset_locked_clocks clears both
        graphics_clock_mhz: 1755  # optional current clocks (a graphics lock caps what is reported)
        memory_clock_mhz: 2619
        supported_graphics_clocks_mhz: [345, 360, ..., 1980]  # optional: absent, a clock lock is NOT_SUPPORTED;
                                                             #   a lock outside this set is INVALID_ARGUMENT
        supported_memory_clocks_mhz: [2619]
        retired_pages: {single_bit: 0, double_bit: 1, pending: true}   # optional: absent = not supported
        remapped_rows: {correctable: 0, uncorrectable: 2, pending: true, failure: false}   # ditto
        mig_enabled: false        # optional: absent = no MIG on this GPU; listed mig_uuids mean true
        nvlinks:                  # optional: the active NVLinks and their far ends; absent = no NVLink
          - {link: 0, peer: "00000000:05:00.0", peer_type: switch}   # peer_type gpu: linked directly
        persistence_mode: true    # optional (absent: not supported); a reset turns it off and on around itself
        other_clients: [nv-hostengine]  # optional: what holds the GPU beyond compute processes (DCGM, Fabric
                                  #   Manager): NVML does not list them, the reset is refused "in use by another client"
        reset_count: 0            # bumped by every reset_gpu
        lost: false               # true: every call on this GPU raises GpuLost
        fail:                     # optional injected failures, per operation (set_power_limit | read |
                                  #   reset_locked_clocks | lock_gpu_clocks | unlock_gpu_clocks | reset_gpu)
          set_power_limit: timeout                    # every time, or ...
          read: {error: gpu_lost, times: 1}           # ... the next `times` calls only (counted down in the file)

Failure names: gpu_lost, not_supported, no_permission, invalid_argument, not_found,
reset_required, driver_not_loaded, and the retryable timeout, in_use, unknown.
Reported power usage never exceeds the current limit, as on a real GPU.
Without root every change (power limit, clock lock or unlock, reset) is NO_PERMISSION. A reset
(`reset_gpu`, what `nvidia-smi --gpu-reset` does) is refused like the driver refuses it while a
compute process is on the GPU, MIG instances exist on it, or another client holds it; otherwise
it unlocks the clocks, puts the power limit back to the default, applies pending page retirements
and row remaps (pending becomes false) and bumps `reset_count`.
`SimulatedBackend.write_example(path)` writes an 8 x H100-like file to start from;
`update_device` and `set_as_root` change the file for tests and demos.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid as uuid_module
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remediate.errors import ConfigError
from remediate.gpu.errors import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_IN_USE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_RESET_REQUIRED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    GpuInvalidArgument,
    GpuNotFound,
    GpuResetRefused,
    error_for_code,
)
from remediate.gpu.model import ClockState, GpuInfo, GpuProcess, MemoryHealth, ResetState
from remediate.gpu.pci import normalize_pci_bus_id

FAILURES: dict[str, int] = {
    "gpu_lost": NVML_ERROR_GPU_IS_LOST,
    "not_supported": NVML_ERROR_NOT_SUPPORTED,
    "no_permission": NVML_ERROR_NO_PERMISSION,
    "invalid_argument": NVML_ERROR_INVALID_ARGUMENT,
    "not_found": NVML_ERROR_NOT_FOUND,
    "timeout": NVML_ERROR_TIMEOUT,
    "in_use": NVML_ERROR_IN_USE,
    "unknown": NVML_ERROR_UNKNOWN,
    "reset_required": NVML_ERROR_RESET_REQUIRED,
    "driver_not_loaded": NVML_ERROR_DRIVER_NOT_LOADED,
}
"""Injectable failure name -> the NVML code the simulator raises for it."""
OPERATIONS = ("set_power_limit", "read", "reset_locked_clocks", "lock_gpu_clocks", "unlock_gpu_clocks", "reset_gpu")

_DEVICE_KEYS = frozenset(
    {
        "index",
        "uuid",
        "pci_bus_id",
        "name",
        "power_limit_mw",
        "default_limit_mw",
        "min_limit_mw",
        "max_limit_mw",
        "power_usage_mw",
        "temperature_c",
        "processes",
        "mig_uuids",
        "locked_gpu_clocks_mhz",
        "locked_memory_clocks_mhz",
        "graphics_clock_mhz",
        "memory_clock_mhz",
        "supported_graphics_clocks_mhz",
        "supported_memory_clocks_mhz",
        "retired_pages",
        "remapped_rows",
        "mig_enabled",
        "nvlinks",
        "reset_count",
        "persistence_mode",
        "other_clients",
        "lost",
        "fail",
    }
)
_FILE_KEYS = frozenset({"as_root", "devices"})

# Bus numbers of the eight GPUs of an HGX H100 board, as nvidia-smi shows them.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
# An H100 SXM's graphics clocks as nvidia-smi -q -d SUPPORTED_CLOCKS lists them: 345..1980 MHz in 15 MHz steps.
_H100_GRAPHICS_CLOCKS = tuple(range(345, 1981, 15))
_EXAMPLE_NAMESPACE = uuid_module.UUID("6f1d2c1e-3a52-4a8e-9a57-1d0c3f6b2e10")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class _Failure:
    code: int
    times: int | None
    """None: every call fails; N: the next N calls fail."""


@dataclass(frozen=True)
class _Device:
    info: GpuInfo
    lost: bool
    fail: Mapping[str, _Failure]
    position: int
    """Index into the file's `devices` list, for writing back."""
    locked_gpu_clocks_mhz: tuple[int, int] | None = None
    locked_memory_clocks_mhz: tuple[int, int] | None = None
    clocks: ClockState | None = None
    health: MemoryHealth = field(default_factory=MemoryHealth)
    reset: ResetState = field(default_factory=lambda: ResetState(None, (), None))
    reset_count: int = 0

    def check(self, operation: str) -> _Failure | None:
        """The failure this operation must raise now, if any (a lost GPU fails everything, like NVML)."""
        if self.lost:
            return _Failure(NVML_ERROR_GPU_IS_LOST, None)
        return self.fail.get(operation)


@dataclass
class _State:
    raw: dict[str, Any]
    as_root: bool
    devices: list[_Device]
    dirty: bool = field(default=False)

    def find(self, uuid: str) -> _Device:
        wanted = uuid.lower()
        for device in self.devices:
            if device.info.uuid.lower() == wanted:
                return device
        known = ", ".join(d.info.uuid for d in self.devices) or "none"
        raise GpuNotFound(f"no GPU with UUID {uuid} on this (simulated) node; GPUs here: {known}")


class SimulatedBackend:
    """GpuBackend over a device file; see the module docstring for the format."""

    name = "simulated"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._read_state()  # fail at construction, with the file's name, rather than on the first alert

    # --- GpuBackend

    def devices(self) -> list[GpuInfo]:
        with self._transaction() as state:
            for device in state.devices:
                self._raise_injected(state, device, "read", f"read GPU {device.info.index}")
            return [device.info for device in state.devices]

    def device(self, uuid: str) -> GpuInfo:
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "read", f"read {device.info.uuid}")
            return device.info

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        if isinstance(milliwatts, bool) or not isinstance(milliwatts, int) or milliwatts < 0:
            raise GpuInvalidArgument(f"power limit must be a non-negative integer of milliwatts, got {milliwatts!r}")
        doing = f"set the power limit of {uuid} to {milliwatts} mW"
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "set_power_limit", doing)
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            info = device.info
            if not info.min_limit_mw <= milliwatts <= info.max_limit_mw:
                raise error_for_code(
                    NVML_ERROR_INVALID_ARGUMENT,
                    doing=doing,
                    detail=f"outside the device's constraints {info.min_limit_mw}..{info.max_limit_mw} mW",
                )
            state.raw["devices"][device.position]["power_limit_mw"] = milliwatts
            state.dirty = True

    def reset_locked_clocks(self, uuid: str) -> None:
        """The optional capability (see remediate.gpu.backend): unlock GPU and memory clocks, as NVML's resets."""
        doing = f"reset the locked clocks of {uuid}"
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "reset_locked_clocks", doing)
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            entry = state.raw["devices"][device.position]
            entry["locked_gpu_clocks_mhz"] = None
            entry["locked_memory_clocks_mhz"] = None
            state.dirty = True

    def clocks(self, uuid: str) -> ClockState:
        """The optional capability: current, maximum and supported clocks, and the graphics lock."""
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "read", f"read the clocks of {uuid}")
            assert device.clocks is not None  # always built by _parse_device
            return device.clocks

    def lock_gpu_clocks(self, uuid: str, min_mhz: int, max_mhz: int) -> None:
        """The optional capability: nvmlDeviceSetGpuLockedClocks (nvidia-smi -lgc MIN,MAX)."""
        doing = f"lock the GPU clocks of {uuid} to {min_mhz}..{max_mhz} MHz"
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "lock_gpu_clocks", doing)
            supported = device.clocks.supported_graphics_mhz if device.clocks else ()
            if not supported:
                raise error_for_code(NVML_ERROR_NOT_SUPPORTED, doing=doing, detail="this GPU cannot lock its clocks")
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            if min_mhz > max_mhz or min_mhz not in supported or max_mhz not in supported:
                raise error_for_code(
                    NVML_ERROR_INVALID_ARGUMENT,
                    doing=doing,
                    detail=f"not a range of supported graphics clocks ({supported[0]}..{supported[-1]} MHz, "
                    f"{len(supported)} values)",
                )
            state.raw["devices"][device.position]["locked_gpu_clocks_mhz"] = [min_mhz, max_mhz]
            state.dirty = True

    def unlock_gpu_clocks(self, uuid: str) -> None:
        """The optional capability: nvmlDeviceResetGpuLockedClocks (nvidia-smi -rgc); memory clocks stay."""
        doing = f"reset the locked GPU clocks of {uuid}"
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "unlock_gpu_clocks", doing)
            if not (device.clocks and device.clocks.supported_graphics_mhz):
                raise error_for_code(NVML_ERROR_NOT_SUPPORTED, doing=doing, detail="this GPU cannot lock its clocks")
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            state.raw["devices"][device.position]["locked_gpu_clocks_mhz"] = None
            state.dirty = True

    def memory_health(self, uuid: str) -> MemoryHealth:
        """The optional capability: retired pages and remapped rows (None where the file leaves them out)."""
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "read", f"read the memory health of {uuid}")
            return device.health

    def reset_state(self, uuid: str) -> ResetState:
        """The optional capability: MIG mode and devices, active NVLinks and their far ends."""
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "read", f"read the MIG and NVLink state of {uuid}")
            return device.reset

    def reset_gpu(self, uuid: str) -> None:
        """The optional capability: what `nvidia-smi --gpu-reset -i BUS` does, refused like the driver refuses it."""
        doing = f"reset GPU {uuid}"
        with self._transaction() as state:
            device = state.find(uuid)
            self._raise_injected(state, device, "reset_gpu", doing)
            if not state.as_root:
                raise error_for_code(NVML_ERROR_NO_PERMISSION, doing=doing)
            if device.info.processes:
                pids = ", ".join(str(p.pid) for p in device.info.processes)
                raise GpuResetRefused(f"{doing} refused: the GPU is in use by processes {pids}", code=NVML_ERROR_IN_USE)
            clients = state.raw["devices"][device.position].get("other_clients") or []
            if clients:
                raise GpuResetRefused(
                    f"{doing} failed: the driver says the GPU is in use by another client ({', '.join(clients)}); "
                    "stop what holds it (DCGM's nv-hostengine, dcgm-exporter, Fabric Manager) or reboot the node",
                    code=NVML_ERROR_IN_USE,
                )
            if device.info.mig_uuids:
                raise GpuResetRefused(
                    f"{doing} refused: MIG instances exist on it ({', '.join(device.info.mig_uuids)})",
                    code=NVML_ERROR_IN_USE,
                )
            entry = state.raw["devices"][device.position]
            entry["locked_gpu_clocks_mhz"] = None
            entry["locked_memory_clocks_mhz"] = None
            entry["power_limit_mw"] = device.info.default_limit_mw
            for key in ("retired_pages", "remapped_rows"):
                if isinstance(entry.get(key), dict):
                    entry[key] = {**entry[key], "pending": False}
            entry["reset_count"] = device.reset_count + 1
            state.dirty = True

    def reset_count(self, uuid: str) -> int:
        """How often reset_gpu reset this GPU (the driver keeps no such count: for tests and demos)."""
        with self._transaction() as state:
            return state.find(uuid).reset_count

    def parent_of_mig(self, mig_uuid: str) -> str:
        wanted = mig_uuid.lower()
        with self._transaction() as state:
            for device in state.devices:
                if any(m.lower() == wanted for m in device.info.mig_uuids):
                    return device.info.uuid
        raise GpuNotFound(f"no MIG device {mig_uuid} on this (simulated) node")

    # --- helpers for tests and demos

    def update_device(self, uuid: str, **changes: Any) -> GpuInfo:
        """Change a device's fields in the file (e.g. lost=True, temperature_c=91, fail={...}); validated."""
        unknown = set(changes) - _DEVICE_KEYS
        if unknown:
            raise ValueError(f"unknown device fields: {', '.join(sorted(unknown))}")
        with self._transaction() as state:
            position = state.find(uuid).position
            state.raw["devices"][position].update(changes)
            # Re-parse so a bad change fails here, not in the next reader.
            updated = _parse(state.raw, self.path).devices[position].info
            state.dirty = True
            return updated

    def locked_clocks(self, uuid: str) -> dict[str, tuple[int, int] | None]:
        """The clocks locked on a GPU ({"gpu_mhz": (min, max) or None, "memory_mhz": ...}): NVML has no
        simple read of them, so GpuInfo does not carry them; tests and demos read them here."""
        with self._transaction() as state:
            device = state.find(uuid)
        return {"gpu_mhz": device.locked_gpu_clocks_mhz, "memory_mhz": device.locked_memory_clocks_mhz}

    def set_as_root(self, as_root: bool) -> None:
        """Switch between root (sets work) and non-root (sets raise GpuNoPermission)."""
        with self._transaction() as state:
            state.raw["as_root"] = bool(as_root)
            state.dirty = True

    @classmethod
    def write_example(cls, path: Path | str, count: int = 8, *, as_root: bool = True) -> Path:
        """Write a file of `count` H100-like GPUs (700 W default and max, 200 W min) and return its path.

        UUIDs are derived from the index, so the same call always writes the same GPUs.
        """
        path = Path(path)
        devices = []
        for index in range(count):
            bus = _HGX_BUSES[index] if index < len(_HGX_BUSES) else 0x40 + index
            devices.append(
                {
                    "index": index,
                    "uuid": f"GPU-{uuid_module.uuid5(_EXAMPLE_NAMESPACE, f'gpu-{index}')}",
                    "pci_bus_id": f"00000000:{bus:02X}:00.0",
                    "name": "NVIDIA H100 80GB HBM3",
                    "power_limit_mw": 700_000,
                    "default_limit_mw": 700_000,
                    "min_limit_mw": 200_000,
                    "max_limit_mw": 700_000,
                    "power_usage_mw": 310_000 + 17_000 * index,
                    "temperature_c": 45 + 3 * index,
                    "processes": [{"pid": 4200 + index, "used_memory_bytes": 60 * 1024**3, "name": "python"}],
                    "mig_uuids": [],
                    "graphics_clock_mhz": 1980,
                    "memory_clock_mhz": 2619,
                    "supported_graphics_clocks_mhz": list(_H100_GRAPHICS_CLOCKS),
                    "supported_memory_clocks_mhz": [2619],
                    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                    "mig_enabled": False,
                    "persistence_mode": True,
                }
            )
        raw = {"as_root": as_root, "devices": devices}
        _parse(raw, path)  # what we write must load
        _write_atomically(path, raw)
        return path

    # --- file handling

    def _read_state(self) -> _State:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"simulated GPU file {self.path}: cannot read it: {exc.strerror or exc}") from exc
        try:
            raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (C or pure Python)
        except yaml.YAMLError as exc:
            raise ConfigError(f"simulated GPU file {self.path}: not valid YAML/JSON: {exc}") from exc
        return _parse(raw, self.path)

    @contextmanager
    def _transaction(self) -> Iterator[_State]:
        """Hold the file's lock, read it, and write it back if the block changed it (even if it then raised)."""
        try:
            lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"simulated GPU file {self.path}: cannot open lock file {self.lock_path}: {exc}") from exc
        try:
            # Locks belong to the open file description, so this excludes other threads as well as other processes.
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            state = self._read_state()
            try:
                yield state
            finally:
                if state.dirty:
                    _write_atomically(self.path, state.raw)
        finally:
            os.close(lock_fd)  # closing releases the flock

    def _raise_injected(self, state: _State, device: _Device, operation: str, doing: str) -> None:
        failure = device.check(operation)
        if failure is None:
            return
        if failure.times is not None:
            # Count the failure down in the file so that every process sees the same remaining number.
            fail = state.raw["devices"][device.position]["fail"]
            if failure.times <= 1:
                del fail[operation]
            else:
                fail[operation] = {**fail[operation], "times": failure.times - 1}
            state.dirty = True
        raise error_for_code(failure.code, doing=doing, detail="injected by the simulator's file")


def _write_atomically(path: Path, raw: Mapping[str, Any]) -> None:
    if path.suffix.lower() == ".json":
        text = json.dumps(raw, indent=2) + "\n"
    else:
        text = yaml.dump(dict(raw), Dumper=_Dumper, sort_keys=False, default_flow_style=None)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        # Keep the file's mode (mkstemp creates 0600). No fsync: like the driver's, this state need not
        # survive a reboot, only a process restart, and os.replace already makes the swap atomic for that.
        try:
            os.chmod(tmp, path.stat().st_mode & 0o777)
        except FileNotFoundError:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- parsing and validation of the file


@dataclass(frozen=True)
class _Where:
    """Builds ConfigErrors that name the file and the place in it."""

    path: Path
    where: str

    def __call__(self, message: str) -> ConfigError:
        return ConfigError(f"simulated GPU file {self.path}: {self.where}: {message}")

    def at(self, where: str) -> _Where:
        return _Where(self.path, where)


def _parse(raw: Any, path: Path) -> _State:
    bad = _Where(path, "top level")
    if not isinstance(raw, dict):
        raise bad("expected a mapping with `devices`")
    unknown = set(raw) - _FILE_KEYS
    if unknown:
        raise bad(f"unknown keys {sorted(unknown)} (expected as_root, devices)")
    as_root = raw.get("as_root", True)
    if not isinstance(as_root, bool):
        raise bad.at("as_root")("expected true or false")
    entries = raw.get("devices")
    if not isinstance(entries, list):
        raise bad.at("devices")("expected a list of devices")
    devices = [_parse_device(entry, position, bad.at(f"devices[{position}]")) for position, entry in enumerate(entries)]
    for attribute in ("index", "uuid", "pci_bus_id"):
        seen: set[object] = set()
        for device in devices:
            value = getattr(device.info, attribute)
            key = value.lower() if isinstance(value, str) else value
            if key in seen:
                raise bad.at("devices")(f"two devices have {attribute} {value}")
            seen.add(key)
    return _State(raw=raw, as_root=as_root, devices=devices)


def _optional_int(entry: Mapping[str, Any], key: str, bad: _Where) -> int | None:
    value = entry.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise bad(f"{key} must be a non-negative integer, got {value!r}")
    return value


def _required_int(entry: Mapping[str, Any], key: str, bad: _Where) -> int:
    value = _optional_int(entry, key, bad)
    if value is None:
        raise bad(f"{key} is required (a non-negative integer)")
    return value


def _parse_device(entry: Any, position: int, bad: _Where) -> _Device:
    if not isinstance(entry, dict):
        raise bad("expected a mapping")
    unknown = set(entry) - _DEVICE_KEYS
    if unknown:
        raise bad(f"unknown keys {sorted(unknown)}")
    index = _required_int(entry, "index", bad)
    uuid = entry.get("uuid")
    if not isinstance(uuid, str) or not uuid.startswith("GPU-"):
        raise bad(f"uuid must be a string starting with GPU-, got {uuid!r}")
    raw_pci = entry.get("pci_bus_id", f"00000000:{index + 1:02X}:00.0")
    if not isinstance(raw_pci, str):
        # YAML 1.1 reads an unquoted 18:00.0 as the base-60 number 1080.0.
        raise bad(f"pci_bus_id must be a quoted string, got {raw_pci!r}")
    try:
        pci_bus_id = normalize_pci_bus_id(raw_pci)
    except ValueError as exc:
        raise bad(f"pci_bus_id: {exc}") from None
    name = entry.get("name", "Simulated GPU")
    if not isinstance(name, str):
        raise bad("name must be a string")
    default_limit = _required_int(entry, "default_limit_mw", bad)
    min_limit = _required_int(entry, "min_limit_mw", bad)
    max_limit = _required_int(entry, "max_limit_mw", bad)
    limit = _optional_int(entry, "power_limit_mw", bad)
    limit = default_limit if limit is None else limit
    if not min_limit <= default_limit <= max_limit:
        raise bad(
            f"need min_limit_mw <= default_limit_mw <= max_limit_mw, got {min_limit}, {default_limit}, {max_limit}"
        )
    if not min_limit <= limit <= max_limit:
        raise bad(f"power_limit_mw {limit} is outside [{min_limit}, {max_limit}]")
    lost = entry.get("lost", False)
    if not isinstance(lost, bool):
        raise bad("lost must be true or false")
    info = GpuInfo(
        index=index,
        uuid=uuid,
        pci_bus_id=pci_bus_id,
        name=name,
        power_limit_mw=limit,
        default_limit_mw=default_limit,
        min_limit_mw=min_limit,
        max_limit_mw=max_limit,
        enforced_limit_mw=limit,  # no other limit (thermal, board) applies in the simulation
        power_usage_mw=_capped(_optional_int(entry, "power_usage_mw", bad), limit),
        temperature_c=_optional_int(entry, "temperature_c", bad),
        processes=_parse_processes(entry.get("processes") or [], bad),
        mig_uuids=_parse_mig_uuids(entry.get("mig_uuids") or [], bad),
    )
    return _Device(
        info=info,
        lost=lost,
        fail=_parse_failures(entry.get("fail") or {}, bad),
        position=position,
        locked_gpu_clocks_mhz=_clock_range(entry, "locked_gpu_clocks_mhz", bad),
        locked_memory_clocks_mhz=_clock_range(entry, "locked_memory_clocks_mhz", bad),
        clocks=_parse_clocks(entry, bad),
        health=_parse_health(entry, bad),
        reset=_parse_reset_state(entry, info.mig_uuids, bad),
        reset_count=_optional_int(entry, "reset_count", bad) or 0,
    )


def _clock_list(entry: Mapping[str, Any], key: str, bad: _Where) -> tuple[int, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in value):
        raise bad(f"{key} must be a list of positive integers (MHz), got {value!r}")
    return tuple(sorted(set(value)))


def _parse_clocks(entry: Mapping[str, Any], bad: _Where) -> ClockState:
    graphics = _optional_int(entry, "graphics_clock_mhz", bad)
    memory = _optional_int(entry, "memory_clock_mhz", bad)
    supported = _clock_list(entry, "supported_graphics_clocks_mhz", bad)
    supported_memory = _clock_list(entry, "supported_memory_clocks_mhz", bad)
    locked = _clock_range(entry, "locked_gpu_clocks_mhz", bad)
    if graphics is not None and locked is not None:
        graphics = min(graphics, locked[1])  # a lock caps the clock, as on the GPU
    return ClockState(
        graphics_mhz=graphics,
        memory_mhz=memory,
        max_graphics_mhz=supported[-1] if supported else graphics,
        max_memory_mhz=supported_memory[-1] if supported_memory else memory,
        supported_graphics_mhz=supported,
        supported_memory_mhz=supported_memory,
        locked_graphics_mhz=locked,
    )


def _flag(section: Mapping[str, Any], key: str, bad: _Where) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise bad(f"{key} must be true or false, got {value!r}")
    return value


def _parse_health(entry: Mapping[str, Any], bad: _Where) -> MemoryHealth:
    pages, rows = entry.get("retired_pages"), entry.get("remapped_rows")
    fields: dict[str, Any] = {}
    if pages is not None:
        if not isinstance(pages, dict) or set(pages) - {"single_bit", "double_bit", "pending"}:
            raise bad(f"retired_pages must be a mapping of single_bit, double_bit, pending; got {pages!r}")
        where = bad.at("retired_pages")
        fields.update(
            retired_pages_single_bit=_optional_int(pages, "single_bit", where) or 0,
            retired_pages_double_bit=_optional_int(pages, "double_bit", where) or 0,
            retired_pages_pending=_flag(pages, "pending", where),
        )
    if rows is not None:
        if not isinstance(rows, dict) or set(rows) - {"correctable", "uncorrectable", "pending", "failure"}:
            raise bad(f"remapped_rows must be a mapping of correctable, uncorrectable, pending, failure; got {rows!r}")
        where = bad.at("remapped_rows")
        fields.update(
            remapped_rows_correctable=_optional_int(rows, "correctable", where) or 0,
            remapped_rows_uncorrectable=_optional_int(rows, "uncorrectable", where) or 0,
            remapped_rows_pending=_flag(rows, "pending", where),
            remapped_rows_failure=_flag(rows, "failure", where),
        )
    return MemoryHealth(**fields)


def _parse_reset_state(entry: Mapping[str, Any], mig_uuids: tuple[str, ...], bad: _Where) -> ResetState:
    mig = entry.get("mig_enabled", True if mig_uuids else None)
    if mig is not None and not isinstance(mig, bool):
        raise bad(f"mig_enabled must be true or false, got {mig!r}")
    if mig_uuids:
        mig = True  # MIG devices exist only in MIG mode: listing them is enough
    links = entry.get("nvlinks")
    active: tuple[int, ...] | None = None
    peers: list[str] = []
    gpu_peers: list[str] = []
    if links is not None:
        if not isinstance(links, list):
            raise bad(f"nvlinks must be a list of {{link: N, peer: PCI bus id, peer_type: gpu|switch}}, got {links!r}")
        numbers = []
        for link in links:
            if not isinstance(link, dict) or set(link) - {"link", "peer", "peer_type"} or "link" not in link:
                raise bad(f"an NVLink is a mapping of link (required), peer and peer_type, got {link!r}")
            number = _required_int(link, "link", bad)
            numbers.append(number)
            kind = link.get("peer_type", "switch")
            if kind not in ("gpu", "switch"):
                raise bad(f"nvlinks peer_type must be gpu or switch, got {kind!r}")
            if link.get("peer") is not None:
                try:
                    peer = normalize_pci_bus_id(str(link["peer"]))
                except ValueError as exc:
                    raise bad(f"nvlinks peer: {exc}") from None
                peers.append(f"link {number}: {kind} {peer}")
                if kind == "gpu" and peer not in gpu_peers:
                    gpu_peers.append(peer)
        active = tuple(numbers)
    persistence = entry.get("persistence_mode")
    if persistence is not None and not isinstance(persistence, bool):
        raise bad(f"persistence_mode must be true or false, got {persistence!r}")
    clients = entry.get("other_clients") or []
    if not isinstance(clients, list) or not all(isinstance(c, str) for c in clients):
        raise bad(f"other_clients must be a list of names, got {clients!r}")
    return ResetState(
        mig_enabled=mig,
        persistence_mode=persistence,
        mig_devices=mig_uuids,
        active_nvlinks=active,
        nvlink_peers=tuple(peers),
        nvlink_gpu_peers=tuple(gpu_peers),
    )


def _clock_range(entry: Mapping[str, Any], key: str, bad: _Where) -> tuple[int, int] | None:
    value = entry.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in value)
        or value[0] > value[1]
    ):
        raise bad(f"{key} must be [min, max] MHz (positive integers, min <= max) or null, got {value!r}")
    return (value[0], value[1])


def _capped(usage: int | None, limit: int) -> int | None:
    # A GPU draws at most its limit: lowering the limit lowers what a demo's `gpu status` shows.
    return None if usage is None else min(usage, limit)


def _parse_processes(entries: Any, bad: _Where) -> tuple[GpuProcess, ...]:
    if not isinstance(entries, list):
        raise bad("processes must be a list")
    processes = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"pid", "used_memory_bytes", "name"}:
            raise bad(f"a process is a mapping of pid, used_memory_bytes, name; got {entry!r}")
        pid = _required_int(entry, "pid", bad)
        name = entry.get("name", "")
        if not isinstance(name, str):
            raise bad(f"process name must be a string, got {name!r}")
        processes.append(
            GpuProcess(pid=pid, used_memory_bytes=_optional_int(entry, "used_memory_bytes", bad), name=name)
        )
    return tuple(processes)


def _parse_mig_uuids(entries: Any, bad: _Where) -> tuple[str, ...]:
    if not isinstance(entries, list) or not all(isinstance(u, str) and u.startswith("MIG-") for u in entries):
        raise bad(f"mig_uuids must be a list of MIG-... strings, got {entries!r}")
    return tuple(entries)


def _parse_failures(entries: Any, bad: _Where) -> dict[str, _Failure]:
    if not isinstance(entries, dict):
        raise bad("fail must be a mapping of operation -> failure")
    failures = {}
    for operation, spec in entries.items():
        if operation not in OPERATIONS:
            raise bad(f"fail: unknown operation {operation!r} (expected one of {', '.join(OPERATIONS)})")
        if isinstance(spec, str):
            name, times = spec, None
        elif isinstance(spec, dict) and set(spec) <= {"error", "times"}:
            name, times = spec.get("error"), spec.get("times")
        else:
            raise bad(f"fail.{operation}: expected a failure name or {{error: NAME, times: N}}, got {spec!r}")
        if name not in FAILURES:
            raise bad(f"fail.{operation}: unknown failure {name!r} (expected one of {', '.join(FAILURES)})")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
            raise bad(f"fail.{operation}.times must be a positive integer, got {times!r}")
        failures[operation] = _Failure(code=FAILURES[name], times=times)
    return failures
