"""The simulated GPUs' state: one YAML or JSON file, read and written under a lock (remediate.gpu.simulator).

State is shared and survives restarts like the driver's: every call re-reads the
file, and every change is a read-modify-write under an exclusive `fcntl.flock`
on a sidecar lock file (`<file>.lock`), written atomically (temp file +
os.replace). So two backends on the same file, in one process or in many (server
workers, agent, CLI, a test's subprocess), see one set of GPUs. Comments in a
YAML file are lost on the first write. `remediate gpu simulate init FILE [--preset NAME]` writes a
commented example (example_text, PRESETS); docs/gpu.md, "The simulated GPU file", documents the format.

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
        health: {ecc_dbe_volatile: 0, pcie: {width: 8, max_width: 16}}   # optional: gpu.health (sim_health)
        fail:                     # optional injected failures, per operation (set_power_limit | read |
                                  #   reset_locked_clocks | lock_gpu_clocks | unlock_gpu_clocks | reset_gpu)
          set_power_limit: timeout                    # every time, or ...
          read: {error: gpu_lost, times: 1}           # ... the next `times` calls only (counted down in the file)

Failure names: gpu_lost, not_supported, no_permission, invalid_argument, not_found,
reset_required, driver_not_loaded, and the retryable timeout, in_use, unknown.
Reported power usage never exceeds the current limit, as on a real GPU.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid as uuid_module
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from remediate.errors import ConfigError
from remediate.gpu import errors, sim_health
from remediate.gpu.errors import GpuNotFound
from remediate.gpu.health import HealthReading
from remediate.gpu.model import ClockState, GpuInfo, GpuProcess, MemoryHealth, ResetState
from remediate.gpu.pci import normalize_pci_bus_id

_FAILURE_NAMES = "gpu_lost not_supported no_permission invalid_argument not_found timeout in_use unknown"
FAILURES: dict[str, int] = {
    name: getattr(errors, "NVML_ERROR_" + ("GPU_IS_LOST" if name == "gpu_lost" else name.upper()))
    for name in (*_FAILURE_NAMES.split(), "reset_required", "driver_not_loaded")
}
"""Injectable failure name -> the NVML code the simulator raises for it."""
OPERATIONS = ("set_power_limit", "read", "reset_locked_clocks", "lock_gpu_clocks", "unlock_gpu_clocks", "reset_gpu")

_KEYS = (
    "index uuid pci_bus_id name power_limit_mw default_limit_mw min_limit_mw max_limit_mw power_usage_mw "
    "temperature_c processes mig_uuids locked_gpu_clocks_mhz locked_memory_clocks_mhz graphics_clock_mhz "
    "memory_clock_mhz supported_graphics_clocks_mhz supported_memory_clocks_mhz retired_pages remapped_rows "
    "mig_enabled nvlinks reset_count persistence_mode other_clients lost fail health"
)
DEVICE_KEYS = frozenset(_KEYS.split())

# Bus numbers of the eight GPUs of an HGX H100 board, as nvidia-smi shows them.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
# An H100 SXM's graphics clocks as nvidia-smi -q -d SUPPORTED_CLOCKS lists them: 345..1980 MHz in 15 MHz steps.
_H100_GRAPHICS_CLOCKS = tuple(range(345, 1981, 15))
_EXAMPLE_NAMESPACE = uuid_module.UUID("6f1d2c1e-3a52-4a8e-9a57-1d0c3f6b2e10")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class Failure:
    code: int
    times: int | None
    """None: every call fails; N: the next N calls fail."""


@dataclass(frozen=True)
class SimDevice:
    """One GPU of the file as read now; `entry` is its mapping in the file, which a change edits."""

    info: GpuInfo
    entry: dict[str, Any]
    lost: bool
    fail: Mapping[str, Failure]
    locked_memory_clocks_mhz: tuple[int, int] | None
    clocks: ClockState
    health: MemoryHealth
    reset: ResetState
    reset_count: int
    reading: HealthReading
    """What gpu.health reads (the `health` section, remediate.gpu.sim_health)."""


@dataclass
class SimState:
    raw: dict[str, Any]
    as_root: bool
    devices: list[SimDevice]
    dirty: bool = False

    def find(self, uuid: str) -> SimDevice:
        found = [device for device in self.devices if device.info.uuid.lower() == uuid.lower()]
        if not found:
            known = ", ".join(d.info.uuid for d in self.devices) or "none"
            raise GpuNotFound(f"no GPU with UUID {uuid} on this (simulated) node; GPUs here: {known}")
        return found[0]

    def change(self, device: SimDevice, **values: Any) -> None:
        device.entry.update(values)
        self.dirty = True


def read_state(path: Path) -> SimState:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"simulated GPU file {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader (C or pure Python)
    except yaml.YAMLError as exc:
        raise ConfigError(f"simulated GPU file {path}: not valid YAML/JSON: {exc}") from exc
    return parse(raw, path)


@contextmanager
def transaction(path: Path) -> Iterator[SimState]:
    """Hold the file's lock, read it, and write it back if the block changed it (even if it then raised)."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"simulated GPU file {path}: cannot open lock file {lock_path}: {exc}") from exc
    try:
        # Locks belong to the open file description, so this excludes other threads as well as other processes.
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        state = read_state(path)
        try:
            yield state
        finally:
            if state.dirty:
                write_atomically(path, state.raw)
    finally:
        os.close(lock_fd)  # closing releases the flock


def write_atomically(path: Path, raw: Mapping[str, Any]) -> None:
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


@dataclass(frozen=True)
class GpuModel:
    """What an example file says about one kind of GPU (power in milliwatts, clocks in MHz)."""

    name: str
    default_limit_mw: int
    """Also the maximum: a board ships at its maximum limit."""
    min_limit_mw: int
    usage_mw: int
    """GPU 0's power draw; each further GPU draws `usage_step_mw` more."""
    usage_step_mw: int
    graphics_clocks_mhz: tuple[int, ...]
    memory_clock_mhz: int
    pcie_gen: int = 5


H100 = GpuModel("NVIDIA H100 80GB HBM3", 700_000, 200_000, 310_000, 17_000, _H100_GRAPHICS_CLOCKS, 2619)
# An A100 SXM4: 400 W default and max, 100 W min; graphics clocks 210..1410 MHz in 15 MHz steps.
A100 = GpuModel("NVIDIA A100-SXM4-80GB", 400_000, 100_000, 180_000, 12_000, tuple(range(210, 1411, 15)), 1593, 4)


@dataclass(frozen=True)
class Preset:
    """A node `remediate gpu simulate init --preset NAME` writes."""

    model: GpuModel
    count: int


PRESETS: dict[str, Preset] = {"h100x8": Preset(H100, 8), "a100x4": Preset(A100, 4)}
"""Preset name -> node; the first one is the default."""


def example(count: int, *, as_root: bool, model: GpuModel = H100) -> dict[str, Any]:
    """A file of `count` GPUs of `model` (H100: 700 W default and max, 200 W min); UUIDs derived from the index."""
    devices = [
        {
            "index": index,
            "uuid": f"GPU-{uuid_module.uuid5(_EXAMPLE_NAMESPACE, _uuid_seed(model, index))}",
            "pci_bus_id": f"00000000:{_HGX_BUSES[index] if index < len(_HGX_BUSES) else 0x40 + index:02X}:00.0",
            "name": model.name,
            "power_limit_mw": model.default_limit_mw,
            "default_limit_mw": model.default_limit_mw,
            "min_limit_mw": model.min_limit_mw,
            "max_limit_mw": model.default_limit_mw,
            "power_usage_mw": model.usage_mw + model.usage_step_mw * index,
            "temperature_c": 45 + 3 * index,
            "processes": [{"pid": 4200 + index, "used_memory_bytes": 60 * 1024**3, "name": "python"}],
            "mig_uuids": [],
            "graphics_clock_mhz": model.graphics_clocks_mhz[-1],
            "memory_clock_mhz": model.memory_clock_mhz,
            "supported_graphics_clocks_mhz": list(model.graphics_clocks_mhz),
            "supported_memory_clocks_mhz": [model.memory_clock_mhz],
            "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
            "mig_enabled": False,
            "persistence_mode": True,
            "health": sim_health.example(model.pcie_gen),
        }
        for index in range(count)
    ]
    return {"as_root": as_root, "devices": devices}


def _uuid_seed(model: GpuModel, index: int) -> str:
    # The H100 seed predates the presets: keep its UUIDs, which tests and demos already know.
    return f"gpu-{index}" if model is H100 else f"{model.name}-{index}"


# Why each key of an example file is there: the comment above it in the first device.
_FIELD_DOCS = {
    "index": "NVML's index of the GPU; required, unique",
    "uuid": "required, unique, GPU-...: what a dcgm-exporter alert's UUID label names",
    "pci_bus_id": "quoted (YAML would read 18:00.0 as a number); any NVML form; default derived from the index",
    "name": "the product name nvidia-smi shows; default Simulated GPU",
    "power_limit_mw": "the current power limit, in milliwatts (700000 = 700 W); default: default_limit_mw",
    "default_limit_mw": "required: the limit gpu.restore_power_limit and a reset come back to",
    "min_limit_mw": "required: the constraints; a limit outside [min, max] is INVALID_ARGUMENT",
    "max_limit_mw": "required",
    "power_usage_mw": "optional (null: the GPU cannot report it); never shown above the current limit",
    "temperature_c": "optional, degrees Celsius",
    "processes": "optional compute processes: gpu.reset refuses while one runs",
    "mig_uuids": "optional: this GPU's MIG devices (MIG-...); listed devices mean MIG is on, and block a reset",
    "graphics_clock_mhz": "optional current clocks, in MHz (a graphics clock lock caps what is reported)",
    "memory_clock_mhz": "optional",
    "supported_graphics_clocks_mhz": "optional: absent, a clock lock is NOT_SUPPORTED; a lock outside it is "
    "INVALID_ARGUMENT",
    "supported_memory_clocks_mhz": "optional",
    "remapped_rows": "optional (absent: not supported): row remapping counts and flags, shown in gpu.reset's plan",
    "mig_enabled": "optional: absent = no MIG on this GPU",
    "persistence_mode": "optional (absent: not supported); a reset turns it off and on around itself",
    "health": "optional: what gpu.health reads beyond the keys above (docs/gpu.md; e.g. pcie width 8 = downtrained)",
}

_OPTIONAL_EXAMPLES = """# Optional keys this file does not set (uncomment under a device to try them):
# locked_gpu_clocks_mhz: [1410, 1410]    # a graphics clock lock (nvidia-smi -lgc); null: not locked
# locked_memory_clocks_mhz: [2619, 2619] # (nvidia-smi -lmc)
# retired_pages: {single_bit: 0, double_bit: 1, pending: true}   # page retirement (GPUs before Ampere)
# nvlinks:                               # active NVLinks; a link to another GPU (peer_type gpu) blocks a reset
#   - {link: 0, peer: "00000000:05:00.0", peer_type: switch}
# other_clients: [nv-hostengine]         # holders NVML does not list (DCGM, Fabric Manager): a reset is refused
# reset_count: 0                         # bumped by every reset
# lost: true                             # every call on this GPU raises GpuLost
# fail:                                  # injected failures per operation: set_power_limit, read,
#                                        #   reset_locked_clocks, lock_gpu_clocks, unlock_gpu_clocks, reset_gpu
#   set_power_limit: timeout             # every call, or ...
#   read: {error: gpu_lost, times: 1}    # ... the next `times` calls only (counted down in the file)
# Failure names: gpu_lost, not_supported, no_permission, invalid_argument, not_found, reset_required,
# driver_not_loaded, and the retryable timeout, in_use, unknown.
"""


def example_text(preset: str, *, as_root: bool = True) -> str:
    """The YAML of preset `preset` (a key of PRESETS), with a comment explaining each field (docs/gpu.md)."""
    node = PRESETS[preset]
    raw = example(node.count, as_root=as_root, model=node.model)
    lines = [
        f"# Simulated GPUs ({preset}: {node.count} x {node.model.name}), written by `remediate gpu simulate init`.",
        "# Use: remediate gpu status --gpu-backend simulated --gpu-simulator-file THIS_FILE",
        '# Format: docs/gpu.md, "The simulated GPU file". Power is in milliwatts, clocks in MHz.',
        "# The backend rewrites this file on every change (a power limit set, a reset): comments are then lost.",
        "",
        "# false: every change (power limit, clocks, reset) raises GpuNoPermission (NVML code 4); reads still work",
        f"as_root: {json.dumps(raw['as_root'])}",
        "devices:",
    ]
    for position, device in enumerate(raw["devices"]):
        for number, (key, value) in enumerate(device.items()):
            indent = "  - " if number == 0 else "    "
            if position == 0:
                lines.append(f"{'  ' if number == 0 else '    '}# {key}: {_FIELD_DOCS[key]}")
            # JSON is YAML's flow style: quoted strings, one line per key.
            lines.append(f"{indent}{key}: {json.dumps(value)}")
        if position == 0:
            lines.extend("    " + line for line in _OPTIONAL_EXAMPLES.splitlines())
    return "\n".join(lines) + "\n"


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


def parse(raw: Any, path: Path) -> SimState:
    bad = _Where(path, "top level")
    if not isinstance(raw, dict):
        raise bad("expected a mapping with `devices`")
    unknown = set(raw) - {"as_root", "devices"}
    if unknown:
        raise bad(f"unknown keys {sorted(unknown)} (expected as_root, devices)")
    as_root = _flag(raw, "as_root", bad.at("as_root"), default=True, message="expected true or false")
    entries = raw.get("devices")
    if not isinstance(entries, list):
        raise bad.at("devices")("expected a list of devices")
    devices = [_parse_device(entry, bad.at(f"devices[{position}]")) for position, entry in enumerate(entries)]
    for attribute in ("index", "uuid", "pci_bus_id"):
        seen: set[object] = set()
        for device in devices:
            value = getattr(device.info, attribute)
            key = value.lower() if isinstance(value, str) else value
            if key in seen:
                raise bad.at("devices")(f"two devices have {attribute} {value}")
            seen.add(key)
    return SimState(raw=raw, as_root=bool(as_root), devices=devices)


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


def _flag(section: Mapping[str, Any], key: str, bad: _Where, *, default: Any = False, message: str = "") -> Any:
    value = section.get(key, default)
    if value is not None and not isinstance(value, bool):
        raise bad(message or f"{key} must be true or false, got {value!r}")
    return value


def _strings(entry: Mapping[str, Any], key: str, bad: _Where, prefix: str, what: str) -> tuple[str, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith(prefix) for v in value):
        raise bad(f"{key} must be a list of {what}, got {value!r}")
    return tuple(value)


def _parse_device(entry: Any, bad: _Where) -> SimDevice:
    if not isinstance(entry, dict):
        raise bad("expected a mapping")
    unknown = set(entry) - DEVICE_KEYS
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
    name = entry.get("name", "Simulated GPU")
    if not isinstance(name, str):
        raise bad("name must be a string")
    default_limit, min_limit, max_limit = (
        _required_int(entry, f"{k}_limit_mw", bad) for k in ("default", "min", "max")
    )
    limit = _optional_int(entry, "power_limit_mw", bad)
    limit = default_limit if limit is None else limit
    if not min_limit <= default_limit <= max_limit:
        raise bad(
            f"need min_limit_mw <= default_limit_mw <= max_limit_mw, got {min_limit}, {default_limit}, {max_limit}"
        )
    if not min_limit <= limit <= max_limit:
        raise bad(f"power_limit_mw {limit} is outside [{min_limit}, {max_limit}]")
    usage = _optional_int(entry, "power_usage_mw", bad)
    info = GpuInfo(
        index=index,
        uuid=uuid,
        pci_bus_id=_pci(raw_pci, bad, "pci_bus_id"),
        name=name,
        power_limit_mw=limit,
        default_limit_mw=default_limit,
        min_limit_mw=min_limit,
        max_limit_mw=max_limit,
        enforced_limit_mw=limit,  # no other limit (thermal, board) applies in the simulation
        # A GPU draws at most its limit: lowering the limit lowers what a demo's `gpu status` shows.
        power_usage_mw=None if usage is None else min(usage, limit),
        temperature_c=_optional_int(entry, "temperature_c", bad),
        processes=_parse_processes(entry.get("processes") or [], bad),
        mig_uuids=_strings(entry, "mig_uuids", bad, "MIG-", "MIG-... strings"),
    )
    return SimDevice(
        info=info,
        entry=entry,
        lost=_flag(entry, "lost", bad),
        fail=_parse_failures(entry.get("fail") or {}, bad),
        locked_memory_clocks_mhz=_clock_range(entry, "locked_memory_clocks_mhz", bad),
        clocks=_parse_clocks(entry, bad),
        health=(
            memory := MemoryHealth(
                **_section(entry, "retired_pages", ("single_bit", "double_bit"), ("pending",), bad),
                **_section(entry, "remapped_rows", ("correctable", "uncorrectable"), ("pending", "failure"), bad),
            )
        ),
        reset=_parse_reset_state(entry, info.mig_uuids, bad),
        reset_count=_optional_int(entry, "reset_count", bad) or 0,
        reading=sim_health.parse(entry.get("health"), memory, bad),
    )


def _pci(text: str, bad: _Where, key: str) -> str:
    try:
        return normalize_pci_bus_id(text)
    except ValueError as exc:
        raise bad(f"{key}: {exc}") from None


def _clock_list(entry: Mapping[str, Any], key: str, bad: _Where) -> tuple[int, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in value):
        raise bad(f"{key} must be a list of positive integers (MHz), got {value!r}")
    return tuple(sorted(set(value)))


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


def _section(entry: Mapping[str, Any], key: str, counts: tuple[str, ...], flags: tuple[str, ...], bad: _Where) -> Any:
    """A mapping of counts and flags (retired_pages, remapped_rows) as MemoryHealth's fields; {} when absent."""
    section = entry.get(key)
    if section is None:
        return {}
    if not isinstance(section, dict) or set(section) - {*counts, *flags}:
        raise bad(f"{key} must be a mapping of {', '.join((*counts, *flags))}; got {section!r}")
    where = bad.at(key)
    return {f"{key}_{c}": _optional_int(section, c, where) or 0 for c in counts} | {
        f"{key}_{f}": _flag(section, f, where) for f in flags
    }


def _parse_reset_state(entry: Mapping[str, Any], mig_uuids: tuple[str, ...], bad: _Where) -> ResetState:
    mig = _flag(entry, "mig_enabled", bad, default=None)
    mig = True if mig_uuids else mig  # MIG devices exist only in MIG mode: listing them is enough
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
            numbers.append(number := _required_int(link, "link", bad))
            kind = link.get("peer_type", "switch")
            if kind not in ("gpu", "switch"):
                raise bad(f"nvlinks peer_type must be gpu or switch, got {kind!r}")
            if link.get("peer") is not None:
                peer = _pci(str(link["peer"]), bad, "nvlinks peer")
                peers.append(f"link {number}: {kind} {peer}")
                if kind == "gpu" and peer not in gpu_peers:
                    gpu_peers.append(peer)
        active = tuple(numbers)
    _strings(entry, "other_clients", bad, "", "names")
    return ResetState(
        mig_enabled=mig,
        persistence_mode=_flag(entry, "persistence_mode", bad, default=None),
        mig_devices=mig_uuids,
        active_nvlinks=active,
        nvlink_peers=tuple(peers),
        nvlink_gpu_peers=tuple(gpu_peers),
    )


def _parse_processes(entries: Any, bad: _Where) -> tuple[GpuProcess, ...]:
    if not isinstance(entries, list):
        raise bad("processes must be a list")
    processes = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"pid", "used_memory_bytes", "name"}:
            raise bad(f"a process is a mapping of pid, used_memory_bytes, name; got {entry!r}")
        name = entry.get("name", "")
        if not isinstance(name, str):
            raise bad(f"process name must be a string, got {name!r}")
        memory = _optional_int(entry, "used_memory_bytes", bad)
        processes.append(GpuProcess(pid=_required_int(entry, "pid", bad), used_memory_bytes=memory, name=name))
    return tuple(processes)


def _parse_failures(entries: Any, bad: _Where) -> dict[str, Failure]:
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
        failures[operation] = Failure(code=FAILURES[name], times=times)
    return failures
