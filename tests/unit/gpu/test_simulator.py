"""The simulated backend behaves like NVML and keeps its state in one file shared by threads and processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from remediate.errors import ConfigError, RetryableActionError
from remediate.gpu import (
    GpuBackend,
    GpuInfo,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotFound,
    GpuNotSupported,
    GpuResetRefused,
    NvmlBackend,
    RetryableGpuError,
    SimulatedBackend,
    open_backend,
    simfile,
)
from tests.support.waiting import scaled

REPO = Path(__file__).resolve().parents[3]


def test_the_example_file_holds_eight_h100_like_gpus(sim: SimulatedBackend) -> None:
    gpus = sim.devices()
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.uuid for g in gpus}) == 8
    assert len({g.pci_bus_id for g in gpus}) == 8
    for gpu in gpus:
        assert gpu.uuid.startswith("GPU-")
        assert gpu.uuid == gpu.uuid[:4] + gpu.uuid[4:].lower()
        assert gpu.pci_bus_id.startswith("00000000:")
        assert (gpu.default_limit_mw, gpu.max_limit_mw, gpu.min_limit_mw) == (700_000, 700_000, 200_000)
        assert gpu.power_limit_mw == gpu.enforced_limit_mw == 700_000
        assert gpu.power_usage_mw is not None
        assert gpu.temperature_c is not None
        assert gpu.processes
        assert "H100" in gpu.name


def test_the_example_is_the_same_every_time(tmp_path: Path) -> None:
    first = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "a.yaml")).devices()
    second = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "b.json", count=8)).devices()
    assert first == second


def test_it_satisfies_the_backend_protocol(sim: SimulatedBackend) -> None:
    assert isinstance(sim, GpuBackend)
    assert isinstance(NvmlBackend(), GpuBackend)
    assert sim.name == "simulated"


def test_a_device_is_read_by_uuid_in_any_case(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    assert sim.device(gpu3.uuid) == gpu3
    assert sim.device(gpu3.uuid.upper()) == gpu3


def test_an_unknown_uuid_is_not_found_and_the_message_lists_the_gpus(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    with pytest.raises(GpuNotFound, match=gpu3.uuid):
        sim.device("GPU-00000000-0000-0000-0000-000000000000")


def test_a_limit_within_the_constraints_is_set_and_read_back(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.set_power_limit(gpu3.uuid, 560_000)
    after = sim.device(gpu3.uuid)
    assert after.power_limit_mw == 560_000
    assert after.enforced_limit_mw == 560_000  # the simulator enforces what is set
    assert after.default_limit_mw == 700_000
    assert sim.devices()[2].power_limit_mw == 700_000  # the neighbours are untouched


def test_reported_power_usage_never_exceeds_the_limit(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    assert gpu3.power_usage_mw == 361_000
    sim.set_power_limit(gpu3.uuid, 300_000)
    assert sim.device(gpu3.uuid).power_usage_mw == 300_000
    sim.set_power_limit(gpu3.uuid, 700_000)
    assert sim.device(gpu3.uuid).power_usage_mw == 361_000


@pytest.mark.parametrize("milliwatts", [200_000, 700_000])
def test_the_constraints_themselves_are_accepted(sim: SimulatedBackend, gpu3: GpuInfo, milliwatts: int) -> None:
    sim.set_power_limit(gpu3.uuid, milliwatts)
    assert sim.device(gpu3.uuid).power_limit_mw == milliwatts


@pytest.mark.parametrize("milliwatts", [199_999, 700_001, 0])
def test_a_limit_outside_the_constraints_is_an_invalid_argument(
    sim: SimulatedBackend, gpu3: GpuInfo, milliwatts: int
) -> None:
    with pytest.raises(GpuInvalidArgument, match=r"200000\.\.700000") as caught:
        sim.set_power_limit(gpu3.uuid, milliwatts)
    assert caught.value.code == 2
    assert sim.device(gpu3.uuid).power_limit_mw == 700_000


@pytest.mark.parametrize("milliwatts", [560.0, -1, True, "560000"])
def test_a_limit_that_is_not_a_whole_number_of_milliwatts_is_an_invalid_argument(
    sim: SimulatedBackend, gpu3: GpuInfo, milliwatts: object
) -> None:
    with pytest.raises(GpuInvalidArgument):
        sim.set_power_limit(gpu3.uuid, milliwatts)  # type: ignore[arg-type]


def test_without_root_a_set_is_refused_but_reads_still_work(tmp_path: Path) -> None:
    backend = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", as_root=False))
    gpu = backend.devices()[0]
    with pytest.raises(GpuNoPermission, match="root") as caught:
        backend.set_power_limit(gpu.uuid, 500_000)
    assert caught.value.code == 4
    assert backend.device(gpu.uuid).power_limit_mw == 700_000
    backend.set_as_root(True)
    backend.set_power_limit(gpu.uuid, 500_000)
    assert backend.device(gpu.uuid).power_limit_mw == 500_000


def test_a_lost_gpu_fails_every_call_like_nvml(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.update_device(gpu3.uuid, lost=True)
    with pytest.raises(GpuLost) as caught:
        sim.set_power_limit(gpu3.uuid, 500_000)
    assert caught.value.code == 15
    assert not isinstance(caught.value, RetryableActionError)
    with pytest.raises(GpuLost):
        sim.device(gpu3.uuid)
    with pytest.raises(GpuLost):
        sim.devices()
    assert sim.device(sim_uuid(sim, 2)).index == 2  # the other GPUs still answer


def sim_uuid(backend: SimulatedBackend, index: int) -> str:
    raw = yaml.safe_load(backend.path.read_text())
    return next(d["uuid"] for d in raw["devices"] if d["index"] == index)


@pytest.mark.parametrize(
    ("failure", "error", "code"),
    [("gpu_lost", GpuLost, 15), ("not_supported", GpuNotSupported, 3), ("no_permission", GpuNoPermission, 4)],
)
def test_injected_set_failures_raise_their_nvml_errors(
    sim: SimulatedBackend, gpu3: GpuInfo, failure: str, error: type[Exception], code: int
) -> None:
    sim.update_device(gpu3.uuid, fail={"set_power_limit": failure})
    for _ in range(2):  # a plain failure name fails every time
        with pytest.raises(error) as caught:
            sim.set_power_limit(gpu3.uuid, 500_000)
        assert caught.value.code == code  # type: ignore[attr-defined]
    assert sim.device(gpu3.uuid).power_limit_mw == 700_000  # reads still work, nothing was set


def test_an_injected_timeout_is_retryable_for_the_executor(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.update_device(gpu3.uuid, fail={"set_power_limit": "timeout"})
    with pytest.raises(RetryableGpuError) as caught:
        sim.set_power_limit(gpu3.uuid, 500_000)
    assert isinstance(caught.value, RetryableActionError)
    assert caught.value.code == 10


def test_a_counted_failure_fails_that_many_times_then_the_call_works(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.update_device(gpu3.uuid, fail={"set_power_limit": {"error": "timeout", "times": 2}})
    other = SimulatedBackend(sim.path)  # the count lives in the file, so every instance sees it go down
    with pytest.raises(RetryableGpuError):
        sim.set_power_limit(gpu3.uuid, 500_000)
    with pytest.raises(RetryableGpuError):
        other.set_power_limit(gpu3.uuid, 500_000)
    sim.set_power_limit(gpu3.uuid, 500_000)
    assert other.device(gpu3.uuid).power_limit_mw == 500_000


def test_an_injected_read_failure_hits_reads_until_used_up(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.update_device(gpu3.uuid, fail={"read": {"error": "gpu_lost", "times": 1}})
    with pytest.raises(GpuLost):
        sim.device(gpu3.uuid)
    assert sim.device(gpu3.uuid).index == 3


def test_state_is_shared_by_two_backends_on_the_same_file(sim_file: Path, gpu3: GpuInfo) -> None:
    first, second = SimulatedBackend(sim_file), SimulatedBackend(sim_file)
    first.set_power_limit(gpu3.uuid, 450_000)
    assert second.device(gpu3.uuid).power_limit_mw == 450_000
    second.set_power_limit(gpu3.uuid, 650_000)
    assert first.device(gpu3.uuid).power_limit_mw == 650_000


def test_state_survives_a_restart_and_is_shared_with_another_process(sim_file: Path, gpu3: GpuInfo) -> None:
    script = (
        "import sys\n"
        "from remediate.gpu import SimulatedBackend\n"
        "SimulatedBackend(sys.argv[1]).set_power_limit(sys.argv[2], int(sys.argv[3]))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(sim_file), gpu3.uuid, "432000"], check=True, timeout=scaled(60), cwd=REPO
    )
    assert SimulatedBackend(sim_file).device(gpu3.uuid).power_limit_mw == 432_000


def test_concurrent_sets_from_threads_lose_no_update_and_leave_a_valid_file(sim: SimulatedBackend) -> None:
    gpus = sim.devices()
    rounds = 15
    errors: list[BaseException] = []

    def hammer(gpu: GpuInfo) -> None:
        backend = SimulatedBackend(sim.path)
        try:
            for step in range(rounds):
                backend.set_power_limit(gpu.uuid, 300_000 + gpu.index * 10_000 + step)
                backend.device(gpu.uuid)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(gpu,)) for gpu in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scaled(60))
    assert errors == []
    # Each thread wrote only its own GPU: a read-modify-write without the lock would have lost some of them.
    assert [g.power_limit_mw for g in sim.devices()] == [300_000 + g.index * 10_000 + rounds - 1 for g in gpus]
    assert sorted(p.name for p in sim.path.parent.iterdir()) == ["gpus.yaml", "gpus.yaml.lock"]


def test_concurrent_sets_from_processes_lose_no_update(sim: SimulatedBackend) -> None:
    gpus = sim.devices()[:4]
    script = (
        "import sys\n"
        "from remediate.gpu import SimulatedBackend\n"
        "backend = SimulatedBackend(sys.argv[1])\n"
        "for step in range(20):\n"
        "    backend.set_power_limit(sys.argv[2], int(sys.argv[3]) + step)\n"
    )
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(sim.path), gpu.uuid, str(300_000 + gpu.index * 1000)], cwd=REPO
        )
        for gpu in gpus
    ]
    assert [child.wait(timeout=scaled(60)) for child in children] == [0, 0, 0, 0]
    assert [g.power_limit_mw for g in sim.devices()[:4]] == [300_000 + g.index * 1000 + 19 for g in gpus]


def test_a_json_file_works_the_same_and_stays_json(tmp_path: Path) -> None:
    backend = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.json", count=2))
    gpu = backend.devices()[1]
    backend.set_power_limit(gpu.uuid, 555_000)
    assert json.loads(backend.path.read_text())["devices"][1]["power_limit_mw"] == 555_000


def test_a_hand_written_file_gets_defaults_for_optional_fields(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(
        "devices:\n"
        "  - index: 0\n"
        "    uuid: GPU-11111111-2222-3333-4444-555555555555\n"
        "    pci_bus_id: '3b:00.0'\n"
        "    default_limit_mw: 400000\n"
        "    min_limit_mw: 100000\n"
        "    max_limit_mw: 450000\n"
    )
    gpu = SimulatedBackend(path).devices()[0]
    assert gpu.pci_bus_id == "00000000:3B:00.0"
    assert gpu.power_limit_mw == 400_000
    assert (gpu.power_usage_mw, gpu.temperature_c, gpu.processes, gpu.mig_uuids) == (None, None, (), ())


def test_mig_devices_resolve_to_their_parent(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    mig = "MIG-a1b2c3d4-0000-1111-2222-333344445555"
    sim.update_device(gpu3.uuid, mig_uuids=[mig])
    assert sim.parent_of_mig(mig) == gpu3.uuid
    assert sim.parent_of_mig(mig.upper()) == gpu3.uuid
    with pytest.raises(GpuNotFound):
        sim.parent_of_mig("MIG-ffffffff-0000-1111-2222-333344445555")


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("[]", "expected a mapping"),
        ("devices: nope", "devices"),
        ("devices: [{index: 0}]", "uuid"),
        ("devices: [{index: 0, uuid: GPU-1, default_limit_mw: 5, min_limit_mw: 1}]", "max_limit_mw is required"),
        ("devices: [{index: 0, uuid: GPU-1, default_limit_mw: 9, min_limit_mw: 1, max_limit_mw: 5}]", "min_limit_mw"),
        (
            "devices: [{index: 0, uuid: GPU-1, pci_bus_id: 18:00.0,"
            " default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1}]",
            "quoted",
        ),
        (
            "devices: [{index: 0, uuid: GPU-1, default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1, fail: {set: x}}]",
            "unknown operation",
        ),
        (
            "devices: [{index: 0, uuid: GPU-1, default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1, colour: red}]",
            "unknown keys",
        ),
        (
            "devices: [{index: 0, uuid: GPU-1, default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1},"
            " {index: 0, uuid: GPU-2, default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1}]",
            "two devices have index",
        ),
        (
            "devices: [{index: 0, uuid: GPU-1, default_limit_mw: 1, min_limit_mw: 1, max_limit_mw: 1,"
            " locked_gpu_clocks_mhz: [1980, 1410]}]",
            "locked_gpu_clocks_mhz must be",
        ),
        ("devices: [", "not valid YAML"),
    ],
)
def test_a_bad_file_is_a_config_error_naming_the_file_and_the_field(
    tmp_path: Path, content: str, complaint: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=complaint) as caught:
        SimulatedBackend(path)
    assert str(path) in str(caught.value)


def test_a_clock_reset_unlocks_both_clocks_of_that_gpu_only(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    for uuid in (gpu3.uuid, sim_uuid(sim, 2)):
        sim.update_device(uuid, locked_gpu_clocks_mhz=[1980, 1980], locked_memory_clocks_mhz=[2619, 2619])
    sim.reset_locked_clocks(gpu3.uuid.lower())
    assert SimulatedBackend(sim.path).locked_clocks(gpu3.uuid) == {"gpu_mhz": None, "memory_mhz": None}
    assert sim.locked_clocks(sim_uuid(sim, 2)) == {"gpu_mhz": (1980, 1980), "memory_mhz": (2619, 2619)}


def test_a_clock_reset_needs_root_and_honours_injected_failures(tmp_path: Path) -> None:
    backend = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=1, as_root=False))
    uuid = backend.devices()[0].uuid
    backend.update_device(uuid, locked_gpu_clocks_mhz=[1410, 1410])
    with pytest.raises(GpuNoPermission) as caught:
        backend.reset_locked_clocks(uuid)
    assert caught.value.code == 4
    backend.set_as_root(True)
    backend.update_device(uuid, fail={"reset_locked_clocks": {"error": "timeout", "times": 1}})
    with pytest.raises(RetryableGpuError):
        backend.reset_locked_clocks(uuid)
    assert backend.locked_clocks(uuid)["gpu_mhz"] == (1410, 1410)
    backend.reset_locked_clocks(uuid)
    assert backend.locked_clocks(uuid)["gpu_mhz"] is None


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        SimulatedBackend(tmp_path / "absent.yaml")


def test_a_bad_update_is_refused_and_leaves_the_file_alone(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    before = sim.path.read_text()
    with pytest.raises(ConfigError):
        sim.update_device(gpu3.uuid, power_limit_mw=5)
    with pytest.raises(ValueError, match="unknown device fields"):
        sim.update_device(gpu3.uuid, colour="red")
    assert sim.path.read_text() == before


def test_open_backend_builds_the_simulator_only_when_asked(sim_file: Path) -> None:
    assert isinstance(open_backend("simulated", simulator_file=sim_file), SimulatedBackend)
    assert isinstance(open_backend("nvml"), NvmlBackend)  # cheap: NVML is only touched on first use
    with pytest.raises(ConfigError, match="gpu_simulator_file"):
        open_backend("simulated")
    with pytest.raises(ConfigError, match="nvml, simulated"):
        open_backend("fake")


# --------------------------------------------------------------------------- clock locks and GPU reset


def test_a_clock_lock_must_be_a_range_of_supported_clocks_like_nvml(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    for low, high in ((345, 1501), (300, 1500), (345, 2100), (1500, 1200)):
        with pytest.raises(GpuInvalidArgument, match="not a range of supported graphics clocks") as caught:
            sim.lock_gpu_clocks(uuid, low, high)
        assert caught.value.code == 2
    assert sim.clocks(uuid).locked_graphics_mhz is None
    sim.lock_gpu_clocks(uuid, 345, 1500)
    state = sim.clocks(uuid)
    assert (state.locked_graphics_mhz, state.graphics_mhz, state.lock_known) == ((345, 1500), 1500, True)
    assert SimulatedBackend(sim.path).clocks(uuid).locked_graphics_mhz == (345, 1500)  # in the file, for every reader


def test_without_root_clock_changes_and_resets_are_no_permission_while_reads_work(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, processes=[])
    sim.set_as_root(False)
    for call in (
        lambda: sim.lock_gpu_clocks(uuid, 345, 1500),
        lambda: sim.unlock_gpu_clocks(uuid),
        lambda: sim.reset_gpu(uuid),
    ):
        with pytest.raises(GpuNoPermission) as caught:
            call()
        assert caught.value.code == 4
    assert sim.clocks(uuid).max_graphics_mhz == 1980
    assert sim.memory_health(uuid).remapped_rows_pending is False
    assert sim.reset_count(uuid) == 0


def test_a_gpu_without_supported_clocks_cannot_lock_or_unlock_them_even_as_non_root(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, supported_graphics_clocks_mhz=None)
    sim.set_as_root(False)  # NVML answers NOT_SUPPORTED before it looks at permissions
    for call in (lambda: sim.lock_gpu_clocks(uuid, 345, 1500), lambda: sim.unlock_gpu_clocks(uuid)):
        with pytest.raises(GpuNotSupported) as caught:
            call()
        assert caught.value.code == 3
    assert sim.clocks(uuid).supported_graphics_mhz == ()


def test_unlocking_the_graphics_clock_leaves_a_memory_clock_lock(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, locked_gpu_clocks_mhz=[345, 1500], locked_memory_clocks_mhz=[2619, 2619])
    sim.unlock_gpu_clocks(uuid)
    assert sim.locked_clocks(uuid) == {"gpu_mhz": None, "memory_mhz": (2619, 2619)}


def test_a_reset_is_refused_in_use_while_processes_or_mig_instances_are_on_the_gpu(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    with pytest.raises(GpuResetRefused, match="in use by processes 4200") as caught:
        sim.reset_gpu(uuid)
    assert caught.value.code == 19
    assert not isinstance(caught.value, RetryableActionError)  # a busy GPU does not free itself: no retry
    sim.update_device(uuid, processes=[], mig_uuids=["MIG-11111111-2222-3333-4444-555555555555"])
    with pytest.raises(GpuResetRefused, match="MIG instances exist on it"):
        sim.reset_gpu(uuid)
    assert sim.reset_count(uuid) == 0


def test_a_reset_puts_defaults_back_applies_pending_memory_repairs_and_counts(sim: SimulatedBackend) -> None:
    first, second = sim.devices()[:2]
    sim.update_device(
        first.uuid,
        processes=[],
        power_limit_mw=450_000,
        locked_gpu_clocks_mhz=[345, 1200],
        locked_memory_clocks_mhz=[2619, 2619],
        retired_pages={"single_bit": 4, "double_bit": 2, "pending": True},
        remapped_rows={"correctable": 1, "uncorrectable": 5, "pending": True, "failure": True},
    )
    sim.reset_gpu(first.uuid)
    sim.reset_gpu(first.uuid)
    after = SimulatedBackend(sim.path)
    assert after.device(first.uuid).power_limit_mw == 700_000
    assert after.locked_clocks(first.uuid) == {"gpu_mhz": None, "memory_mhz": None}
    health = after.memory_health(first.uuid)
    assert (health.retired_pages_single_bit, health.retired_pages_double_bit, health.retired_pages_pending) == (
        4,
        2,
        False,
    )
    assert (
        health.remapped_rows_correctable,
        health.remapped_rows_uncorrectable,
        health.remapped_rows_pending,
        health.remapped_rows_failure,
    ) == (1, 5, False, True)  # a remap failure stays: only a repair of the board clears it
    assert after.reset_count(first.uuid) == 2
    assert after.reset_count(second.uuid) == 0


def test_a_lost_gpu_fails_the_new_calls_too_and_injected_failures_count_down(sim: SimulatedBackend) -> None:
    first, second = sim.devices()[:2]
    sim.update_device(first.uuid, lost=True)
    for call in (
        lambda: sim.clocks(first.uuid),
        lambda: sim.memory_health(first.uuid),
        lambda: sim.reset_gpu(first.uuid),
    ):
        with pytest.raises(GpuLost):
            call()
    sim.update_device(second.uuid, processes=[], fail={"reset_gpu": {"error": "timeout", "times": 1}})
    with pytest.raises(RetryableGpuError):
        sim.reset_gpu(second.uuid)
    sim.reset_gpu(second.uuid)
    assert sim.reset_count(second.uuid) == 1


def test_mig_and_nvlink_state_as_nvml_reports_it(sim: SimulatedBackend) -> None:
    uuid = sim.devices()[0].uuid
    assert sim.reset_state(uuid).to_dict() == {
        "mig_mode": "disabled",
        "mig_devices": [],
        "active_nvlinks": "not supported",
        "nvlink_peers": [],
        "nvlink_gpu_peers": [],
        "persistence_mode": "on",
    }
    sim.update_device(
        uuid,
        nvlinks=[
            {"link": 2, "peer": "0000:2a:00.0", "peer_type": "gpu"},
            {"link": 3, "peer": "0000:2a:00.0", "peer_type": "gpu"},
        ],
    )
    state = sim.reset_state(uuid)
    assert state.active_nvlinks == (2, 3)
    assert state.nvlink_gpu_peers == ("00000000:2A:00.0",)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"supported_graphics_clocks_mhz": [345, -1]}, "supported_graphics_clocks_mhz must be a list of positive"),
        ({"retired_pages": {"single": 1}}, "retired_pages must be a mapping of single_bit, double_bit, pending"),
        ({"remapped_rows": {"pending": "yes"}}, "pending must be true or false"),
        ({"mig_enabled": "on"}, "mig_enabled must be true or false"),
        ({"nvlinks": [{"peer": "0000:2a:00.0"}]}, "an NVLink is a mapping of link"),
        ({"nvlinks": [{"link": 0, "peer_type": "bridge"}]}, "peer_type must be gpu or switch"),
        ({"reset_count": -1}, "reset_count must be a non-negative integer"),
        ({"persistence_mode": 1}, "persistence_mode must be true or false"),
        ({"other_clients": "dcgm"}, "other_clients must be a list of names"),
    ],
)
def test_bad_clock_health_and_link_fields_are_refused_naming_the_field(
    sim: SimulatedBackend, change: dict, message: str
) -> None:
    uuid = sim.devices()[0].uuid
    with pytest.raises(ConfigError, match=message):
        sim.update_device(uuid, **change)
    assert sim.clocks(uuid).max_graphics_mhz == 1980  # the file is unchanged


@pytest.mark.parametrize("preset", sorted(simfile.PRESETS))
def test_every_preset_example_loads_as_the_example_it_documents(tmp_path: Path, preset: str) -> None:
    node = simfile.PRESETS[preset]
    path = tmp_path / "gpus.yaml"
    path.write_text(simfile.example_text(preset))

    gpus = SimulatedBackend(path).devices()

    assert simfile.read_state(path).raw == simfile.example(node.count, as_root=True, model=node.model)
    assert [g.name for g in gpus] == [node.model.name] * node.count
    assert all(g.min_limit_mw <= g.power_usage_mw <= g.power_limit_mw == g.max_limit_mw for g in gpus)
