"""Real-GPU check of the NVML backend: reads every GPU through NVML and prints it. It never sets anything.

Deselected by default (marker `nvml`). On a machine with an NVIDIA GPU and driver:

    pytest -m nvml tests/e2e/test_nvml_real.py -s

Without a driver every test here is skipped with NVML's error as the reason. The
backend is wrapped in `ReadOnly`, which fails the test if anything tries to change
a GPU (power limit, clock lock or unlock, clock reset, GPU reset); no test here changes
a setting of a real GPU. The gpu actions are only ever asked for their dry-run `plan`,
never `execute`. It also covers the reads behind gpu.lock_clocks, gpu.unlock_clocks and
gpu.reset: clocks and the supported set, retired pages / remapped rows, MIG and NVLink.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from remediate.actions.base import InMemoryMemory, StepContext
from remediate.actions.gpu import RestorePowerLimitAction, SetPowerLimitAction
from remediate.actions.gpu_lock_clocks import LockClocksAction
from remediate.actions.gpu_reset import ResetGpuAction
from remediate.actions.gpu_unlock_clocks import UnlockClocksAction
from remediate.gpu import (
    ClockState,
    GpuBackend,
    GpuInfo,
    GpuNotFound,
    MemoryHealth,
    NvmlBackend,
    NvmlUnavailable,
    ResetState,
    parse_gpu_ref,
    resolve,
)
from remediate.intake.alertref import AlertRef

pytestmark = pytest.mark.nvml


class ReadOnly:
    """A GpuBackend that passes reads to NVML and refuses every write."""

    name = "nvml"

    def __init__(self, backend: GpuBackend) -> None:
        self._backend = backend

    def devices(self) -> list[GpuInfo]:
        return self._backend.devices()

    def device(self, uuid: str) -> GpuInfo:
        return self._backend.device(uuid)

    def parent_of_mig(self, mig_uuid: str) -> str:
        return self._backend.parent_of_mig(mig_uuid)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        pytest.fail(f"the real-GPU check must never set a power limit (asked: {uuid} -> {milliwatts} mW)")

    # The optional reads pass through (remediate.gpu.backend lists the capabilities) ...

    def clocks(self, uuid: str) -> ClockState:
        return self._backend.clocks(uuid)  # type: ignore[attr-defined, no-any-return]

    def memory_health(self, uuid: str) -> MemoryHealth:
        return self._backend.memory_health(uuid)  # type: ignore[attr-defined, no-any-return]

    def reset_state(self, uuid: str) -> ResetState:
        return self._backend.reset_state(uuid)  # type: ignore[attr-defined, no-any-return]

    # ... and every change fails the test.

    def lock_gpu_clocks(self, uuid: str, min_mhz: int, max_mhz: int) -> None:
        pytest.fail(f"the real-GPU check must never lock clocks (asked: {uuid} -> {min_mhz}..{max_mhz} MHz)")

    def unlock_gpu_clocks(self, uuid: str) -> None:
        pytest.fail(f"the real-GPU check must never unlock clocks (asked: {uuid})")

    def reset_locked_clocks(self, uuid: str) -> None:
        pytest.fail(f"the real-GPU check must never reset clocks (asked: {uuid})")

    def reset_gpu(self, uuid: str) -> None:
        pytest.fail(f"the real-GPU check must never reset a GPU (asked: {uuid})")


@pytest.fixture(scope="module")
def backend() -> ReadOnly:
    real = ReadOnly(NvmlBackend())
    try:
        real.devices()
    except NvmlUnavailable as exc:
        pytest.skip(f"no usable NVML here: {exc}")
    return real


@pytest.fixture(scope="module")
def gpus(backend: ReadOnly) -> list[GpuInfo]:
    found = backend.devices()
    assert found, "NVML initialised but reports no GPUs"
    return found


def _w(milliwatts: int | None) -> str:
    return "n/a" if milliwatts is None else f"{milliwatts / 1000:.1f} W"


def test_every_gpu_reports_sane_limits_constraints_and_processes(gpus: list[GpuInfo]) -> None:
    print()
    for gpu in gpus:
        print(
            f"GPU {gpu.index} {gpu.uuid} {gpu.pci_bus_id} {gpu.name}: limit {_w(gpu.power_limit_mw)} "
            f"(default {_w(gpu.default_limit_mw)}, min {_w(gpu.min_limit_mw)}, max {_w(gpu.max_limit_mw)}, "
            f"enforced {_w(gpu.enforced_limit_mw)}), usage {_w(gpu.power_usage_mw)}, "
            f"temperature {gpu.temperature_c} C, {len(gpu.processes)} processes, MIG {list(gpu.mig_uuids)}"
        )
        for process in gpu.processes:
            print(f"    pid {process.pid} {process.name!r} {process.used_memory_bytes} bytes")
        print(json.dumps(gpu.to_dict(), indent=2))
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", gpu.uuid)
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", gpu.pci_bus_id)
        assert 0 < gpu.min_limit_mw <= gpu.max_limit_mw
        assert gpu.min_limit_mw <= gpu.default_limit_mw <= gpu.max_limit_mw
        assert gpu.min_limit_mw <= gpu.power_limit_mw <= gpu.max_limit_mw
        assert 0 < gpu.enforced_limit_mw <= gpu.max_limit_mw
    assert [gpu.index for gpu in gpus] == list(range(len(gpus)))


def test_reading_one_gpu_by_uuid_matches_the_list(backend: ReadOnly, gpus: list[GpuInfo]) -> None:
    for gpu in gpus:
        again = backend.device(gpu.uuid)
        # Usage, temperature and processes move between two reads; identity and limits do not.
        stable: dict[str, Any] = {k: v for k, v in again.to_dict().items() if k.startswith(("index", "uuid", "pci"))}
        assert stable == {k: v for k, v in gpu.to_dict().items() if k.startswith(("index", "uuid", "pci"))}
        assert (again.min_limit_mw, again.max_limit_mw, again.default_limit_mw) == (
            gpu.min_limit_mw,
            gpu.max_limit_mw,
            gpu.default_limit_mw,
        )


def test_every_label_form_resolves_to_the_same_gpu(backend: ReadOnly, gpus: list[GpuInfo]) -> None:
    for gpu in gpus:
        for text in (str(gpu.index), gpu.uuid, gpu.uuid.upper(), gpu.pci_bus_id, gpu.pci_bus_id[4:].lower()):
            assert [g.uuid for g in resolve(parse_gpu_ref(text), backend)] == [gpu.uuid], text
        for mig in gpu.mig_uuids:
            assert backend.parent_of_mig(mig) == gpu.uuid
    assert [g.uuid for g in resolve(parse_gpu_ref("all"), backend)] == [g.uuid for g in gpus]


def test_an_unknown_uuid_is_not_found_by_the_real_driver(backend: ReadOnly) -> None:
    with pytest.raises(GpuNotFound) as caught:
        backend.device("GPU-00000000-0000-0000-0000-000000000000")
    print(f"\nNVML on an unknown UUID: code {caught.value.code}: {caught.value}")


def _plan_context() -> StepContext:
    return StepContext(
        run_id=0, step_index=0, playbook="nvml-check", target="this-node", alert=AlertRef(), memory=InMemoryMemory()
    )


def _expected_target_mw(gpu: GpuInfo, wanted_mw: float, floor_mw: float) -> int:
    """What set_power_limit must choose, worked out here independently of remediate.actions.gpu."""
    target = min(max(wanted_mw, floor_mw, gpu.min_limit_mw), gpu.max_limit_mw)
    return min(round(target), gpu.power_limit_mw)  # never raised without allow_increase


def test_the_dry_run_plan_of_every_gpu_reads_real_limits_and_sets_nothing(
    backend: ReadOnly, gpus: list[GpuInfo]
) -> None:
    action = SetPowerLimitAction(lambda: backend)
    ctx = _plan_context()
    print()
    for gpu in gpus:
        cases = [
            # The shipped playbook's step, the alert naming the GPU by dcgm-exporter's UUID label.
            ({"gpu": gpu.uuid, "percent_of_default": 80, "min_watts": 200}, 0.8 * gpu.default_limit_mw, 200_000),
            # By index, a cut of the current limit with a floor of half the default.
            (
                {"gpu": str(gpu.index), "reduce_by_percent": 10, "min_percent_of_default": 50},
                0.9 * gpu.power_limit_mw,
                0.5 * gpu.default_limit_mw,
            ),
            # By PCI bus id, a request below the device minimum: clamped.
            ({"gpu": gpu.pci_bus_id.lower(), "watts": 1}, 1_000, 0),
        ]
        for raw, wanted_mw, floor_mw in cases:
            plan = action.plan(action.validate(raw), ctx)
            print(f"GPU {gpu.index} plan for {raw}:\n{json.dumps(plan, indent=2)}")
            assert plan["backend"] == "nvml"
            (entry,) = plan["gpus"]
            assert (entry["gpu"], entry["index"]) == (gpu.uuid, gpu.index)
            assert entry["current_w"] == gpu.power_limit_mw / 1000
            assert (entry["default_w"], entry["min_w"], entry["max_w"]) == (
                gpu.default_limit_mw / 1000,
                gpu.min_limit_mw / 1000,
                gpu.max_limit_mw / 1000,
            )
            assert entry["target_w"] == _expected_target_mw(gpu, wanted_mw, floor_mw) / 1000
            assert gpu.min_limit_mw / 1000 <= entry["target_w"] <= entry["current_w"]
            assert entry["reasons"]
            assert plan["would_change"] == (entry["target_w"] != entry["current_w"])
            if raw.get("watts") == 1:
                assert any("clamped to the device minimum" in r for r in entry["reasons"])

    everything = action.plan(action.validate({"gpu": "all", "percent_of_default": 80, "min_watts": 200}), ctx)
    assert [g["gpu"] for g in everything["gpus"]] == [g.uuid for g in gpus]
    assert ctx.memory.values == {}  # type: ignore[attr-defined]


def test_the_restore_plan_of_every_gpu_reads_real_limits_and_sets_nothing(
    backend: ReadOnly, gpus: list[GpuInfo]
) -> None:
    action = RestorePowerLimitAction(lambda: backend)
    ctx = _plan_context()
    nothing = action.plan(action.validate({"gpu": "all"}), ctx)
    to_default = action.plan(action.validate({"gpu": "all", "fallback": "default"}), ctx)
    print(f"\n{json.dumps(to_default, indent=2)}")
    for gpu, left, fallback in zip(gpus, nothing["gpus"], to_default["gpus"], strict=True):
        assert left["target_w"] is None
        assert "no record" in left["reason"]
        expected = None if gpu.power_limit_mw == gpu.default_limit_mw else gpu.default_limit_mw / 1000
        assert fallback["target_w"] == expected
        assert fallback["default_w"] == gpu.default_limit_mw / 1000


def test_clocks_memory_health_and_reset_state_are_read_sanely(backend: ReadOnly, gpus: list[GpuInfo]) -> None:
    print()
    for gpu in gpus:
        clocks = backend.clocks(gpu.uuid)
        health = backend.memory_health(gpu.uuid)
        state = backend.reset_state(gpu.uuid)
        print(f"GPU {gpu.index} clocks {clocks.to_dict()}\n  memory {health.to_dict()}\n  reset {state.to_dict()}")
        assert not clocks.lock_known  # NVML has no read of a clock lock: never pretend
        assert clocks.locked_graphics_mhz is None
        supported = clocks.supported_graphics_mhz
        assert list(supported) == sorted(set(supported))
        if supported and clocks.max_graphics_mhz is not None:
            assert supported[-1] <= clocks.max_graphics_mhz
        if clocks.graphics_mhz is not None and clocks.max_graphics_mhz is not None:
            assert 0 < clocks.graphics_mhz <= clocks.max_graphics_mhz
        for count in (health.retired_pages_single_bit, health.retired_pages_double_bit):
            assert count is None or count >= 0
        for count in (health.remapped_rows_correctable, health.remapped_rows_uncorrectable):
            assert count is None or count >= 0
        assert state.mig_devices == gpu.mig_uuids
        if state.active_nvlinks is not None:
            assert all(0 <= link < 64 for link in state.active_nvlinks)
        assert set(state.nvlink_gpu_peers) <= {peer.split(" ")[-1] for peer in state.nvlink_peers}


def test_the_clock_and_reset_plans_of_every_gpu_read_real_state_and_change_nothing(
    backend: ReadOnly, gpus: list[GpuInfo]
) -> None:
    ctx = _plan_context()
    lock = LockClocksAction(lambda: backend)  # type: ignore[arg-type, return-value]
    unlock = UnlockClocksAction(lambda: backend)  # type: ignore[arg-type, return-value]
    reset = ResetGpuAction(lambda: backend)  # type: ignore[arg-type, return-value]
    for gpu in gpus:
        locked = lock.plan(lock.validate({"gpu": gpu.uuid, "percent_of_max": 70}), ctx)
        print(f"\nGPU {gpu.index} lock plan:\n{json.dumps(locked, indent=2)}")
        (entry,) = locked["gpus"]
        clocks = backend.clocks(gpu.uuid)
        if clocks.supported_graphics_mhz:
            low, high = entry["target_mhz"]
            assert low == clocks.supported_graphics_mhz[0]
            assert high in clocks.supported_graphics_mhz
            assert high <= 0.7 * (clocks.max_graphics_mhz or clocks.supported_graphics_mhz[-1])
            assert entry["change"].startswith("unknown -> ")
        else:
            assert entry["change"] == "refused"
        assert entry["power"]["limit_w"] == gpu.power_limit_mw / 1000
        assert isinstance(entry["memory_health"], dict)

        (undo,) = unlock.plan(unlock.validate({"gpu": gpu.uuid}), ctx)["gpus"]
        assert (undo["would"], undo["target_mhz"]) == ("nothing", None)

        (planned,) = reset.plan(reset.validate({"gpu": gpu.uuid}), ctx)["gpus"]
        print(f"GPU {gpu.index} reset plan: would {planned['would']}, blocked by {planned['blocked_by']}")
        pids = {process.pid for process in backend.device(gpu.uuid).processes}
        if pids:
            assert planned["would"] == "refuse"
            assert any(str(min(pids)) in why for why in planned["blocked_by"])
    assert ctx.memory.values == {}  # type: ignore[attr-defined]
