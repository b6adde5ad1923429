"""The `health_scan` reads: NVML's (remediate.gpu.nvml_health, against a fake driver built on pynvml's own
constants and NVMLError) and the simulator's `health` section (remediate.gpu.sim_health), and the bit values
remediate.gpu.health copies from nvml.h matching nvidia-ml-py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from remediate.errors import ConfigError
from remediate.gpu import GpuError, SimulatedBackend, nvml_health
from remediate.gpu.health import CLOCK_EVENT_REASONS, NVLINK_COUNTERS, GpuHealth, reason_names

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def test_the_copied_bits_and_counters_are_nvml_s() -> None:
    camel = {"gpu_idle": "GpuIdle", "applications_clocks": "ApplicationsClocksSetting", "sw_power_cap": "SwPowerCap"}
    camel |= {"hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost", "sw_thermal": "SwThermalSlowdown"}
    camel |= {"hw_thermal": "HwThermalSlowdown", "hw_power_brake": "HwPowerBrakeSlowdown"}
    camel |= {"display_clocks": "DisplayClockSetting"}
    for name, bit in CLOCK_EVENT_REASONS.items():
        assert getattr(pynvml, "nvmlClocksEventReason" + camel[name]) == bit, name
        assert getattr(pynvml, "nvmlClocksThrottleReason" + camel[name]) == bit, name
    upper = {"replay": "REPLAY", "recovery": "RECOVERY", "crc_flit": "CRC_FLIT", "crc_data": "CRC_DATA"}
    for name, counter in NVLINK_COUNTERS.items():
        assert getattr(pynvml, "NVML_NVLINK_ERROR_DL_" + upper.get(name, name.upper())) == counter
    assert reason_names(0x8 | 0x80 | 0x10000) == ["hw_slowdown", "hw_power_brake", "0x10000"]


def _fails(code: int) -> Any:
    def call(*_: Any) -> Any:
        raise pynvml.NVMLError(code)

    return call


def fake_nvml(**overrides: Any) -> Any:
    """pynvml's constants and NVMLError, with one healthy H100-like GPU behind the getters gpu.health calls."""
    constants = {k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith("NVML_")}
    nvml: dict[str, Any] = {
        **constants,
        "NVMLError": pynvml.NVMLError,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: "h0",
        "nvmlDeviceGetUUID": lambda h: UUID,
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b"00000000:18:00.0"),
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetRetiredPagesPendingStatus": _fails(pynvml.NVML_ERROR_NOT_SUPPORTED),  # Hopper remaps rows
        "nvmlDeviceGetRemappedRows": lambda h: (0, 2, 1, 0),
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: 2 if (kind, counter) == (1, 0) else 99,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 1,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=0, memory=0),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x1,
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: 0x8,
        "nvmlDeviceGetNvLinkState": lambda h, link: (
            pynvml.NVML_FEATURE_ENABLED if link < 2 else _fails(pynvml.NVML_ERROR_INVALID_ARGUMENT)()
        ),
        "nvmlDeviceGetNvLinkErrorCounter": lambda h, link, counter: (
            _fails(pynvml.NVML_ERROR_NOT_SUPPORTED)() if counter == 4 else link * 10 + counter
        ),
    }
    return SimpleNamespace(**(nvml | overrides))


def test_nvml_reads_every_getter_and_leaves_unsupported_ones_out() -> None:
    (gpu,) = nvml_health.scan(fake_nvml())
    assert (gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.lost) == (0, UUID, "00000000:18:00.0", None)
    r = gpu.reading
    assert r is not None
    assert r.memory.retired_pages_pending is None  # NOT_SUPPORTED: a skipped check, not a failure
    assert (r.memory.remapped_rows_uncorrectable, r.memory.remapped_rows_pending) == (2, True)
    assert r.ecc_dbe_volatile == 2  # UNCORRECTED (1), VOLATILE (0)
    assert (r.pcie.gen, r.pcie.max_gen, r.pcie.width, r.pcie.max_width, r.utilization_percent) == (1, 5, 16, 16, 0)
    assert r.clock_event_reasons == 0x1
    assert r.nvlink_errors == {
        0: {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3},
        1: {"replay": 10, "recovery": 11, "crc_flit": 12, "crc_data": 13},
    }


def test_an_older_driver_s_throttle_reasons_and_a_gpu_without_nvlink_or_ecc() -> None:
    missing = _fails(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    no_link = _fails(pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml = fake_nvml(
        nvmlDeviceGetCurrentClocksEventReasons=missing,
        nvmlDeviceGetNvLinkState=no_link,
        nvmlDeviceGetTotalEccErrors=no_link,
    )
    (gpu,) = nvml_health.scan(nvml)
    assert gpu.reading is not None
    assert (gpu.reading.clock_event_reasons, gpu.reading.nvlink_errors, gpu.reading.ecc_dbe_volatile) == (
        0x8,
        None,
        None,
    )


def test_a_getter_the_installed_driver_lacks_is_none_as_the_backend_s_reads_are() -> None:
    """pynvml raises NVMLLibraryMismatchError (not an NVMLError) for an unversioned function missing from the
    driver: the same None as NOT_SUPPORTED, so the event reasons fall back to the older throttle name."""

    def missing(*_: Any) -> Any:
        raise pynvml.NVMLLibraryMismatchError("unversioned function missing")

    nvml = fake_nvml(
        NVMLLibraryMismatchError=pynvml.NVMLLibraryMismatchError,
        nvmlDeviceGetCurrentClocksEventReasons=missing,
        nvmlDeviceGetUtilizationRates=missing,
    )
    (gpu,) = nvml_health.scan(nvml)
    assert gpu.lost is None and gpu.reading is not None
    assert (gpu.reading.clock_event_reasons, gpu.reading.utilization_percent) == (0x8, None)


@pytest.mark.parametrize(
    "where", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState"]
)
def test_a_gpu_lost_on_any_call_is_reported_lost_and_the_next_gpu_is_still_read(where: str) -> None:
    lost = _fails(pynvml.NVML_ERROR_GPU_IS_LOST)
    real = fake_nvml()
    wrap = {where: lambda h, *rest: lost() if h in ("h0", 0) else getattr(real, where)(h, *rest)}
    flaky = fake_nvml(
        **({"nvmlDeviceGetHandleByIndex": lambda index: f"h{index}"} | wrap), nvmlDeviceGetCount=lambda: 2
    )
    first, second = nvml_health.scan(flaky)
    assert first.reading is None and first.lost is not None and "NVML error 15 (GPU is lost)" in first.lost
    assert first.uuid == ("" if where == "nvmlDeviceGetHandleByIndex" else UUID)
    assert second.lost is None and second.reading is not None


def test_other_nvml_errors_fail_the_scan_with_nvml_s_code() -> None:
    nvml = fake_nvml(nvmlDeviceGetCurrPcieLinkWidth=_fails(pynvml.NVML_ERROR_UNKNOWN))
    with pytest.raises(GpuError) as caught:
        nvml_health.scan(nvml)
    assert caught.value.code == pynvml.NVML_ERROR_UNKNOWN
    assert str(caught.value).startswith(f"read the PCIe link width of {UUID} failed: NVML error 999")


# --- the simulator


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=2))


def test_the_simulator_reports_its_health_section_and_the_memory_keys(sim: SimulatedBackend) -> None:
    first, second = sim.devices()
    sim.update_device(
        first.uuid,
        health={"ecc_dbe_volatile": 1, "clock_event_reasons": ["hw_thermal"], "nvlink_errors": {"2": {"replay": 4}}},
        retired_pages={"single_bit": 0, "double_bit": 1, "pending": True},
    )
    scanned = sim.health_scan()
    assert [g.index for g in scanned] == [0, 1]
    r = scanned[0].reading
    assert r is not None
    assert (r.ecc_dbe_volatile, r.clock_event_reasons, r.nvlink_errors) == (1, 0x40, {2: {"replay": 4}})
    assert r.memory.retired_pages_pending is True
    assert r.pcie.width is None  # not in the section: NOT_SUPPORTED
    untouched = scanned[1]
    assert untouched == GpuHealth(
        index=1, uuid=second.uuid, pci_bus_id=second.pci_bus_id, name=second.name, reading=untouched.reading
    )
    assert untouched.reading is not None and untouched.reading.memory.remapped_rows_pending is False


def test_a_lost_or_injected_lost_gpu_is_lost_in_the_scan_and_other_failures_raise(sim: SimulatedBackend) -> None:
    first, second = sim.devices()
    sim.update_device(first.uuid, fail={"read": {"error": "gpu_lost", "times": 1}})
    scanned = sim.health_scan()
    assert scanned[0].lost is not None and scanned[1].lost is None
    assert sim.health_scan()[0].lost is None  # the injected failure counted down
    sim.update_device(second.uuid, fail={"read": "timeout"})
    with pytest.raises(GpuError, match="NVML error 10"):
        sim.health_scan()


@pytest.mark.parametrize(
    ("health", "why"),
    [
        ({"ecc": 1}, "health must be a mapping of"),
        ({"ecc_dbe_volatile": -1}, "health.ecc_dbe_volatile must be a non-negative integer"),
        ({"pcie": {"lanes": 16}}, "health.pcie must be a mapping of gen, max_gen, width, max_width"),
        ({"clock_event_reasons": ["hot"]}, "health.clock_event_reasons must list names of"),
        ({"nvlink_errors": {"x": {}}}, "'x' is not a link number"),
        ({"nvlink_errors": {0: {"bad": 1}}}, "health.nvlink_errors.0 must map replay"),
    ],
)
def test_a_bad_health_section_is_refused_with_the_file_and_the_place(
    sim: SimulatedBackend, health: dict[str, Any], why: str
) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        sim.update_device(sim.devices()[0].uuid, health=health)
    assert str(caught.value).startswith(f"simulated GPU file {sim.path}: devices[0]:")
