"""The real GPU backend: NVML through nvidia-ml-py (module `pynvml`).

Built by `open_backend("nvml")`; used by the gpu actions, `remediate gpu status`
and the node agent. pynvml is imported and NVML initialised on first use, not at
import time, so the CLI starts fast and a server without GPUs (which sends GPU
steps to node agents) never touches the driver. Initialisation happens once per
process, under a lock; a forked child (gunicorn workers) initialises again,
because NVML's state does not survive fork. NVML is never shut down: the
process keeps it for its lifetime, as nvidia-smi-like daemons do.

Every NVML failure leaves as a GpuError subclass (see remediate.gpu.errors) with
NVML's code. Reads that some GPUs do not support (power usage, temperature,
processes, MIG) become None / empty instead of failing the whole device; the
power-limit reads are required, since without them no power action can work.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from remediate.gpu import nvml_health
from remediate.gpu.errors import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_GPU_NOT_FOUND,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    GpuError,
    GpuInvalidArgument,
    GpuNotFound,
    GpuNotSupported,
    GpuResetRefused,
    NvmlUnavailable,
    error_for_code,
    from_nvml_error,
)
from remediate.gpu.health import GpuHealth
from remediate.gpu.model import ClockState, GpuInfo, GpuProcess, MemoryHealth, ResetState
from remediate.gpu.nvml_calls import mismatch_error, optional, text
from remediate.gpu.nvml_events import NvmlEventWatch
from remediate.gpu.pci import normalize_pci_bus_id

log = logging.getLogger(__name__)

# Codes nvmlDeviceGetHandleByUUID returns for a UUID that names no device here.
_NO_SUCH_DEVICE_CODES = frozenset({NVML_ERROR_NOT_FOUND, NVML_ERROR_GPU_NOT_FOUND, NVML_ERROR_INVALID_ARGUMENT})

RESET_TIMEOUT_SECONDS = 120.0
"""How long `nvidia-smi --gpu-reset` may take (a reset with NVLink retraining takes tens of seconds).
With the two persistence-mode calls around it (PERSISTENCE_TIMEOUT_SECONDS each) a reset stays within
the default step timeout of 300 s."""
PERSISTENCE_TIMEOUT_SECONDS = 30.0
# nvidia-smi's exit codes are NVML's return codes (nvidia-smi(1), RETURN VALUE); 255 is "other error".
_SMI_OTHER_ERROR = 255

_init_lock = threading.Lock()
_initialised_pid: int | None = None


def _reset_after_fork() -> None:
    # A fork while another thread held the lock would leave the child's copy locked forever.
    global _init_lock, _initialised_pid
    _init_lock = threading.Lock()
    _initialised_pid = None


os.register_at_fork(after_in_child=_reset_after_fork)


def load_nvml() -> ModuleType:
    """Import pynvml and run nvmlInit once per process; NvmlUnavailable when there is no usable NVML."""
    global _initialised_pid
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            "the nvidia-ml-py package (module pynvml) is not installed; "
            "install remediate with its dependencies, or select the simulated GPU backend explicitly"
        ) from exc
    # Fast path without the lock; the pid check makes a forked child initialise its own NVML.
    if _initialised_pid == os.getpid():
        return pynvml
    with _init_lock:
        if _initialised_pid != os.getpid():
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise from_nvml_error(exc, doing="initialise NVML") from exc
            _initialised_pid = os.getpid()
    return pynvml


@contextmanager
def _mapped(nvml: ModuleType, doing: str) -> Iterator[None]:
    """Turn pynvml's exceptions raised inside the block into GpuErrors."""
    try:
        yield
    except nvml.NVMLError as exc:
        raise from_nvml_error(exc, doing=doing) from exc
    except mismatch_error(nvml) as exc:
        # pynvml raises this (not an NVMLError) when an unversioned function is missing from the driver.
        raise GpuNotSupported(f"{doing} failed: {exc}", code=NVML_ERROR_FUNCTION_NOT_FOUND) from exc


def _pci(raw: str | bytes) -> str:
    bus = text(raw)
    try:
        return normalize_pci_bus_id(bus)
    except ValueError:
        # Never fail a whole read over formatting; show what NVML said.
        log.warning("NVML returned an unexpected PCI bus id %r", bus)
        return bus.upper()


def _smi(smi: str, arguments: list[str], *, doing: str, timeout: float) -> None:
    """Run nvidia-smi with fixed arguments (the bus id read from NVML, never a label), no shell, a timeout."""
    try:
        done = subprocess.run([smi, *arguments], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise error_for_code(NVML_ERROR_GPU_IS_LOST, doing=doing, detail=f"no answer in {timeout:g} s") from exc
    if done.returncode == 0:
        return
    said = " ".join((done.stdout + " " + done.stderr).split())[:500]
    if "in use by another" in said.lower() or "currently in use" in said.lower():
        raise GpuResetRefused(
            f"{doing} failed: the driver says the GPU is in use by another client ({said}); "
            "stop what holds it (DCGM's nv-hostengine, dcgm-exporter, Fabric Manager, a monitoring nvidia-smi) "
            "or reboot the node",
            code=done.returncode,
        )
    code = None if done.returncode == _SMI_OTHER_ERROR else done.returncode
    raise error_for_code(code, doing=doing, detail=said or f"exit code {done.returncode}")


class NvmlBackend:
    """GpuBackend on the real driver. Stateless: every call reads NVML now."""

    name = "nvml"

    def devices(self) -> list[GpuInfo]:
        nvml = load_nvml()
        with _mapped(nvml, "count GPUs"):
            count = nvml.nvmlDeviceGetCount()
        infos = []
        for index in range(count):
            with _mapped(nvml, f"open GPU {index}"):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            infos.append(_read_info(nvml, handle, index))
        return infos

    def device(self, uuid: str) -> GpuInfo:
        nvml, handle = _open(uuid)
        with _mapped(nvml, f"read the index of {uuid}"):
            index = nvml.nvmlDeviceGetIndex(handle)
        return _read_info(nvml, handle, index)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        # ctypes' c_uint would silently wrap a negative number and reject a float with a TypeError.
        if isinstance(milliwatts, bool) or not isinstance(milliwatts, int) or milliwatts < 0:
            raise GpuInvalidArgument(f"power limit must be a non-negative integer of milliwatts, got {milliwatts!r}")
        nvml, handle = _open(uuid)
        # The unversioned call: nvmlDeviceSetPowerManagementLimit_v2 in nvidia-ml-py 13.615.71 ignores NVML's
        # return code, so a refused set would look like success.
        with _mapped(nvml, f"set the power limit of {uuid} to {milliwatts} mW"):
            nvml.nvmlDeviceSetPowerManagementLimit(handle, milliwatts)

    def reset_locked_clocks(self, uuid: str) -> None:
        """The optional capability (see remediate.gpu.backend): undo locked GPU and memory clocks, what
        `nvidia-smi -rgc` and `-rmc` do; the driver picks clocks by itself again. A GPU that cannot lock its
        memory clocks (before Ampere) answers NOT_SUPPORTED for that half: nothing is locked there."""
        nvml, handle = _open(uuid)
        with _mapped(nvml, f"reset the locked GPU clocks of {uuid}"):
            nvml.nvmlDeviceResetGpuLockedClocks(handle)
        optional(nvml, f"reset the locked memory clocks of {uuid}", nvml.nvmlDeviceResetMemoryLockedClocks, handle)

    def clocks(self, uuid: str) -> ClockState:
        """The optional capability: current and maximum clocks (nvmlDeviceGetClockInfo / GetMaxClockInfo)
        and the supported graphics clocks over every supported memory clock. NVML has no read of a
        clock lock (nvmlDeviceSetGpuLockedClocks has no getter), so the lock is reported as unknown."""
        nvml, handle = _open(uuid)
        clock = nvml.nvmlDeviceGetClockInfo
        top = nvml.nvmlDeviceGetMaxClockInfo
        graphics = optional(nvml, f"read the graphics clock of {uuid}", clock, handle, nvml.NVML_CLOCK_GRAPHICS)
        memory = optional(nvml, f"read the memory clock of {uuid}", clock, handle, nvml.NVML_CLOCK_MEM)
        max_graphics = optional(nvml, f"read the max graphics clock of {uuid}", top, handle, nvml.NVML_CLOCK_GRAPHICS)
        max_memory = optional(nvml, f"read the max memory clock of {uuid}", top, handle, nvml.NVML_CLOCK_MEM)
        memory_clocks = optional(
            nvml, f"list the memory clocks of {uuid}", nvml.nvmlDeviceGetSupportedMemoryClocks, handle
        )
        graphics_clocks: set[int] = set()
        for mhz in memory_clocks or ():
            listed = optional(
                nvml, f"list the graphics clocks of {uuid}", nvml.nvmlDeviceGetSupportedGraphicsClocks, handle, mhz
            )
            graphics_clocks.update(int(v) for v in listed or ())
        return ClockState(
            graphics_mhz=None if graphics is None else int(graphics),
            memory_mhz=None if memory is None else int(memory),
            max_graphics_mhz=None if max_graphics is None else int(max_graphics),
            max_memory_mhz=None if max_memory is None else int(max_memory),
            supported_graphics_mhz=tuple(sorted(graphics_clocks)),
            supported_memory_mhz=tuple(sorted(int(v) for v in memory_clocks or ())),
            locked_graphics_mhz=None,
            lock_known=False,
        )

    def lock_gpu_clocks(self, uuid: str, min_mhz: int, max_mhz: int) -> None:
        """The optional capability: nvmlDeviceSetGpuLockedClocks, what `nvidia-smi -lgc MIN,MAX` does
        (Volta and later; needs root)."""
        for value in (min_mhz, max_mhz):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise GpuInvalidArgument(f"clocks must be positive integers of MHz, got {min_mhz!r}, {max_mhz!r}")
        nvml, handle = _open(uuid)
        with _mapped(nvml, f"lock the GPU clocks of {uuid} to {min_mhz}..{max_mhz} MHz"):
            nvml.nvmlDeviceSetGpuLockedClocks(handle, min_mhz, max_mhz)

    def unlock_gpu_clocks(self, uuid: str) -> None:
        """The optional capability: nvmlDeviceResetGpuLockedClocks (`nvidia-smi -rgc`); memory clocks stay."""
        nvml, handle = _open(uuid)
        with _mapped(nvml, f"reset the locked GPU clocks of {uuid}"):
            nvml.nvmlDeviceResetGpuLockedClocks(handle)

    def memory_health(self, uuid: str) -> MemoryHealth:
        """The optional capability: retired pages (before Ampere) and remapped rows (Ampere and later);
        each None where NVML answers NOT_SUPPORTED."""
        nvml, handle = _open(uuid)
        pages, doing = nvml.nvmlDeviceGetRetiredPages, f"read the retired pages of {uuid}"
        single = optional(nvml, doing, pages, handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        double = optional(nvml, doing, pages, handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = optional(
            nvml, f"read the pending page retirements of {uuid}", nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle
        )
        rows = optional(nvml, f"read the remapped rows of {uuid}", nvml.nvmlDeviceGetRemappedRows, handle)
        return MemoryHealth(
            retired_pages_single_bit=None if single is None else len(single),
            retired_pages_double_bit=None if double is None else len(double),
            retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapped_rows_failure=None if rows is None else bool(rows[3]),
        )

    def reset_state(self, uuid: str) -> ResetState:
        """The optional capability: MIG mode and devices (nvmlDeviceGetMigMode) and the active NVLinks
        (nvmlDeviceGetNvLinkState per link, with nvmlDeviceGetNvLinkRemotePciInfo / RemoteDeviceType)."""
        nvml, handle = _open(uuid)
        mode = optional(nvml, f"read the MIG mode of {uuid}", nvml.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        active, peers, gpu_peers = _nvlinks(nvml, handle, uuid)
        persistence = optional(nvml, f"read the persistence mode of {uuid}", nvml.nvmlDeviceGetPersistenceMode, handle)
        return ResetState(
            mig_enabled=mig_enabled,
            persistence_mode=None if persistence is None else persistence == nvml.NVML_FEATURE_ENABLED,
            mig_devices=_mig_uuids(nvml, handle, uuid),
            active_nvlinks=active,
            nvlink_peers=peers,
            nvlink_gpu_peers=gpu_peers,
        )

    def reset_gpu(self, uuid: str) -> None:
        """The optional capability: reset one GPU with `nvidia-smi --gpu-reset -i PCI_BUS_ID`.

        NVML's nvmlDeviceResetGpu is not in the public API (pynvml has no binding), and a sysfs PCI
        function reset would bypass the driver, which then neither checks for processes nor re-initialises
        its state. nvidia-smi asks the driver itself: it refuses a GPU in use, needs root, and on
        NVSwitch systems lets the fabric manager retrain the links. Run without a shell, by absolute
        path, with a timeout; its exit code is an NVML return code, mapped like every NVML error.

        Persistence mode counts as a client of the GPU (nvidia-persistenced holds it) and the driver
        refuses the reset "In use by another client" while it is on: it is turned off for the reset and
        on again afterwards, whether the reset worked or not. Other clients NVML does not list as compute
        processes (DCGM's nv-hostengine, dcgm-exporter, Fabric Manager) make the reset fail with
        GpuResetRefused saying so.
        """
        bus = self.device(uuid).pci_bus_id
        smi = shutil.which("nvidia-smi")
        if smi is None:
            raise GpuNotSupported(
                f"reset GPU {uuid} failed: nvidia-smi is not on this node's PATH; a GPU reset goes through it "
                "(the NVIDIA driver's utilities must be installed or mounted into the agent's container)"
            )
        nvml, handle = _open(uuid)
        persistence = optional(nvml, f"read the persistence mode of {uuid}", nvml.nvmlDeviceGetPersistenceMode, handle)
        persistent = persistence == nvml.NVML_FEATURE_ENABLED
        if persistent:
            doing = f"turn off persistence mode of {uuid} ({bus}) for its reset"
            _smi(smi, ["-pm", "0", "-i", bus], doing=doing, timeout=PERSISTENCE_TIMEOUT_SECONDS)
        try:
            doing = f"reset GPU {uuid} ({bus}) with nvidia-smi --gpu-reset"
            _smi(smi, ["--gpu-reset", "-i", bus], doing=doing, timeout=RESET_TIMEOUT_SECONDS)
        finally:
            if persistent:
                try:
                    doing = f"turn persistence mode of {uuid} ({bus}) back on"
                    _smi(smi, ["-pm", "1", "-i", bus], doing=doing, timeout=PERSISTENCE_TIMEOUT_SECONDS)
                except GpuError as exc:
                    # The reset's own outcome matters more; the node works without persistence mode, only slower.
                    log.warning("after the reset of %s: %s", uuid, exc)

    def parent_of_mig(self, mig_uuid: str) -> str:
        nvml, mig = _open(mig_uuid)
        try:
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        except nvml.NVMLError as exc:
            if exc.value in (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_FOUND):
                # NVML found a device by that UUID, but it is not a MIG device.
                raise GpuNotFound(f"{mig_uuid} is not a MIG device on this node", code=exc.value) from exc
            raise from_nvml_error(exc, doing=f"find the GPU of MIG device {mig_uuid}") from exc
        with _mapped(nvml, f"read the UUID of the GPU of MIG device {mig_uuid}"):
            return text(nvml.nvmlDeviceGetUUID(parent))

    def health_scan(self) -> list[GpuHealth]:
        """The optional capability (gpu.health): every GPU's health reads, getters only; a lost GPU is
        reported as lost, not raised (remediate.gpu.nvml_health)."""
        return nvml_health.scan(load_nvml())

    def open_events(self) -> NvmlEventWatch:
        """The optional capability (remediate.gpu.events): XID critical error and double-bit ECC events of
        every GPU, from one NVML event set; read-only."""
        return NvmlEventWatch(load_nvml())


def _open(uuid: str) -> tuple[ModuleType, Any]:
    """NVML, loaded, and the handle of the device with this UUID (a GPU or a MIG device)."""
    nvml = load_nvml()
    try:
        return nvml, nvml.nvmlDeviceGetHandleByUUID(uuid)
    except nvml.NVMLError as exc:
        if exc.value in _NO_SUCH_DEVICE_CODES:
            # NVML: INVALID_ARGUMENT for a malformed UUID, NOT_FOUND for an unknown one; both mean "no such GPU".
            raise GpuNotFound(
                f"look up {uuid} failed: NVML error {exc.value} ({exc}); {GpuNotFound.advice}", code=exc.value
            ) from exc
        raise from_nvml_error(exc, doing=f"look up {uuid}") from exc


# --- the reads of one device handle


def _read_info(nvml: ModuleType, handle: Any, index: int) -> GpuInfo:
    with _mapped(nvml, f"read GPU {index}"):
        uuid = text(nvml.nvmlDeviceGetUUID(handle))
        pci_bus_id = _pci(nvml.nvmlDeviceGetPciInfo(handle).busId)
        name = text(nvml.nvmlDeviceGetName(handle))
    with _mapped(nvml, f"read the power limits of GPU {index} ({uuid})"):
        limit = nvml.nvmlDeviceGetPowerManagementLimit(handle)
        min_limit, max_limit = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        default_limit = nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
        enforced = nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
    usage = optional(nvml, f"read the power usage of {uuid}", nvml.nvmlDeviceGetPowerUsage, handle)
    temperature = optional(
        nvml, f"read the temperature of {uuid}", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
    )
    return GpuInfo(
        index=int(index),
        uuid=uuid,
        pci_bus_id=pci_bus_id,
        name=name,
        power_limit_mw=int(limit),
        default_limit_mw=int(default_limit),
        min_limit_mw=int(min_limit),
        max_limit_mw=int(max_limit),
        enforced_limit_mw=int(enforced),
        power_usage_mw=None if usage is None else int(usage),
        temperature_c=None if temperature is None else int(temperature),
        processes=_processes(nvml, handle, uuid),
        mig_uuids=_mig_uuids(nvml, handle, uuid),
    )


def _processes(nvml: ModuleType, handle: Any, uuid: str) -> tuple[GpuProcess, ...]:
    raw = optional(nvml, f"list the processes on {uuid}", nvml.nvmlDeviceGetComputeRunningProcesses, handle)
    processes = []
    for entry in raw or ():
        memory = getattr(entry, "usedGpuMemory", None)
        # pynvml maps NVML_VALUE_NOT_AVAILABLE to None already; older releases passed the raw sentinel through.
        if memory is not None and memory >= nvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
            memory = None
        processes.append(GpuProcess(pid=int(entry.pid), used_memory_bytes=memory, name=_process_name(nvml, entry.pid)))
    return tuple(processes)


def _process_name(nvml: ModuleType, pid: int) -> str:
    try:
        return text(nvml.nvmlSystemGetProcessName(pid))
    except nvml.NVMLError:
        # The process may have exited, or live in a PID namespace we cannot see: a name is nice-to-have.
        return ""


def _mig_uuids(nvml: ModuleType, handle: Any, uuid: str) -> tuple[str, ...]:
    mode = optional(nvml, f"read the MIG mode of {uuid}", nvml.nvmlDeviceGetMigMode, handle)
    if mode is None or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    uuids = []
    with _mapped(nvml, f"count the MIG devices of {uuid}"):
        slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if exc.value == NVML_ERROR_NOT_FOUND:
                continue  # an empty slot: fewer MIG devices than the maximum
            raise from_nvml_error(exc, doing=f"open MIG device {slot} of {uuid}") from exc
        with _mapped(nvml, f"read the UUID of MIG device {slot} of {uuid}"):
            uuids.append(text(nvml.nvmlDeviceGetUUID(mig)))
    return tuple(uuids)


def _nvlinks(
    nvml: ModuleType, handle: Any, uuid: str
) -> tuple[tuple[int, ...] | None, tuple[str, ...], tuple[str, ...]]:
    """(the active links or None without NVLink, each active link's far end, the GPUs linked directly)."""
    active = nvml_health.active_nvlinks(nvml, handle, uuid)
    peers: list[str] = []
    gpu_peers: list[str] = []
    for link in active or ():
        doing = f"read the far end of NVLink {link} of {uuid}"
        remote = optional(nvml, doing, nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        kind = optional(nvml, doing, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        kind_name = {nvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu", nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch"}.get(
            kind, "unknown"
        )
        if remote is not None:
            peer = _pci(remote.busId)
            peers.append(f"link {link}: {kind_name} {peer}")
            if kind_name == "gpu" and peer not in gpu_peers:
                gpu_peers.append(peer)
    return None if active is None else tuple(active), tuple(peers), tuple(gpu_peers)
