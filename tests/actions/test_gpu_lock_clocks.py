"""gpu.lock_clocks and gpu.unlock_clocks against a real simulated GPU file.

The example GPUs are H100-like: graphics clocks 345..1980 MHz in 15 MHz steps, max 1980.
Lock and unlock are tested together because what unlock does is what lock remembered:
unlocked, a person's own lock, or a lock changed by someone since (then left alone).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.actions.base import ActionRegistry, InMemoryMemory, StepContext
from remediate.actions.gpu_lock_clocks import MEMORY_PREFIX, LockClocksAction
from remediate.actions.gpu_unlock_clocks import UnlockClocksAction
from remediate.errors import ParamsError
from remediate.gpu import (
    BackendNotSupported,
    ClockState,
    GpuInfo,
    GpuInvalidArgument,
    GpuNoPermission,
    GpuNotSupported,
    RetryableGpuError,
    SimulatedBackend,
)
from remediate.judging.engine import Engine
from remediate.store import Store
from tests.support.gpu import PowerOnlyBackend, alert_on_gpu, node_playbook, simulated_registry, step_context
from tests.support.store_json import run_json_of

T0 = 1_767_225_600.0


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=3))


@pytest.fixture
def locker(sim: SimulatedBackend) -> LockClocksAction:
    return LockClocksAction(lambda: sim)


@pytest.fixture
def unlocker(sim: SimulatedBackend) -> UnlockClocksAction:
    return UnlockClocksAction(lambda: sim)


def lock_of(sim: SimulatedBackend, gpu: GpuInfo) -> tuple[int, int] | None:
    return sim.clocks(gpu.uuid).locked_graphics_mhz


# --------------------------------------------------------------------------- params


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "give exactly one of max_mhz, percent_of_max"),
        ({"max_mhz": 1500, "percent_of_max": 70}, "give exactly one of max_mhz, percent_of_max"),
        ({"max_mhz": 1000, "min_mhz": 1200}, "min_mhz 1200 is above max_mhz 1000"),
        ({"percent_of_max": 5}, "must be between 10 and 100"),
        ({"max_mhz": 0}, "must be greater than 0"),
    ],
)
def test_bad_params_are_refused(locker: LockClocksAction, gpus: list[GpuInfo], params: dict, message: str) -> None:
    with pytest.raises(ParamsError, match=message):
        locker.validate({"gpu": gpus[0].uuid, **params})


def test_the_registry_serves_all_three_as_node_actions_with_their_idempotence(registry: ActionRegistry) -> None:
    found = {name: registry.get(name) for name in ("gpu.lock_clocks", "gpu.unlock_clocks", "gpu.reset")}
    assert {name: (a.where, a.idempotent, a.breaker_gated) for name, a in found.items()} == {
        "gpu.lock_clocks": ("node", True, False),
        "gpu.unlock_clocks": ("node", True, False),
        "gpu.reset": ("node", False, False),
    }


# --------------------------------------------------------------------------- plan


def test_the_plan_shows_clocks_power_processes_and_memory_health_and_changes_nothing(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.update_device(gpus[1].uuid, remapped_rows={"correctable": 3, "uncorrectable": 1, "pending": True})
    plan = locker.plan(locker.validate({"gpu": "1", "percent_of_max": 75}), ctx)
    (entry,) = plan["gpus"]
    assert entry["clocks"] == {
        "graphics_mhz": 1980,
        "memory_mhz": 2619,
        "max_graphics_mhz": 1980,
        "max_memory_mhz": 2619,
        "supported_graphics_mhz": [345, 1980],
        "supported_graphics_count": 110,
        "supported_memory_mhz": [2619],
        "locked_graphics_mhz": "unlocked",
    }
    assert entry["power"] == {
        "limit_w": 700.0,
        "default_w": 700.0,
        "min_w": 200.0,
        "max_w": 700.0,
        "enforced_w": 700.0,
        "usage_w": 327.0,
    }
    assert entry["processes"] == [{"pid": 4201, "used_memory_bytes": 60 * 1024**3, "name": "python"}]
    assert entry["memory_health"] == {
        "retired_pages": {
            "single_bit_ecc": "not supported",
            "double_bit_ecc": "not supported",
            "pending": "not supported",
        },
        "remapped_rows": {"correctable": 3, "uncorrectable": 1, "pending": True, "failure": False},
    }
    # 75% of 1980 is 1485, a supported clock.
    assert (entry["target_mhz"], entry["change"]) == ([345, 1485], "unlocked -> 345..1485 MHz")
    assert entry["reasons"] == ["75% of the maximum graphics clock 1980 MHz"]
    assert plan["would_change"] == 1
    assert lock_of(sim, gpus[1]) is None
    assert memory.values == {}


def test_a_percent_between_supported_clocks_is_snapped_down_and_says_so(
    locker: LockClocksAction, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    (entry,) = locker.plan(locker.validate({"gpu": "0", "percent_of_max": 70, "min_mhz": 1000}), ctx)["gpus"]
    # 70% of 1980 = 1386 -> 1380 (345 + 69*15); min 1000 -> 1005, the next supported clock up.
    assert entry["target_mhz"] == [1005, 1380]
    assert entry["reasons"][-1] == "1380 MHz: the highest supported clock not above 1386 MHz"


def test_an_explicit_clock_outside_the_supported_range_is_refused_in_plan_and_execute(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    params = locker.validate({"gpu": gpus[0].uuid, "max_mhz": 2100})
    (entry,) = locker.plan(params, ctx)["gpus"]
    assert entry["change"] == "refused"
    assert "max_mhz 2100 is outside the supported graphics clocks" in entry["reasons"][0]
    assert "345..1980 MHz" in entry["reasons"][0]
    with pytest.raises(GpuInvalidArgument, match="max_mhz 2100 is outside"):
        locker.execute(params, ctx)
    assert lock_of(sim, gpus[0]) is None
    assert memory.values == {}


# --------------------------------------------------------------------------- execute and unlock


def test_lock_then_unlock_gives_back_the_unlocked_clocks(
    locker: LockClocksAction,
    unlocker: UnlockClocksAction,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    ctx: StepContext,
    memory: InMemoryMemory,
) -> None:
    uuid = gpus[0].uuid
    result = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)
    (entry,) = result["gpus"]
    assert (entry["outcome"], entry["target_mhz"], entry["previous"]) == ("locked", [345, 1500], {"state": "unlocked"})
    assert entry["graphics_mhz_after"] == 1500  # the lock caps the clock
    assert lock_of(sim, gpus[0]) == (345, 1500)
    assert lock_of(sim, gpus[1]) is None
    assert memory.values[MEMORY_PREFIX + uuid]["previous"] == {"state": "unlocked"}
    assert memory.values[MEMORY_PREFIX + uuid]["set_mhz"] == [345, 1500]

    again = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)
    assert again["gpus"][0]["outcome"] == "unchanged"  # idempotent

    params = unlocker.validate({"gpu": uuid})
    (planned,) = unlocker.plan(params, ctx)["gpus"]
    assert (planned["would"], planned["reason"]) == ("unlock", "unlocking: the clocks were not locked before run 7")
    (done,) = unlocker.execute(params, step_context(memory, run_id=8))["gpus"]
    assert (done["outcome"], done["graphics_mhz_after"]) == ("unlocked", 1980)
    assert lock_of(sim, gpus[0]) is None
    assert memory.values == {}
    (twice,) = unlocker.execute(params, step_context(memory, run_id=9))["gpus"]
    assert twice["outcome"] == "left_alone"
    assert twice["reason"] == "nothing to unlock: remediate has no record of locking this GPU's clocks"


def test_a_persons_own_lock_is_remembered_and_put_back(
    locker: LockClocksAction, unlocker: UnlockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    uuid = gpus[0].uuid
    sim.lock_gpu_clocks(uuid, 1200, 1800)  # someone benchmarks at a fixed range
    (entry,) = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)["gpus"]
    assert entry["previous"] == {"state": "locked", "mhz": [1200, 1800]}
    assert entry["change"] == "1200..1800 MHz -> 345..1500 MHz"
    assert lock_of(sim, gpus[0]) == (345, 1500)

    (done,) = unlocker.execute(unlocker.validate({"gpu": uuid}), ctx)["gpus"]
    assert done["outcome"] == "relocked"
    assert done["reason"] == "restoring the lock 1200..1800 MHz replaced by run 7"
    assert lock_of(sim, gpus[0]) == (1200, 1800)


def test_a_lower_lock_already_there_is_kept_unless_allow_increase(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    uuid = gpus[0].uuid
    sim.lock_gpu_clocks(uuid, 345, 1005)
    (kept,) = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)["gpus"]
    assert kept["outcome"] == "unchanged"
    assert (
        kept["reasons"][-1] == "kept at the current lock 345..1005 MHz: it is already lower (allow_increase is false)"
    )
    assert memory.values == {}
    (raised,) = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500, "allow_increase": True}), ctx)["gpus"]
    assert raised["outcome"] == "locked"
    assert lock_of(sim, gpus[0]) == (345, 1500)


def test_a_second_lower_lock_keeps_the_state_from_before_the_first(
    locker: LockClocksAction,
    unlocker: UnlockClocksAction,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    memory: InMemoryMemory,
) -> None:
    uuid = gpus[0].uuid
    sim.lock_gpu_clocks(uuid, 1200, 1980)
    locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), step_context(memory, run_id=1))
    (second,) = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1200}), step_context(memory, run_id=2))["gpus"]
    assert second["previous"] == {"state": "locked", "mhz": [345, 1500]}
    assert second["remembered_previous"] == {"state": "locked", "mhz": [1200, 1980]}
    unlocker.execute(unlocker.validate({"gpu": uuid}), step_context(memory, run_id=3))
    assert lock_of(sim, gpus[0]) == (1200, 1980)


def test_a_lock_someone_changed_meanwhile_is_left_alone_and_forgotten(
    locker: LockClocksAction,
    unlocker: UnlockClocksAction,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    ctx: StepContext,
    memory: InMemoryMemory,
) -> None:
    uuid = gpus[0].uuid
    locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)
    sim.lock_gpu_clocks(uuid, 900, 1305)  # a person re-locks by hand while remediate's lock holds
    params = unlocker.validate({"gpu": uuid})
    expected = (
        "left alone: the clocks are locked to 900..1305 MHz, not the 345..1500 MHz remediate locked in run 7 "
        "— someone changed them since"
    )
    assert unlocker.plan(params, ctx)["gpus"][0]["reason"] == expected
    (done,) = unlocker.execute(params, ctx)["gpus"]
    assert (done["outcome"], done["reason"]) == ("left_alone", expected)
    assert lock_of(sim, gpus[0]) == (900, 1305)
    assert memory.values == {}

    # The same when the person unlocked it by hand: nothing comes back.
    locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1200, "allow_increase": True}), ctx)
    sim.unlock_gpu_clocks(uuid)
    (gone,) = unlocker.execute(params, ctx)["gpus"]
    assert gone["outcome"] == "left_alone"
    assert gone["reason"].startswith("left alone: the clocks are unlocked, not the 345..1200 MHz")
    assert lock_of(sim, gpus[0]) is None


def test_fallback_unlock_without_a_record(
    unlocker: UnlockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    sim.lock_gpu_clocks(gpus[0].uuid, 345, 1005)
    (done,) = unlocker.execute(unlocker.validate({"gpu": gpus[0].uuid, "fallback": "unlock"}), ctx)["gpus"]
    assert done["outcome"] == "unlocked"
    assert lock_of(sim, gpus[0]) is None
    (again,) = unlocker.execute(unlocker.validate({"gpu": gpus[0].uuid, "fallback": "unlock"}), ctx)["gpus"]
    assert (again["outcome"], again["reason"]) == (
        "left_alone",
        "no record of a lock by remediate; the clocks are not locked",
    )


# --------------------------------------------------------------------------- NVML's refusals


def test_without_root_the_lock_is_no_permission_and_nothing_is_remembered(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.set_as_root(False)
    params = locker.validate({"gpu": gpus[0].uuid, "max_mhz": 1500})
    assert locker.plan(params, ctx)["would_change"] == 1  # reads still work
    with pytest.raises(GpuNoPermission, match="NVML error 4"):
        locker.execute(params, ctx)
    assert memory.values == {}
    assert lock_of(sim, gpus[0]) is None


def test_a_gpu_that_cannot_lock_clocks_is_not_supported(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.update_device(gpus[0].uuid, supported_graphics_clocks_mhz=[])
    params = locker.validate({"gpu": gpus[0].uuid, "percent_of_max": 80})
    assert "cannot lock its clocks" in locker.plan(params, ctx)["gpus"][0]["reasons"][0]
    with pytest.raises(GpuNotSupported, match="lists no supported graphics clocks"):
        locker.execute(params, ctx)
    assert memory.values == {}
    with pytest.raises(GpuNotSupported, match="NVML error 3"):
        sim.lock_gpu_clocks(gpus[0].uuid, 345, 1500)  # the simulator refuses on its own too


def test_an_injected_timeout_is_retryable_and_leaves_memory_as_before(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.update_device(gpus[0].uuid, fail={"lock_gpu_clocks": {"error": "timeout", "times": 1}})
    params = locker.validate({"gpu": gpus[0].uuid, "max_mhz": 1500})
    with pytest.raises(RetryableGpuError):
        locker.execute(params, ctx)
    assert memory.values == {}
    assert locker.execute(params, ctx)["changed"] == 1


def test_gpu_all_fails_midway_naming_what_was_already_locked(
    locker: LockClocksAction, sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.update_device(gpus[2].uuid, fail={"lock_gpu_clocks": "gpu_lost"})
    with pytest.raises(Exception, match=f"already done in this step: GPU 0 {gpus[0].uuid} locked") as caught:
        locker.execute(locker.validate({"gpu": "all", "max_mhz": 1500}), ctx)
    assert type(caught.value).__name__ == "GpuLost"
    assert [lock_of(sim, g) for g in gpus] == [(345, 1500), (345, 1500), None]
    assert set(memory.values) == {MEMORY_PREFIX + gpus[0].uuid, MEMORY_PREFIX + gpus[1].uuid}


class NoLockRead:
    """The NVML backend's view of a lock: it can set one but never read it back."""

    name = "nvml-like"

    def __init__(self, sim: SimulatedBackend) -> None:
        self.sim = sim
        self.devices, self.device = sim.devices, sim.device
        self.lock_gpu_clocks, self.unlock_gpu_clocks = sim.lock_gpu_clocks, sim.unlock_gpu_clocks

    def clocks(self, uuid: str) -> ClockState:
        seen = self.sim.clocks(uuid)
        return ClockState(
            graphics_mhz=seen.graphics_mhz,
            memory_mhz=seen.memory_mhz,
            max_graphics_mhz=seen.max_graphics_mhz,
            max_memory_mhz=seen.max_memory_mhz,
            supported_graphics_mhz=seen.supported_graphics_mhz,
            locked_graphics_mhz=None,
            lock_known=False,
        )


def test_where_the_lock_cannot_be_read_unlock_gives_the_clocks_back_to_the_driver(
    sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext, memory: InMemoryMemory
) -> None:
    backend = NoLockRead(sim)
    locker = LockClocksAction(lambda: backend)  # type: ignore[arg-type, return-value]
    unlocker = UnlockClocksAction(lambda: backend)  # type: ignore[arg-type, return-value]
    uuid = gpus[0].uuid
    sim.lock_gpu_clocks(uuid, 1200, 1800)  # a lock NVML cannot show
    (entry,) = locker.execute(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)["gpus"]
    assert (entry["change"], entry["previous"]) == ("unknown -> 345..1500 MHz", {"state": "unknown"})
    assert (
        locker.plan(locker.validate({"gpu": uuid, "max_mhz": 1500}), ctx)["gpus"][0]["clocks"]["locked_graphics_mhz"]
        == "unknown (NVML cannot read a clock lock)"
    )
    (done,) = unlocker.execute(unlocker.validate({"gpu": uuid}), ctx)["gpus"]
    assert done["outcome"] == "unlocked"
    assert "NVML cannot read a clock lock, so the one before it (if any) is unknown" in done["reason"]
    assert lock_of(sim, gpus[0]) is None


def test_a_backend_without_the_capability_plans_a_warning_and_fails_not_supported(
    sim: SimulatedBackend, gpus: list[GpuInfo], ctx: StepContext
) -> None:
    locker = LockClocksAction(lambda: PowerOnlyBackend(sim))  # type: ignore[arg-type, return-value]
    params = locker.validate({"gpu": gpus[0].uuid, "max_mhz": 1500})
    plan = locker.plan(params, ctx)
    assert plan["notes"] == ["the power-only GPU backend cannot lock clocks: the step would fail"]
    assert plan["gpus"][0]["clocks"] == "not supported by the power-only GPU backend"
    with pytest.raises(BackendNotSupported, match="no lock_gpu_clocks"):
        locker.execute(params, ctx)


# --------------------------------------------------------------------------- through the engine and executor


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    """Overrides the shared fixture. A power floor wraps the backend: the clock capabilities must pass through it."""
    return simulated_registry(sim, db_url, gpu_power_floor_watts=300)


def test_a_playbook_locks_on_firing_and_unlocks_on_resolved_through_the_store(
    store: Store,
    registry: ActionRegistry,
    sim: SimulatedBackend,
    gpus: list[GpuInfo],
    make_engine: Callable[..., Engine],
) -> None:
    unlock = {"action": "gpu.unlock_clocks", "with": {"gpu": "{{ labels.UUID }}"}}
    lock = {"action": "gpu.lock_clocks", "with": {"gpu": "{{ labels.UUID }}", "percent_of_max": 70}}
    engine = make_engine(node_playbook("gpu-clock-cap", "GPUTemperatureHigh", lock, on_resolved=[unlock]))
    fired = alert_on_gpu(engine, store, registry, "GPUTemperatureHigh", gpus[1].uuid, T0)
    assert lock_of(sim, gpus[1]) == (345, 1380)
    assert store.memory.recall(MEMORY_PREFIX + gpus[1].uuid)["previous"] == {"state": "unlocked"}  # type: ignore[index]

    resolved = alert_on_gpu(engine, store, registry, "GPUTemperatureHigh", gpus[1].uuid, T0 + 60, status="resolved")
    assert lock_of(sim, gpus[1]) is None
    assert store.memory.recall(MEMORY_PREFIX + gpus[1].uuid) is None

    run = run_json_of(store, fired)
    (step,) = run["steps"]
    assert step["plan"]["gpus"][0]["change"] == "unlocked -> 345..1380 MHz"
    assert step["result"]["gpus"][0]["outcome"] == "locked"
    (undo,) = run_json_of(store, resolved)["steps"]
    assert undo["result"]["gpus"][0]["reason"] == f"unlocking: the clocks were not locked before run {fired}"
