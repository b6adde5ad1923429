"""The NVML backend: the no-GPU path for real, and its reading logic against a stand-in driver.

This machine has no NVIDIA driver, so `nvmlInit` really fails here and the first
tests check what a node without NVML reports. The rest replace pynvml's C-call
wrappers (its functions, not its exception classes or constants) with a small
in-memory driver, to check the mapping the backend does on top of them: bytes
vs str, optional reads, MIG enumeration, init once per process, and that the
set goes through the unversioned call. test_nvml_real.py checks the same
against a real GPU.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from remediate.gpu import (
    GpuBackend,
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotFound,
    GpuNotSupported,
    GpuProcess,
    GpuResetRefused,
    NvmlBackend,
    NvmlUnavailable,
    select,
)
from remediate.gpu import nvml as nvml_module
from tests.support.waiting import scaled

REPO = Path(__file__).resolve().parents[3]
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-66666666-7777-8888-9999-000000000000"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


no_driver = pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is installed here; see test_nvml_real.py")


@pytest.fixture(autouse=True)
def fresh_nvml_state(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test starts as a process that has not initialised NVML yet.
    monkeypatch.setattr(nvml_module, "_initialised_pid", None)


# --- the real no-GPU path


@no_driver
def test_listing_gpus_without_a_driver_says_nvml_is_missing_and_how_to_use_the_simulator() -> None:
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlBackend().devices()
    message = str(caught.value)
    assert caught.value.code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert "NVML Shared Library Not Found" in message
    assert "libnvidia-ml.so.1" in message
    assert "simulated GPU backend explicitly" in message
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_LibraryNotFound)


@no_driver
def test_every_call_without_a_driver_fails_the_same_way_and_the_failure_is_not_cached() -> None:
    backend = NvmlBackend()
    for call in (
        backend.devices,
        lambda: backend.device(UUID0),
        lambda: backend.set_power_limit(UUID0, 300_000),
        lambda: backend.parent_of_mig(MIG),
        backend.devices,  # again: still "library not found", not "uninitialized"
    ):
        with pytest.raises(NvmlUnavailable) as caught:
            call()
        assert caught.value.code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND


@no_driver
def test_resolving_a_gpu_label_without_a_driver_is_a_clear_error() -> None:
    with pytest.raises(NvmlUnavailable, match="driver"):
        select("3", NvmlBackend())


@pytest.mark.parametrize("milliwatts", [-1, 1.5, True, "300000", None])
def test_a_bad_limit_is_refused_before_nvml_is_touched(milliwatts: object) -> None:
    with pytest.raises(GpuInvalidArgument):
        NvmlBackend().set_power_limit(UUID0, milliwatts)  # type: ignore[arg-type]
    assert nvml_module._initialised_pid is None


def test_importing_the_package_does_not_import_pynvml() -> None:
    script = "import sys, remediate.gpu, remediate.gpu.nvml; sys.exit('pynvml' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=scaled(60)).returncode == 0


# --- a stand-in driver


@dataclass(frozen=True)
class Handle:
    uuid: str


@dataclass
class FakeGpu:
    uuid: str
    bus_id: Any
    limit: int = 400_000
    usage: int | None = 123_456
    temperature: int | None = 61
    processes: list[Any] = field(default_factory=list)
    mig: list[str | None] | None = None  # None: MIG not supported; a list: slots (None = empty slot)
    limits_supported: bool = True
    lost: bool = False
    locked_gpu: tuple[int, int] | None = None
    locked_memory: tuple[int, int] | None = None
    memory_lock_supported: bool = True
    graphics_clocks: tuple[int, ...] = (210, 1410, 1980)  # empty: the GPU cannot lock clocks
    retired: dict[int, list[int]] | None = None  # cause -> page addresses; None: no page retirement
    retired_pending: bool = False
    remapped: tuple[int, int, int, int] | None = None  # None: no row remapping
    nvlinks: dict[int, tuple[str, int]] | None = None  # active link -> (remote bus id, remote type)
    nvlink_count: int = 4
    persistence: int | None = None  # NVML_FEATURE_ENABLED/DISABLED; None: not supported


class FakeDriver:
    """pynvml's device functions over FakeGpus; raises pynvml's real NVMLError subclasses."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.init_calls = 0
        self.set_calls: list[tuple[str, int]] = []
        self.root = True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))

    def _gpu(self, handle: Handle) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid == handle.uuid:
                if gpu.lost:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
                return gpu
        raise AssertionError(f"unknown handle {handle}")

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        return Handle(self.gpus[index].uuid)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        if not uuid.startswith(("GPU-", "MIG-")):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        known = {g.uuid for g in self.gpus} | {m for g in self.gpus for m in (g.mig or []) if m}
        if uuid not in known:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(uuid)

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:
        return [g.uuid for g in self.gpus].index(handle.uuid)

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return handle.uuid if handle.uuid.startswith("MIG-") else self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        return SimpleNamespace(busId=self._gpu(handle).bus_id)

    def nvmlDeviceGetName(self, handle: Handle) -> bytes:
        self._gpu(handle)
        return b"NVIDIA H200"  # older pynvml releases hand back bytes

    def _limits(self, handle: Handle) -> FakeGpu:
        gpu = self._gpu(handle)
        if not gpu.limits_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        return self._limits(handle).limit

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Handle) -> list[int]:
        self._limits(handle)
        return [200_000, 700_000]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Handle) -> int:
        self._limits(handle)
        return 700_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        return self._limits(handle).limit

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        usage = self._gpu(handle).usage
        if usage is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return usage

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        temperature = self._gpu(handle).temperature
        if temperature is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return temperature

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        processes = self._gpu(handle).processes
        if isinstance(processes, Exception):
            raise processes
        return processes

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        if pid == 666:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return b"/usr/bin/python3"

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        gpu = self._gpu(handle)
        if gpu.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else pynvml.NVML_DEVICE_MIG_DISABLE, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return len(self._gpu(handle).mig or [])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        slot = (self._gpu(handle).mig or [])[index]
        if slot is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(slot)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Handle) -> Handle:
        for gpu in self.gpus:
            if handle.uuid in (gpu.mig or []):
                return Handle(gpu.uuid)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceSetPowerManagementLimit(self, handle: Handle, milliwatts: int) -> None:
        gpu = self._gpu(handle)
        if not self.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        if not 200_000 <= milliwatts <= 700_000:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.set_calls.append((handle.uuid, milliwatts))
        gpu.limit = milliwatts

    def nvmlDeviceResetGpuLockedClocks(self, handle: Handle) -> None:
        gpu = self._gpu(handle)
        if not self.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        gpu.locked_gpu = None

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Handle) -> None:
        gpu = self._gpu(handle)
        if not gpu.memory_lock_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not self.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        gpu.locked_memory = None

    def nvmlDeviceGetClockInfo(self, handle: Handle, kind: int) -> int:
        return {pynvml.NVML_CLOCK_GRAPHICS: 1755, pynvml.NVML_CLOCK_MEM: 2619}[kind] if self._gpu(handle) else 0

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, kind: int) -> int:
        return {pynvml.NVML_CLOCK_GRAPHICS: 1980, pynvml.NVML_CLOCK_MEM: 2619}[kind] if self._gpu(handle) else 0

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Handle) -> list[int]:
        if not self._gpu(handle).graphics_clocks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [2619, 1593]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Handle, memory_mhz: int) -> list[int]:
        clocks = self._gpu(handle).graphics_clocks
        # Descending, as NVML lists them; the lower memory clock allows only the lower graphics clocks.
        return sorted((c for c in clocks if memory_mhz == 2619 or c < 1500), reverse=True)

    def nvmlDeviceSetGpuLockedClocks(self, handle: Handle, low: int, high: int) -> None:
        gpu = self._gpu(handle)
        if not gpu.graphics_clocks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not self.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        if low > high:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu.locked_gpu = (low, high)

    def nvmlDeviceGetRetiredPages(self, handle: Handle, cause: int) -> list[int]:
        retired = self._gpu(handle).retired
        if retired is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return retired.get(cause, [])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Handle) -> int:
        gpu = self._gpu(handle)
        if gpu.retired is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED if gpu.retired_pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        remapped = self._gpu(handle).remapped
        if remapped is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return remapped

    def nvmlDeviceGetPersistenceMode(self, handle: Handle) -> int:
        persistence = self._gpu(handle).persistence
        if persistence is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return persistence

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        gpu = self._gpu(handle)
        if gpu.nvlinks is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= gpu.nvlink_count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if link in gpu.nvlinks else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Handle, link: int) -> Any:
        return SimpleNamespace(busId=(self._gpu(handle).nvlinks or {})[link][0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Handle, link: int) -> int:
        return (self._gpu(handle).nvlinks or {})[link][1]

    def nvmlDeviceSetPowerManagementLimit_v2(self, *args: Any) -> None:
        raise AssertionError("the _v2 set ignores NVML's return code in nvidia-ml-py 13.615.71: never call it")


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    fake = FakeDriver(
        [
            FakeGpu(
                UUID0,
                bus_id=b"0000:3b:00.0",  # bytes, legacy 4-digit domain, lower case
                processes=[
                    SimpleNamespace(pid=4242, usedGpuMemory=2**30),
                    SimpleNamespace(pid=666, usedGpuMemory=None),  # memory unknown (MIG/WDDM), name unreadable
                ],
            ),
            FakeGpu(UUID1, bus_id="00000000:5E:00.0", usage=None, temperature=None, mig=[MIG, None]),
        ]
    )
    fake.install(monkeypatch)
    return fake


def test_devices_are_read_into_gpu_infos(driver: FakeDriver) -> None:
    first, second = NvmlBackend().devices()
    assert first.index == 0
    assert first.uuid == UUID0
    assert first.pci_bus_id == "00000000:3B:00.0"
    assert first.name == "NVIDIA H200"
    assert (first.power_limit_mw, first.default_limit_mw, first.min_limit_mw, first.max_limit_mw) == (
        400_000,
        700_000,
        200_000,
        700_000,
    )
    assert first.enforced_limit_mw == 400_000
    assert (first.power_usage_mw, first.temperature_c) == (123_456, 61)
    assert first.processes == (
        GpuProcess(pid=4242, used_memory_bytes=2**30, name="/usr/bin/python3"),
        GpuProcess(pid=666, used_memory_bytes=None, name=""),
    )
    assert first.mig_uuids == ()
    assert second.index == 1
    assert second.pci_bus_id == "00000000:5E:00.0"


def test_reads_a_gpu_cannot_do_become_none_instead_of_failing_the_device(driver: FakeDriver) -> None:
    second = NvmlBackend().device(UUID1)
    assert second.power_usage_mw is None
    assert second.temperature_c is None


def test_a_gpu_without_power_limits_fails_as_not_supported(driver: FakeDriver) -> None:
    driver.gpus[0].limits_supported = False
    with pytest.raises(GpuNotSupported, match="read the power limits of GPU 0"):
        NvmlBackend().devices()


def test_processes_missing_from_an_old_driver_are_an_empty_list(driver: FakeDriver) -> None:
    driver.gpus[0].processes = pynvml.NVMLLibraryMismatchError("unversioned function missing")  # type: ignore[assignment]
    assert NvmlBackend().device(UUID0).processes == ()


def test_a_lost_gpu_while_reading_is_gpu_lost(driver: FakeDriver) -> None:
    driver.gpus[1].lost = True
    with pytest.raises(GpuLost) as caught:
        NvmlBackend().devices()
    assert caught.value.code == pynvml.NVML_ERROR_GPU_IS_LOST


def test_mig_devices_are_listed_skipping_empty_slots_and_lead_to_their_parent(driver: FakeDriver) -> None:
    backend = NvmlBackend()
    assert backend.device(UUID1).mig_uuids == (MIG,)
    assert backend.parent_of_mig(MIG) == UUID1
    assert select(MIG, backend)[0].uuid == UUID1


def test_a_gpu_uuid_given_as_a_mig_device_is_not_found(driver: FakeDriver) -> None:
    with pytest.raises(GpuNotFound, match="not a MIG device"):
        NvmlBackend().parent_of_mig(UUID0)


@pytest.mark.parametrize("uuid", ["GPU-00000000-0000-0000-0000-000000000000", "nonsense"])
def test_an_unknown_or_malformed_uuid_is_not_found(driver: FakeDriver, uuid: str) -> None:
    with pytest.raises(GpuNotFound):
        NvmlBackend().device(uuid)


def test_a_set_uses_the_unversioned_call(driver: FakeDriver) -> None:
    NvmlBackend().set_power_limit(UUID0, 560_000)
    assert driver.set_calls == [(UUID0, 560_000)]
    assert NvmlBackend().device(UUID0).power_limit_mw == 560_000


def test_set_errors_keep_their_nvml_meaning(driver: FakeDriver) -> None:
    with pytest.raises(GpuInvalidArgument, match="to 100000 mW failed: NVML error 2"):
        NvmlBackend().set_power_limit(UUID0, 100_000)
    driver.root = False
    with pytest.raises(GpuNoPermission, match="CAP_SYS_ADMIN"):
        NvmlBackend().set_power_limit(UUID0, 500_000)
    assert driver.set_calls == []


def test_a_clock_reset_unlocks_gpu_and_memory_clocks(driver: FakeDriver) -> None:
    gpu = driver.gpus[0]
    gpu.locked_gpu, gpu.locked_memory = (1980, 1980), (2619, 2619)
    NvmlBackend().reset_locked_clocks(UUID0)
    assert (gpu.locked_gpu, gpu.locked_memory) == (None, None)
    assert driver.gpus[1].locked_gpu is None  # only the GPU asked for


def test_a_gpu_that_cannot_lock_memory_clocks_still_gets_its_gpu_clocks_reset(driver: FakeDriver) -> None:
    gpu = driver.gpus[0]
    gpu.locked_gpu, gpu.memory_lock_supported = (1410, 1410), False
    NvmlBackend().reset_locked_clocks(UUID0)
    assert gpu.locked_gpu is None


def test_a_clock_reset_without_root_is_no_permission_and_changes_nothing(driver: FakeDriver) -> None:
    gpu = driver.gpus[0]
    gpu.locked_gpu = (1980, 1980)
    driver.root = False
    with pytest.raises(GpuNoPermission, match=f"reset the locked GPU clocks of {UUID0} failed"):
        NvmlBackend().reset_locked_clocks(UUID0)
    assert gpu.locked_gpu == (1980, 1980)


def test_a_clock_reset_on_an_unknown_gpu_is_not_found(driver: FakeDriver) -> None:
    with pytest.raises(GpuNotFound):
        NvmlBackend().reset_locked_clocks("GPU-00000000-0000-0000-0000-000000000000")


# --- clocks, memory health, MIG/NVLink state, GPU reset


def test_clocks_are_read_with_the_supported_set_over_every_memory_clock_and_an_unknown_lock(
    driver: FakeDriver,
) -> None:
    driver.gpus[0].locked_gpu = (210, 1410)  # NVML cannot read it back: the backend must not pretend
    state = NvmlBackend().clocks(UUID0)
    assert (state.graphics_mhz, state.memory_mhz, state.max_graphics_mhz, state.max_memory_mhz) == (
        1755,
        2619,
        1980,
        2619,
    )
    assert state.supported_graphics_mhz == (210, 1410, 1980)
    assert state.supported_memory_mhz == (1593, 2619)
    assert (state.locked_graphics_mhz, state.lock_known) == (None, False)


def test_a_gpu_without_clock_control_reports_no_supported_clocks(driver: FakeDriver) -> None:
    driver.gpus[0].graphics_clocks = ()
    assert NvmlBackend().clocks(UUID0).supported_graphics_mhz == ()
    with pytest.raises(GpuNotSupported, match=r"lock the GPU clocks of .* failed: NVML error 3"):
        NvmlBackend().lock_gpu_clocks(UUID0, 210, 1410)


def test_a_clock_lock_and_unlock_go_through_nvml_with_its_errors(driver: FakeDriver) -> None:
    gpu = driver.gpus[0]
    gpu.locked_memory = (2619, 2619)
    NvmlBackend().lock_gpu_clocks(UUID0, 210, 1410)
    assert gpu.locked_gpu == (210, 1410)
    NvmlBackend().unlock_gpu_clocks(UUID0)
    assert (gpu.locked_gpu, gpu.locked_memory) == (None, (2619, 2619))  # memory clocks are not ours to unlock
    with pytest.raises(GpuInvalidArgument, match="NVML error 2"):
        NvmlBackend().lock_gpu_clocks(UUID0, 1410, 210)
    with pytest.raises(GpuInvalidArgument, match="positive integers of MHz"):
        NvmlBackend().lock_gpu_clocks(UUID0, -1, 1410)  # ctypes would wrap it: refused before NVML
    driver.root = False
    with pytest.raises(GpuNoPermission, match="CAP_SYS_ADMIN"):
        NvmlBackend().lock_gpu_clocks(UUID0, 210, 1410)
    assert gpu.locked_gpu is None


def test_memory_health_counts_retired_pages_and_remapped_rows_and_marks_what_is_not_supported(
    driver: FakeDriver,
) -> None:
    old, new = driver.gpus
    old.retired = {
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: [0x1000, 0x2000],
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [0x3000],
    }
    old.retired_pending = True
    new.remapped = (3, 1, 1, 0)
    before_ampere = NvmlBackend().memory_health(UUID0)
    assert before_ampere.to_dict() == {
        "retired_pages": {"single_bit_ecc": 2, "double_bit_ecc": 1, "pending": True},
        "remapped_rows": {
            "correctable": "not supported",
            "uncorrectable": "not supported",
            "pending": "not supported",
            "failure": "not supported",
        },
    }
    ampere = NvmlBackend().memory_health(UUID1)
    assert (ampere.retired_pages_single_bit, ampere.remapped_rows_uncorrectable) == (None, 1)
    assert (ampere.remapped_rows_pending, ampere.remapped_rows_failure) == (True, False)


def test_reset_state_lists_mig_devices_and_active_nvlinks_with_their_far_ends(driver: FakeDriver) -> None:
    driver.gpus[0].nvlinks = {
        0: (b"0000:5e:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU),
        2: ("00000000:05:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH),
    }
    driver.gpus[0].persistence = pynvml.NVML_FEATURE_ENABLED
    state = NvmlBackend().reset_state(UUID0)
    assert (state.mig_enabled, state.mig_devices, state.persistence_mode) == (None, (), True)
    assert state.active_nvlinks == (0, 2)
    assert state.nvlink_peers == ("link 0: gpu 00000000:5E:00.0", "link 2: switch 00000000:05:00.0")
    assert state.nvlink_gpu_peers == ("00000000:5E:00.0",)
    other = NvmlBackend().reset_state(UUID1)
    assert (other.mig_enabled, other.mig_devices, other.active_nvlinks) == (True, (MIG,), None)
    assert other.persistence_mode is None


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in nvidia-smi first on PATH: appends each call's argv as one line to `calls`; a --gpu-reset
    exits with the code in `exit-code` and prints the text in `said` (default: success)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls\n'
        '[ "$1" = --gpu-reset ] || exit 0\n'
        f"if [ -f {tmp_path}/said ]; then cat {tmp_path}/said >&2; fi\n"
        f'exit "$(cat {tmp_path}/exit-code 2>/dev/null || echo 0)"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path


def calls(smi: Path) -> list[str]:
    return (smi / "calls").read_text().splitlines()


def test_a_gpu_reset_runs_nvidia_smi_on_the_gpus_bus_id_without_a_shell(driver: FakeDriver, smi: Path) -> None:
    NvmlBackend().reset_gpu(UUID0)
    assert calls(smi) == ["--gpu-reset -i 00000000:3B:00.0"]


def test_persistence_mode_is_turned_off_for_the_reset_and_on_again_even_when_it_fails(
    driver: FakeDriver, smi: Path
) -> None:
    driver.gpus[0].persistence = pynvml.NVML_FEATURE_ENABLED
    NvmlBackend().reset_gpu(UUID0)
    bus = "00000000:3B:00.0"
    assert calls(smi) == [f"-pm 0 -i {bus}", f"--gpu-reset -i {bus}", f"-pm 1 -i {bus}"]
    (smi / "calls").unlink()
    (smi / "exit-code").write_text("15")
    with pytest.raises(GpuLost):
        NvmlBackend().reset_gpu(UUID0)
    assert calls(smi) == [f"-pm 0 -i {bus}", f"--gpu-reset -i {bus}", f"-pm 1 -i {bus}"]


def test_nvidia_smis_exit_code_is_an_nvml_code(driver: FakeDriver, smi: Path) -> None:
    (smi / "exit-code").write_text("4")
    (smi / "said").write_text("Unable to reset GPU: Insufficient Permissions")
    with pytest.raises(GpuNoPermission, match="Unable to reset GPU: Insufficient Permissions") as caught:
        NvmlBackend().reset_gpu(UUID1)
    assert caught.value.code == 4
    (smi / "exit-code").write_text("255")
    (smi / "said").write_text("Unknown Error")
    with pytest.raises(GpuError, match="nvidia-smi --gpu-reset failed: NVML failed: Unknown Error") as other:
        NvmlBackend().reset_gpu(UUID1)
    assert other.value.code is None
    assert not isinstance(other.value, GpuResetRefused)


def test_a_gpu_held_by_another_client_is_a_refused_reset_naming_what_to_stop(driver: FakeDriver, smi: Path) -> None:
    (smi / "exit-code").write_text("255")
    (smi / "said").write_text(
        "The following GPUs could not be reset:\n  GPU 00000000:5E:00.0: In use by another client\n"
    )
    with pytest.raises(GpuResetRefused, match=r"in use by another client .*nv-hostengine, dcgm-exporter"):
        NvmlBackend().reset_gpu(UUID1)


def test_without_nvidia_smi_a_reset_is_not_supported(
    driver: FakeDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GpuNotSupported, match="nvidia-smi is not on this node's PATH"):
        NvmlBackend().reset_gpu(UUID0)


def test_nvml_is_initialised_once_per_process_even_from_many_threads(driver: FakeDriver) -> None:
    backends = [NvmlBackend() for _ in range(8)]
    threads = [threading.Thread(target=backend.devices) for backend in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(30))
    NvmlBackend().device(UUID0)
    assert driver.init_calls == 1


def test_a_forked_child_initialises_nvml_again(driver: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    NvmlBackend().devices()
    # What a child of fork() inherits: the parent's pid as "initialised". The child must not trust it.
    monkeypatch.setattr(nvml_module, "_initialised_pid", -1)
    NvmlBackend().devices()
    assert driver.init_calls == 2


def test_the_nvml_backend_satisfies_the_protocol() -> None:
    assert isinstance(NvmlBackend(), GpuBackend)
    assert NvmlBackend.name == "nvml"
