"""gpu.set_power_limit and gpu.restore_power_limit against a real simulated GPU file in tmp_path.

The example file holds H100-like GPUs: limit = default = max = 700 W, min 200 W.
Actions run directly (validate -> plan/execute with an InMemoryMemory) for the
branch-by-branch checks, and through the real engine + executor + SQLite store
for retries, failures mid-run and the restore after a server restart.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry, InMemoryMemory, StepContext
from remediate.actions.gpu import MEMORY_PREFIX, RestorePowerLimitAction, SetPowerLimitAction
from remediate.config.settings import Settings
from remediate.errors import ConfigError, ParamsError, RetryableActionError
from remediate.executor.loop import Executor
from remediate.gpu import (
    GpuError,
    GpuInfo,
    GpuLost,
    GpuNoPermission,
    GpuNotFound,
    RetryableGpuError,
    SimulatedBackend,
)
from remediate.judging.engine import Engine, IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.gpu import step_context
from tests.support.store_json import run_json_of

T0 = 1_767_225_600.0
W = 1000  # milliwatts per watt


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def sim_file(tmp_path: Path) -> Path:
    return SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=4)


@pytest.fixture
def sim(sim_file: Path) -> SimulatedBackend:
    return SimulatedBackend(sim_file)


@pytest.fixture
def gpu0(sim: SimulatedBackend) -> GpuInfo:
    return sim.devices()[0]


@pytest.fixture
def setter(sim: SimulatedBackend) -> SetPowerLimitAction:
    return SetPowerLimitAction(lambda: sim)


@pytest.fixture
def restorer(sim: SimulatedBackend) -> RestorePowerLimitAction:
    return RestorePowerLimitAction(lambda: sim)


def do(action: SetPowerLimitAction | RestorePowerLimitAction, ctx: StepContext, **params: Any) -> dict[str, Any]:
    return action.execute(action.validate(params), ctx)


def limit(sim: SimulatedBackend, uuid: str) -> int:
    return sim.device(uuid).power_limit_mw


def memory_of(memory: InMemoryMemory, uuid: str) -> dict[str, Any] | None:
    return memory.recall(MEMORY_PREFIX + uuid)


def arm_set_failure(sim: SimulatedBackend, uuid: str) -> None:
    """Make any set_power_limit on this GPU fail loudly: proves a code path never calls it."""
    sim.update_device(uuid, fail={"set_power_limit": "gpu_lost"})


class DriftingBackend:
    """The real simulator, except that the limit the driver settles on differs from the one asked for."""

    name = "simulated"

    def __init__(self, sim: SimulatedBackend, drift_mw: int) -> None:
        self.sim = sim
        self.drift_mw = drift_mw

    def devices(self) -> list[GpuInfo]:
        return self.sim.devices()

    def device(self, uuid: str) -> GpuInfo:
        return self.sim.device(uuid)

    def parent_of_mig(self, mig_uuid: str) -> str:
        return self.sim.parent_of_mig(mig_uuid)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        self.sim.set_power_limit(uuid, milliwatts + self.drift_mw)


# --------------------------------------------------------------------------- validation


ONE_OF = "exactly one of watts, percent_of_default, reduce_by_percent"
NO_GPU = r"parameter 'gpu': not a GPU reference: .*expected a GPU index"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"gpu": "0"}, ONE_OF),
        ({"gpu": "0", "min_watts": 300}, ONE_OF),
        ({"gpu": "0", "watts": 300, "percent_of_default": 80}, ONE_OF),
        ({"gpu": "0", "percent_of_default": 80, "reduce_by_percent": 10}, ONE_OF),
        ({"gpu": "0", "watts": 300, "percent_of_default": 80, "reduce_by_percent": 10}, ONE_OF),
        ({"gpu": "0", "watts": 0}, "'watts': must be greater than 0"),
        ({"gpu": "0", "watts": -5}, "'watts': must be greater than 0"),
        ({"gpu": "0", "percent_of_default": 0}, "between 1 and 100"),
        ({"gpu": "0", "percent_of_default": 101}, "between 1 and 100"),
        ({"gpu": "0", "reduce_by_percent": 95}, "between 1 and 90"),
        ({"gpu": "0", "watts": 300, "min_percent_of_default": 150}, "between 1 and 100"),
        ({"gpu": "0", "watts": 300, "min_watts": 0}, "'min_watts': must be greater than 0"),
        ({"gpu": "0", "watts": "lots"}, "must be float"),
        ({"gpu": "0", "watts": 300, "allow_increase": "maybe"}, "must be bool"),
        ({"gpu": "0", "watts": 300, "force": True}, "unknown parameter 'force'"),
        ({"watts": 300}, "missing required parameter 'gpu'"),
        # A label that is no GPU reference.
        *(
            ({"gpu": label, "watts": 300}, NO_GPU)
            for label in ["gpu3", "-1", "03", "GPU-xyz", "0; rm -rf /", "", "ALL"]
        ),
    ],
)
def test_bad_params_are_refused(setter: SetPowerLimitAction, params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamsError, match=message):
        setter.validate(params)


def test_rendered_strings_are_coerced_and_defaults_filled(setter: SetPowerLimitAction, gpu0: GpuInfo) -> None:
    assert setter.validate({"gpu": gpu0.uuid.upper(), "percent_of_default": "80", "min_watts": "200"}) == {
        "gpu": gpu0.uuid.upper(),
        "percent_of_default": 80.0,
        "min_watts": 200.0,
        "allow_increase": False,
    }
    assert RestorePowerLimitAction(lambda: None).validate({"gpu": "all"}) == {"gpu": "all", "fallback": "none"}
    with pytest.raises(ParamsError, match="must be one of none, default"):
        RestorePowerLimitAction(lambda: None).validate({"gpu": "all", "fallback": "max"})


# --------------------------------------------------------------------------- how the limit is chosen


def test_watts_sets_that_limit_reads_it_back_and_remembers_the_original(
    setter: SetPowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, ctx: StepContext, memory: InMemoryMemory
) -> None:
    result = do(setter, ctx, gpu=gpu0.uuid, watts=450)

    (entry,) = result["gpus"]
    assert entry["outcome"] == "set"
    assert (entry["previous_w"], entry["new_w"], entry["target_w"]) == (700, 450, 450)
    assert entry["change"] == "700 W -> 450 W"
    assert entry["reasons"] == ["asked for 450 W"]
    assert entry["remembered_original_w"] == 700
    assert result["changed"] == 1
    assert result["backend"] == "simulated"
    assert limit(sim, gpu0.uuid) == 450 * W
    record = memory_of(memory, gpu0.uuid)
    assert record is not None
    assert (record["original_mw"], record["set_mw"], record["run_id"]) == (700 * W, 450 * W, 7)
    # Other GPUs are untouched.
    assert [g.power_limit_mw for g in sim.devices()[1:]] == [700 * W] * 3


@pytest.mark.parametrize(
    ("current_w", "params", "reasons", "final_mw"),
    [
        (700, {"percent_of_default": 80}, ["80% of the default 700 W"], 560 * W),
        # Taken of the default, not of the current limit.
        (650, {"percent_of_default": 50}, ["50% of the default 700 W"], 350 * W),
        (600, {"reduce_by_percent": 10}, ["current 600 W reduced by 10%"], 540 * W),
        (700, {"percent_of_default": 33.3333}, None, 233_333),  # rounded to a whole milliwatt
        (
            700,
            {"percent_of_default": 30, "min_watts": 300},
            ["30% of the default 700 W", "raised to the floor 300 W"],
            300 * W,
        ),
        (700, {"watts": 250, "min_percent_of_default": 50}, ["asked for 250 W", "raised to the floor 350 W"], 350 * W),
        # The higher of two floors wins.
        (
            700,
            {"watts": 250, "min_watts": 400, "min_percent_of_default": 50},
            ["asked for 250 W", "raised to the floor 400 W"],
            400 * W,
        ),
        # A floor below the target changes nothing.
        (700, {"percent_of_default": 80, "min_watts": 200}, ["80% of the default 700 W"], 560 * W),
        (700, {"watts": 120, "min_watts": 100}, ["asked for 120 W", "clamped to the device minimum 200 W"], 200 * W),
        (
            400,
            {"watts": 1000, "allow_increase": True},
            ["asked for 1000 W", "clamped to the device maximum 700 W"],
            700 * W,
        ),
        # A floor above the device maximum is clamped to the maximum.
        (
            500,
            {"watts": 300, "min_watts": 900, "allow_increase": True},
            ["asked for 300 W", "raised to the floor 900 W", "clamped to the device maximum 700 W"],
            700 * W,
        ),
        # allow_increase raises the limit (and remembers the lower one as the original).
        (400, {"percent_of_default": 80, "allow_increase": True}, ["80% of the default 700 W"], 560 * W),
    ],
)
def test_how_the_limit_is_chosen(
    setter: SetPowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    ctx: StepContext,
    memory: InMemoryMemory,
    current_w: int,
    params: dict[str, Any],
    reasons: list[str] | None,
    final_mw: int,
) -> None:
    sim.update_device(gpu0.uuid, power_limit_mw=current_w * W)
    (entry,) = do(setter, ctx, gpu=gpu0.uuid, **params)["gpus"]
    assert (entry["outcome"], entry["previous_w"]) == ("set", current_w)
    if reasons is not None:
        assert entry["reasons"] == reasons
    assert limit(sim, gpu0.uuid) == final_mw
    assert memory_of(memory, gpu0.uuid)["original_mw"] == current_w * W  # type: ignore[index]


def test_never_raised_above_the_current_limit_without_allow_increase(
    setter: SetPowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    ctx: StepContext,
    memory: InMemoryMemory,
) -> None:
    sim.update_device(gpu0.uuid, power_limit_mw=400 * W)  # someone set a stricter limit on purpose
    arm_set_failure(sim, gpu0.uuid)

    (entry,) = do(setter, ctx, gpu=gpu0.uuid, percent_of_default=80)["gpus"]

    assert entry["outcome"] == "unchanged"
    assert entry["change"] == "unchanged"
    assert entry["target_w"] == 400
    assert entry["reasons"] == [
        "80% of the default 700 W",
        "kept at the current 400 W: it is already lower (allow_increase is false)",
    ]
    assert limit(sim, gpu0.uuid) == 400 * W
    assert memory.values == {}


# --------------------------------------------------------------------------- idempotence


def test_the_same_value_again_is_unchanged_and_calls_no_set(
    setter: SetPowerLimitAction,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
    ctx: StepContext,
    memory: InMemoryMemory,
) -> None:
    do(setter, ctx, gpu=gpu0.uuid, percent_of_default=80, min_watts=200)
    remembered = dict(memory.values)
    arm_set_failure(sim, gpu0.uuid)  # a set now would raise GpuLost
    before = sim_file.read_bytes()

    result = do(setter, step_context(memory, run_id=8), gpu=gpu0.uuid, percent_of_default=80, min_watts=200)

    (entry,) = result["gpus"]
    assert entry["outcome"] == "unchanged"
    assert entry["reasons"] == ["80% of the default 700 W", "already at that limit"]
    assert result["changed"] == 0
    assert sim_file.read_bytes() == before
    assert memory.values == remembered  # still run 7's record of the 700 W original


def test_a_gpu_already_at_the_target_is_not_touched(
    setter: SetPowerLimitAction, sim: SimulatedBackend, sim_file: Path, gpu0: GpuInfo, ctx: StepContext
) -> None:
    arm_set_failure(sim, gpu0.uuid)
    before = sim_file.read_bytes()
    (entry,) = do(setter, ctx, gpu=gpu0.uuid, watts=700)["gpus"]
    assert entry["outcome"] == "unchanged"
    assert entry["reasons"] == ["asked for 700 W", "already at that limit"]
    assert sim_file.read_bytes() == before
    assert ctx.memory.recall(MEMORY_PREFIX + gpu0.uuid) is None


def test_repeated_lowering_keeps_the_first_original(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)  # 700 -> 560
    (entry,) = do(setter, step_context(memory, run_id=2), gpu=gpu0.uuid, reduce_by_percent=10)["gpus"]  # -> 504

    assert (entry["previous_w"], entry["new_w"], entry["remembered_original_w"]) == (560, 504, 700)
    record = memory_of(memory, gpu0.uuid)
    assert record is not None
    assert (record["original_mw"], record["set_mw"], record["run_id"]) == (700 * W, 504 * W, 2)

    (restored,) = do(restorer, step_context(memory, run_id=3), gpu=gpu0.uuid)["gpus"]
    assert (restored["outcome"], restored["previous_w"], restored["new_w"]) == ("restored", 504, 700)
    assert limit(sim, gpu0.uuid) == 700 * W


def test_lowering_after_someone_else_changed_the_limit_remembers_their_value(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)  # 700 -> 560
    sim.set_power_limit(gpu0.uuid, 600 * W)  # an operator, by hand
    (entry,) = do(setter, step_context(memory, run_id=2), gpu=gpu0.uuid, watts=450)["gpus"]

    assert entry["remembered_original_w"] == 600
    do(restorer, step_context(memory, run_id=3), gpu=gpu0.uuid)
    assert limit(sim, gpu0.uuid) == 600 * W


# --------------------------------------------------------------------------- failures


def test_a_read_back_mismatch_fails_and_leaves_no_memory(
    sim: SimulatedBackend, gpu0: GpuInfo, ctx: StepContext, memory: InMemoryMemory
) -> None:
    drifting = SetPowerLimitAction(lambda: DriftingBackend(sim, drift_mw=-1 * W))

    with pytest.raises(GpuError, match=r"set 560 W but read back 559 W") as caught:
        do(drifting, ctx, gpu=gpu0.uuid, percent_of_default=80)

    assert not isinstance(caught.value, RetryableActionError)
    assert memory.values == {}
    assert limit(sim, gpu0.uuid) == 559 * W  # what the "driver" did is left for a person to see


def test_a_read_back_mismatch_keeps_the_earlier_record(
    setter: SetPowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, memory: InMemoryMemory
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)
    earlier = dict(memory.values)
    drifting = SetPowerLimitAction(lambda: DriftingBackend(sim, drift_mw=+2 * W))

    with pytest.raises(GpuError, match=r"set 504 W but read back 506 W"):
        do(drifting, step_context(memory, run_id=2), gpu=gpu0.uuid, reduce_by_percent=10)

    assert memory.values == earlier


def test_without_root_the_set_fails_with_no_permission_and_memory_is_unchanged(
    setter: SetPowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.set_as_root(False)

    with pytest.raises(GpuNoPermission, match="root or CAP_SYS_ADMIN") as caught:
        do(setter, ctx, gpu=gpu0.uuid, percent_of_default=80)

    assert caught.value.code == 4
    assert not isinstance(caught.value, RetryableActionError)
    assert memory.values == {}
    assert limit(sim, gpu0.uuid) == 700 * W


def test_without_root_an_earlier_record_survives_a_failed_lowering_and_a_failed_restore(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)
    earlier = dict(memory.values)
    sim.set_as_root(False)

    with pytest.raises(GpuNoPermission):
        do(setter, step_context(memory, run_id=2), gpu=gpu0.uuid, reduce_by_percent=10)
    assert memory.values == earlier
    with pytest.raises(GpuNoPermission):
        do(restorer, step_context(memory, run_id=3), gpu=gpu0.uuid)
    assert memory.values == earlier  # the restore can be tried again once the agent has root

    sim.set_as_root(True)
    do(restorer, step_context(memory, run_id=4), gpu=gpu0.uuid)
    assert limit(sim, gpu0.uuid) == 700 * W
    assert memory.values == {}


def test_an_injected_timeout_is_retryable_and_leaves_memory_unchanged(
    setter: SetPowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, ctx: StepContext, memory: InMemoryMemory
) -> None:
    sim.update_device(gpu0.uuid, fail={"set_power_limit": {"error": "timeout", "times": 1}})

    with pytest.raises(RetryableGpuError, match="NVML error 10") as caught:
        do(setter, ctx, gpu=gpu0.uuid, percent_of_default=80)
    assert isinstance(caught.value, RetryableActionError)
    assert memory.values == {}
    assert limit(sim, gpu0.uuid) == 700 * W

    (entry,) = do(setter, ctx, gpu=gpu0.uuid, percent_of_default=80)["gpus"]  # the retry
    assert entry["outcome"] == "set"
    assert memory_of(memory, gpu0.uuid)["original_mw"] == 700 * W  # type: ignore[index]


def test_a_gpu_lost_mid_run_fails_the_step_and_says_what_was_already_done(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    memory: InMemoryMemory,
) -> None:
    gpus = sim.devices()
    # GPU 1 falls off the bus after it was read: its set fails with NVML's GPU_IS_LOST.
    sim.update_device(gpus[1].uuid, fail={"set_power_limit": "gpu_lost"})

    with pytest.raises(GpuLost) as caught:
        do(setter, step_context(memory, run_id=1), gpu="all", percent_of_default=80)

    message = str(caught.value)
    assert caught.value.code == 15
    assert f"set the power limit of {gpus[1].uuid} to 560000 mW failed: NVML error 15" in message
    assert (
        f"already done in this step: GPU 0 {gpus[0].uuid} set 700 W -> 560 W (original remembered for restore)"
        in message
    )
    assert isinstance(caught.value.__cause__, GpuLost)
    assert [g.power_limit_mw for g in sim.devices()] == [560 * W, 700 * W, 700 * W, 700 * W]
    assert set(memory.values) == {MEMORY_PREFIX + gpus[0].uuid}

    # The restore puts GPU 0 back and never touches GPU 1, of which it has no record.
    result = do(restorer, step_context(memory, run_id=2), gpu="all")
    assert [g["outcome"] for g in result["gpus"]] == ["restored", "left_alone", "left_alone", "left_alone"]
    assert [g.power_limit_mw for g in sim.devices()] == [700 * W] * 4
    assert memory.values == {}


def test_a_restore_of_all_gpus_that_fails_midway_says_what_was_restored(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    memory: InMemoryMemory,
) -> None:
    gpus = sim.devices()
    do(setter, step_context(memory, run_id=1), gpu="all", percent_of_default=80)
    sim.update_device(gpus[2].uuid, fail={"set_power_limit": {"error": "in_use", "times": 1}})

    with pytest.raises(RetryableGpuError) as caught:
        do(restorer, step_context(memory, run_id=2), gpu="all")

    assert caught.value.code == 19
    assert isinstance(caught.value, RetryableActionError)  # still retried by the executor
    message = str(caught.value)
    assert f"GPU 0 {gpus[0].uuid} restored 560 W -> 700 W; GPU 1 {gpus[1].uuid} restored 560 W -> 700 W" in message
    assert set(memory.values) == {MEMORY_PREFIX + gpus[2].uuid, MEMORY_PREFIX + gpus[3].uuid}

    # The retry finishes the job: the GPUs already restored have no record left and are not touched again.
    result = do(restorer, step_context(memory, run_id=2), gpu="all")
    assert [g["outcome"] for g in result["gpus"]] == ["left_alone", "left_alone", "restored", "restored"]
    assert [g.power_limit_mw for g in sim.devices()] == [700 * W] * 4


def test_a_backend_failure_that_is_no_gpu_error_leaves_memory_as_before(
    sim: SimulatedBackend, sim_file: Path, gpu0: GpuInfo, ctx: StepContext, memory: InMemoryMemory
) -> None:
    class FileVanishes(DriftingBackend):
        def set_power_limit(self, uuid: str, milliwatts: int) -> None:
            sim_file.unlink()  # e.g. a demo's device file deleted under a running server
            super().set_power_limit(uuid, milliwatts)

    vanishing = SetPowerLimitAction(lambda: FileVanishes(sim, drift_mw=0))

    with pytest.raises(ConfigError, match="cannot read it"):
        do(vanishing, ctx, gpu=gpu0.uuid, percent_of_default=80)
    assert memory.values == {}


def test_a_lost_gpu_fails_the_plan_before_anything_changes(
    setter: SetPowerLimitAction, sim: SimulatedBackend, ctx: StepContext, memory: InMemoryMemory
) -> None:
    gpus = sim.devices()
    sim.update_device(gpus[1].uuid, lost=True)
    params = setter.validate({"gpu": "all", "percent_of_default": 80})

    with pytest.raises(GpuLost, match="GPU is lost"):
        setter.plan(params, ctx)
    with pytest.raises(GpuLost):
        setter.execute(params, ctx)
    assert sim.device(gpus[0].uuid).power_limit_mw == 700 * W
    assert memory.values == {}
    # The other GPUs can still be named one by one.
    (entry,) = do(setter, ctx, gpu=gpus[0].uuid, percent_of_default=80)["gpus"]
    assert entry["outcome"] == "set"


def test_an_unknown_gpu_is_not_found_and_the_error_lists_the_gpus_here(
    setter: SetPowerLimitAction, sim: SimulatedBackend, ctx: StepContext
) -> None:
    with pytest.raises(GpuNotFound, match="GPUs here: 0 GPU-"):
        do(setter, ctx, gpu="GPU-00000000-0000-0000-0000-000000000000", watts=300)
    with pytest.raises(GpuNotFound, match="no GPU with index 9"):
        do(setter, ctx, gpu="9", watts=300)


# --------------------------------------------------------------------------- selection


def test_index_and_any_pci_form_select_the_same_gpu(
    setter: SetPowerLimitAction, sim: SimulatedBackend, ctx: StepContext
) -> None:
    gpu2 = sim.devices()[2]
    for ref in ("2", gpu2.pci_bus_id, gpu2.pci_bus_id[4:].lower(), gpu2.pci_bus_id[9:]):
        plan = setter.plan(setter.validate({"gpu": ref, "watts": 300}), ctx)
        assert [g["gpu"] for g in plan["gpus"]] == [gpu2.uuid], ref


def test_a_mig_device_resolves_to_its_parent_gpu_with_a_note(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    ctx: StepContext,
    memory: InMemoryMemory,
) -> None:
    parent = sim.devices()[1]
    mig = f"MIG-{uuid_module.uuid5(uuid_module.NAMESPACE_DNS, 'mig-1-0')}"
    sim.update_device(parent.uuid, mig_uuids=[mig])

    plan = setter.plan(setter.validate({"gpu": mig, "percent_of_default": 80}), ctx)
    assert [g["gpu"] for g in plan["gpus"]] == [parent.uuid]
    (note,) = plan["notes"]
    assert "MIG device" in note
    assert "parent GPU" in note

    result = do(setter, ctx, gpu=mig.upper(), percent_of_default=80)
    assert result["notes"] == plan["notes"]
    assert limit(sim, parent.uuid) == 560 * W
    assert set(memory.values) == {MEMORY_PREFIX + parent.uuid}  # remembered under the GPU, not the MIG device

    restored = do(restorer, ctx, gpu=mig)
    assert restored["gpus"][0]["outcome"] == "restored"
    assert limit(sim, parent.uuid) == 700 * W


def test_the_old_mig_form_names_its_parent_itself(
    setter: SetPowerLimitAction, sim: SimulatedBackend, ctx: StepContext
) -> None:
    parent = sim.devices()[3]
    plan = setter.plan(setter.validate({"gpu": f"MIG-{parent.uuid}/1/0", "watts": 300}), ctx)
    assert [g["gpu"] for g in plan["gpus"]] == [parent.uuid]
    assert plan["notes"]


def test_an_unknown_mig_device_is_refused_clearly(setter: SetPowerLimitAction, ctx: StepContext) -> None:
    mig = f"MIG-{uuid_module.uuid5(uuid_module.NAMESPACE_DNS, 'nowhere')}"
    with pytest.raises(GpuNotFound, match=f"MIG device {mig} is not on this node"):
        do(setter, ctx, gpu=mig, watts=300)


# --------------------------------------------------------------------------- restore


def test_restore_puts_back_the_remembered_original_and_forgets_it(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=11), gpu=gpu0.uuid, percent_of_default=80)

    result = do(restorer, step_context(memory, run_id=12), gpu=gpu0.uuid)

    (entry,) = result["gpus"]
    assert (entry["outcome"], entry["previous_w"], entry["new_w"]) == ("restored", 560, 700)
    assert entry["reason"] == "restoring 700 W replaced by run 11"
    assert result["restored"] == 1
    assert limit(sim, gpu0.uuid) == 700 * W
    assert memory.values == {}


def test_restore_twice_does_nothing_the_second_time(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)
    do(restorer, step_context(memory, run_id=2), gpu=gpu0.uuid)
    arm_set_failure(sim, gpu0.uuid)
    before = sim_file.read_bytes()

    (entry,) = do(restorer, step_context(memory, run_id=3), gpu=gpu0.uuid)["gpus"]

    assert entry["outcome"] == "left_alone"
    assert sim_file.read_bytes() == before


def test_restore_leaves_a_limit_someone_else_changed_alone_and_says_why(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=21), gpu=gpu0.uuid, percent_of_default=80)
    sim.set_power_limit(gpu0.uuid, 600 * W)  # an operator, by hand
    arm_set_failure(sim, gpu0.uuid)
    before = sim_file.read_bytes()

    plan = restorer.plan(restorer.validate({"gpu": gpu0.uuid}), step_context(memory, run_id=22))
    result = do(restorer, step_context(memory, run_id=22), gpu=gpu0.uuid)

    (entry,) = result["gpus"]
    assert entry["outcome"] == "left_alone"
    assert entry["reason"] == (
        "left alone: the limit is 600 W, not the 560 W remediate set in run 21 — someone changed it since"
    )
    assert plan["gpus"][0]["target_w"] is None
    assert plan["gpus"][0]["reason"] == entry["reason"]
    assert result["restored"] == 0
    assert sim_file.read_bytes() == before
    assert memory.values == {}  # the limit is theirs now: a later restore will not fight them


def test_restore_with_no_record_and_fallback_default_sets_the_default(
    restorer: RestorePowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, ctx: StepContext
) -> None:
    sim.update_device(gpu0.uuid, power_limit_mw=500 * W)

    (entry,) = do(restorer, ctx, gpu=gpu0.uuid, fallback="default")["gpus"]

    assert (entry["outcome"], entry["previous_w"], entry["new_w"]) == ("restored", 500, 700)
    assert entry["reason"] == "no record of a change by remediate: falling back to the default limit"
    assert limit(sim, gpu0.uuid) == 700 * W


@pytest.mark.parametrize(
    ("current_w", "params", "reason"),
    [
        (500, {}, "nothing to restore: remediate has no record of changing this GPU's limit"),
        (700, {"fallback": "default"}, "no record of a change by remediate; already at the default limit"),
    ],
    ids=["no-fallback", "fallback-at-default"],
)
def test_restore_with_no_record_calls_no_set_unless_falling_back_to_another_default(
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
    ctx: StepContext,
    current_w: int,
    params: dict[str, Any],
    reason: str,
) -> None:
    sim.update_device(gpu0.uuid, power_limit_mw=current_w * W)
    arm_set_failure(sim, gpu0.uuid)
    before = sim_file.read_bytes()

    (entry,) = do(restorer, ctx, gpu=gpu0.uuid, **params)["gpus"]

    assert (entry["outcome"], entry["reason"]) == ("left_alone", reason)
    assert sim_file.read_bytes() == before


def test_fallback_default_does_not_override_a_record(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    sim.update_device(gpu0.uuid, power_limit_mw=650 * W)
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, watts=400)
    do(restorer, step_context(memory, run_id=2), gpu=gpu0.uuid, fallback="default")
    assert limit(sim, gpu0.uuid) == 650 * W  # the original, not the 700 W default


def test_restore_read_back_mismatch_fails_and_keeps_the_record(
    setter: SetPowerLimitAction, sim: SimulatedBackend, gpu0: GpuInfo, memory: InMemoryMemory
) -> None:
    do(setter, step_context(memory, run_id=1), gpu=gpu0.uuid, percent_of_default=80)
    earlier = dict(memory.values)
    drifting = RestorePowerLimitAction(lambda: DriftingBackend(sim, drift_mw=-5 * W))

    with pytest.raises(GpuError, match="restored 700 W but read back 695 W"):
        do(drifting, step_context(memory, run_id=2), gpu=gpu0.uuid)
    assert memory.values == earlier


def test_restore_of_all_gpus_restores_only_those_remediate_changed(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    memory: InMemoryMemory,
) -> None:
    gpus = sim.devices()
    do(setter, step_context(memory, run_id=1), gpu=gpus[1].uuid, watts=300)
    sim.set_power_limit(gpus[2].uuid, 450 * W)  # not remediate's doing

    result = do(restorer, step_context(memory, run_id=2), gpu="all")

    assert [g["outcome"] for g in result["gpus"]] == ["left_alone", "restored", "left_alone", "left_alone"]
    assert [g.power_limit_mw for g in sim.devices()] == [700 * W, 700 * W, 450 * W, 700 * W]


# --------------------------------------------------------------------------- plan (dry-run)


def test_plan_shows_current_default_constraints_target_and_why_and_changes_nothing(
    setter: SetPowerLimitAction, sim: SimulatedBackend, sim_file: Path, ctx: StepContext, memory: InMemoryMemory
) -> None:
    gpus = sim.devices()
    sim.update_device(gpus[2].uuid, power_limit_mw=240 * W)
    before = sim_file.read_bytes()

    plan = setter.plan(setter.validate({"gpu": "all", "percent_of_default": 30, "min_watts": 250}), ctx)

    assert sim_file.read_bytes() == before
    assert memory.values == {}
    assert plan["backend"] == "simulated"
    assert plan["would_change"] == 3
    assert plan["notes"] == []
    first, _, third, _ = plan["gpus"]
    assert {k: first[k] for k in ("gpu", "index", "current_w", "default_w", "min_w", "max_w", "target_w")} == {
        "gpu": gpus[0].uuid,
        "index": 0,
        "current_w": 700,
        "default_w": 700,
        "min_w": 200,
        "max_w": 700,
        "target_w": 250,
    }
    assert first["change"] == "700 W -> 250 W"
    assert first["reasons"] == ["30% of the default 700 W", "raised to the floor 250 W"]
    assert first["name"] == gpus[0].name
    assert first["pci_bus_id"] == gpus[0].pci_bus_id
    assert first["temperature_c"] == gpus[0].temperature_c
    assert third["change"] == "unchanged"
    assert third["target_w"] == 240
    assert "allow_increase is false" in third["reasons"][-1]


def test_restore_plan_shows_what_would_be_put_back_and_changes_nothing(
    setter: SetPowerLimitAction,
    restorer: RestorePowerLimitAction,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
    memory: InMemoryMemory,
) -> None:
    do(setter, step_context(memory, run_id=5), gpu=gpu0.uuid, percent_of_default=80)
    remembered = dict(memory.values)
    before = sim_file.read_bytes()

    plan = restorer.plan(restorer.validate({"gpu": gpu0.uuid}), step_context(memory, run_id=6))

    assert plan["gpus"] == [
        {
            "gpu": gpu0.uuid,
            "index": 0,
            "current_w": 560,
            "default_w": 700,
            "target_w": 700,
            "reason": "restoring 700 W replaced by run 5",
        }
    ]
    assert sim_file.read_bytes() == before
    assert memory.values == remembered


def test_plan_without_root_still_reads(setter: SetPowerLimitAction, sim: SimulatedBackend, ctx: StepContext) -> None:
    sim.set_as_root(False)
    plan = setter.plan(setter.validate({"gpu": "0", "percent_of_default": 80}), ctx)
    assert plan["gpus"][0]["target_w"] == 560


@pytest.mark.parametrize("action", [SetPowerLimitAction, RestorePowerLimitAction])
def test_a_gpu_reference_rendered_from_the_alert_must_name_one_gpu(action: Any) -> None:
    schema = action.schema
    templated = {"gpu": "{{ labels.UUID }}"}

    with pytest.raises(ParamsError, match=r"names every GPU of the node.*exactly one GPU"):
        schema.check_templated(templated, {"gpu": "all"})
    for one in ("3", "GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2a", "00000000:3B:00.0"):
        schema.check_templated(templated, {"gpu": one})
    schema.check_templated({"gpu": "all"}, {"gpu": "all"})  # written in the playbook: every GPU, as meant


# --------------------------------------------------------------------------- through the engine and executor


def gpu_playbook(**changes: Any) -> dict[str, Any]:
    return {
        "name": "gpu-overheat-test",
        "match": {"alertname": "GPUTemperatureHigh", "labels": ['severity=~"warning|critical"']},
        "target": "node",
        "steps": [
            {
                "action": "gpu.set_power_limit",
                "with": {"gpu": "{{ labels.UUID }}", "percent_of_default": 80, "min_watts": 200},
                "retries": 2,
            }
        ],
        "on_resolved": [{"action": "gpu.restore_power_limit", "with": {"gpu": "{{ labels.UUID }}"}}],
        **changes,
    }


@pytest.fixture
def gpu_settings(sim_file: Path, db_url: str) -> Settings:
    return Settings.of(gpu_backend="simulated", gpu_simulator_file=sim_file, database_url=db_url)


@pytest.fixture
def registry(gpu_settings: Settings) -> ActionRegistry:
    """Overrides the shared fixture: the shipped actions with the simulated GPU backend."""
    return default_registry(gpu_settings)


@pytest.fixture
def executor(store: Store, registry: ActionRegistry) -> Executor:
    return Executor(store=store, registry=registry, retry_wait_max=0.01)


Fire = Callable[..., dict[str, Any]]


def hot(gpu: str, status: str = "firing") -> dict[str, Any]:
    labels = {"UUID": gpu, "Hostname": "node-a", "severity": "warning", "gpu": "0"}
    return alert_payload("GPUTemperatureHigh", status=status, labels=labels)


def only_run(result: IngestResult) -> int:
    (decision,) = result.decisions
    assert decision.run_id is not None, decision.reason
    return decision.run_id


@pytest.fixture
def fire(store: Store, executor: Executor, make_engine: Callable[..., Engine]) -> Callable[..., dict[str, Any]]:
    """fire(uuid, **playbook changes): GPUTemperatureHigh for that GPU ingested and its one run executed; the run
    as the API shows it."""

    def run(gpu: str, **changes: Any) -> dict[str, Any]:
        run_id = only_run(ingest_alerts(make_engine(gpu_playbook(**changes)), hot(gpu), at=T0))
        assert executor.drain() == 1
        return run_json_of(store, run_id)

    return run


def test_restore_after_a_server_restart(
    gpu_settings: Settings,
    sim: SimulatedBackend,
    sim_file: Path,
    gpu0: GpuInfo,
) -> None:
    """Lower through one Store + Executor, then restore through new ones on the same SQLite file."""

    def start_server() -> tuple[Store, Engine, Executor]:
        # Everything a fresh server process builds: store, registry (and so a new GPU backend), engine, executor.
        store = Store.open(gpu_settings.store.url)
        registry = default_registry(gpu_settings)
        playbooks = PlaybookSet([parse_playbook(gpu_playbook(), registry, source="gpu-overheat-test.yaml")])
        engine = Engine(store=store, playbooks=playbooks, registry=registry)
        return store, engine, Executor(store=store, registry=registry, retry_wait_max=0.01)

    store, engine, executor = start_server()
    firing_run = only_run(ingest_alerts(engine, hot(gpu0.uuid), at=T0))
    assert executor.drain() == 1
    assert limit(sim, gpu0.uuid) == 560 * W
    store.close()
    del store, engine, executor

    store, engine, executor = start_server()
    try:
        assert store.memory.recall(MEMORY_PREFIX + gpu0.uuid)["original_mw"] == 700 * W  # type: ignore[index]
        resolved_run = only_run(ingest_alerts(engine, hot(gpu0.uuid, status="resolved"), at=T0 + 600))
        assert executor.drain() == 1

        assert limit(sim, gpu0.uuid) == 700 * W
        assert store.memory.recall(MEMORY_PREFIX + gpu0.uuid) is None

        fired = run_json_of(store, firing_run)
        assert (fired["phase"], fired["status"]) == ("firing", "succeeded")
        (lower,) = fired["steps"]
        assert lower["plan"]["gpus"][0]["change"] == "700 W -> 560 W"
        (lowered,) = lower["result"]["gpus"]
        assert (lowered["gpu"], lowered["outcome"], lowered["previous_w"], lowered["new_w"]) == (
            gpu0.uuid,
            "set",
            700,
            560,
        )
        assert lowered["reasons"] == ["80% of the default 700 W"]

        resolved = run_json_of(store, resolved_run)
        assert (resolved["phase"], resolved["status"]) == ("resolved", "succeeded")
        (restore,) = resolved["steps"]
        assert restore["action"] == "gpu.restore_power_limit"
        assert restore["plan"]["gpus"][0]["target_w"] == 700
        (restored,) = restore["result"]["gpus"]
        assert (restored["outcome"], restored["previous_w"], restored["new_w"]) == ("restored", 560, 700)
        assert restored["reason"] == f"restoring 700 W replaced by run {firing_run}"
    finally:
        store.close()


def test_an_injected_timeout_is_retried_by_the_executor(fire: Fire, sim: SimulatedBackend, gpu0: GpuInfo) -> None:
    sim.update_device(gpu0.uuid, fail={"set_power_limit": {"error": "timeout", "times": 1}})

    detail = fire(gpu0.uuid)

    assert detail["status"] == "succeeded"
    (step,) = detail["steps"]
    assert [a["outcome"] for a in step["attempts"]] == ["retryable_error", "succeeded"]
    assert "NVML error 10 (Timeout)" in step["attempts"][0]["error"]
    assert step["result"]["gpus"][0]["outcome"] == "set"
    assert limit(sim, gpu0.uuid) == 560 * W


def test_a_gpu_lost_mid_run_is_recorded_with_what_was_already_done(
    fire: Fire, store: Store, sim: SimulatedBackend
) -> None:
    gpus = sim.devices()
    sim.update_device(gpus[1].uuid, fail={"set_power_limit": "gpu_lost"})

    detail = fire(gpus[0].uuid, steps=[{"action": "gpu.set_power_limit", "with": {"gpu": "all", "watts": 500}}])

    assert detail["status"] == "failed"
    (step,) = detail["steps"]
    assert step["status"] == "failed"
    assert [a["outcome"] for a in step["attempts"]] == ["failed"]  # GPU lost is not retried
    assert "NVML error 15 (GPU is lost)" in step["error"]
    assert f"GPU 0 {gpus[0].uuid} set 700 W -> 500 W" in step["error"]
    assert step["error"] in detail["error"]
    assert [g.power_limit_mw for g in sim.devices()] == [500 * W, 700 * W, 700 * W, 700 * W]
    assert store.memory.recall(MEMORY_PREFIX + gpus[0].uuid)["original_mw"] == 700 * W  # type: ignore[index]
    assert store.memory.recall(MEMORY_PREFIX + gpus[1].uuid) is None


def test_without_root_the_run_fails_with_the_permission_error_and_nothing_is_remembered(
    fire: Fire, store: Store, sim: SimulatedBackend, gpu0: GpuInfo
) -> None:
    sim.set_as_root(False)

    (step,) = fire(gpu0.uuid)["steps"]
    assert step["status"] == "failed"
    assert "NVML error 4 (Insufficient Permissions)" in step["error"]
    assert len(step["attempts"]) == 1
    assert step["plan"]["gpus"][0]["target_w"] == 560  # the plan was still recorded
    assert store.memory.recall(MEMORY_PREFIX + gpu0.uuid) is None


def test_a_dry_run_playbook_only_plans_and_the_gpu_file_is_untouched(
    fire: Fire, store: Store, sim_file: Path, gpu0: GpuInfo
) -> None:
    before = sim_file.read_bytes()

    detail = fire(gpu0.uuid, mode="dry-run")

    assert detail["status"] == "planned"
    (step,) = detail["steps"]
    assert step["plan"]["gpus"][0]["change"] == "700 W -> 560 W"
    assert step["result"] is None
    assert sim_file.read_bytes() == before
    assert store.memory.recall(MEMORY_PREFIX + gpu0.uuid) is None


def test_a_label_that_is_no_gpu_is_rejected_before_anything_runs(
    store: Store,
    executor: Executor,
    sim_file: Path,
    make_engine: Callable[..., Engine],
) -> None:
    before = sim_file.read_bytes()
    result = ingest_alerts(make_engine(gpu_playbook()), hot("GPU-not-a-uuid; reboot"), at=T0)
    (decision,) = result.decisions
    assert decision.decision == "rejected"
    assert "not a GPU reference: 'GPU-not-a-uuid; reboot'" in decision.reason
    assert executor.drain() == 0
    assert decision.run_id is not None
    detail = run_json_of(store, decision.run_id)
    assert detail["status"] == "rejected"
    assert detail["steps"] == []
    assert sim_file.read_bytes() == before


class ReadBackFailsOnceBackend(DriftingBackend):
    """The real simulator, except that the first read after a set times out (a retryable NVML error)."""

    def __init__(self, sim: SimulatedBackend) -> None:
        super().__init__(sim, drift_mw=0)
        self.fail_next_read = False
        self.failures_left = 1

    def device(self, uuid: str) -> GpuInfo:
        if self.fail_next_read:
            self.fail_next_read = False
            raise RetryableGpuError("read back timed out", code=10)
        return self.sim.device(uuid)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        self.sim.set_power_limit(uuid, milliwatts)
        if self.failures_left:
            self.failures_left -= 1
            self.fail_next_read = True


def test_a_failed_read_back_after_a_good_set_keeps_the_original_so_a_retry_and_restore_still_work(
    sim: SimulatedBackend, gpu0: GpuInfo, memory: InMemoryMemory
) -> None:
    backend = ReadBackFailsOnceBackend(sim)
    setter = SetPowerLimitAction(lambda: backend)
    ctx = step_context(memory)
    with pytest.raises(RetryableGpuError):
        do(setter, ctx, gpu=gpu0.uuid, watts=500)
    assert limit(sim, gpu0.uuid) == 500_000
    retry = do(setter, ctx, gpu=gpu0.uuid, watts=500)
    assert retry["gpus"][0]["outcome"] == "unchanged"
    restored = do(RestorePowerLimitAction(lambda: backend), ctx, gpu=gpu0.uuid)
    assert restored["gpus"][0]["outcome"] == "restored"
    assert limit(sim, gpu0.uuid) == gpu0.power_limit_mw
