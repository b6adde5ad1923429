"""`remediate gpu status`, the --gpu-backend / --gpu-simulator-file flags of serve and dry-run, and a
dry-run of a dcgm-style alert against a simulated GPU file: real files, click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediate.gpu import GpuInfo, NvmlBackend, NvmlUnavailable, SimulatedBackend
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli

pytestmark = pytest.mark.usefixtures("clean_environment")


GPU_PLAYBOOK = """\
name: gpu-overheat-try
description: Lower the power limit of a hot GPU; restore it when the alert resolves.
match:
  alertname: GPUTemperatureHigh
  labels: ['severity=~"warning|critical"']
target: node
cooldown: 15m
steps:
  - action: gpu.set_power_limit
    with: {gpu: "{{ labels.UUID }}", percent_of_default: 80, min_watts: 200}
on_resolved:
  - action: gpu.restore_power_limit
    with: {gpu: "{{ labels.UUID }}"}
"""


@pytest.fixture
def sim_file(tmp_path: Path) -> Path:
    return SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=3)


@pytest.fixture
def gpus(sim_file: Path) -> list[GpuInfo]:
    return SimulatedBackend(sim_file).devices()


def sim_args(sim_file: Path) -> list[Any]:
    return ["--gpu-backend", "simulated", "--gpu-simulator-file", sim_file]


def nvml_error() -> str | None:
    """NVML's error on this machine, or None where a real driver answers."""
    try:
        NvmlBackend().devices()
    except NvmlUnavailable as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- gpu status


def test_gpu_status_shows_a_table_of_the_simulated_gpus(sim_file: Path, gpus: list[GpuInfo]) -> None:
    sim = SimulatedBackend(sim_file)
    sim.set_power_limit(gpus[0].uuid, 560_000)
    sim.update_device(gpus[1].uuid, processes=[], temperature_c=None, power_usage_mw=None)
    sim.update_device(
        gpus[2].uuid,
        processes=[{"pid": 11, "used_memory_bytes": None}, {"pid": 12, "used_memory_bytes": 1}],
        temperature_c=91,
    )
    before = sim_file.read_bytes()

    result = cli("gpu", "status", *sim_args(sim_file))

    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    columns = "INDEX UUID NAME POWER W LIMIT W DEFAULT W MIN-MAX W TEMP PROCESSES"
    assert header.split() == columns.split()
    assert len(rows) == 3
    name = "NVIDIA H100 80GB HBM3"
    assert rows[0].split() == f"0 {gpus[0].uuid} {name} 310 560 700 200-700 45 C 4200".split()
    assert rows[1].split() == f"1 {gpus[1].uuid} {name} - 700 700 200-700 - -".split()
    assert rows[2].split()[-3:] == ["91", "C", "11,12"]
    assert sim_file.read_bytes() == before


def test_gpu_status_json_is_each_gpus_to_dict(sim_file: Path, gpus: list[GpuInfo]) -> None:
    result = cli("gpu", "status", "--json", *sim_args(sim_file))

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == [gpu.to_dict() for gpu in gpus]
    assert data[0]["power_limit_w"] == 700.0
    assert data[0]["processes"] == [{"pid": 4200, "used_memory_bytes": 60 * 1024**3, "name": "python"}]


def test_gpu_status_takes_the_backend_from_the_environment(
    sim_file: Path, gpus: list[GpuInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDIATE_GPU_BACKEND", "simulated")
    monkeypatch.setenv("REMEDIATE_GPU_SIMULATOR_FILE", str(sim_file))

    result = cli("gpu", "status", "--json")

    assert result.exit_code == 0, result.output
    assert [g["uuid"] for g in json.loads(result.stdout)] == [g.uuid for g in gpus]


def test_gpu_status_takes_the_backend_from_a_config_file(sim_file: Path, gpus: list[GpuInfo], tmp_path: Path) -> None:
    config = tmp_path / "remediate.yaml"
    config.write_text(f"gpu_backend: simulated\ngpu_simulator_file: {sim_file}\n", encoding="utf-8")

    result = cli("gpu", "status", "--json", "--config", config)

    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == len(gpus)


def test_gpu_status_flags_override_the_environment(sim_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMEDIATE_GPU_BACKEND", "simulated")
    monkeypatch.setenv("REMEDIATE_GPU_SIMULATOR_FILE", str(sim_file))
    error = nvml_error()
    if error is None:
        pytest.skip("a real NVML answers on this machine")

    result = cli("gpu", "status", "--gpu-backend", "nvml")

    assert_one_line_error(result, error)


def test_gpu_status_without_nvml_is_one_clear_line_and_exit_2() -> None:
    error = nvml_error()
    result = cli("gpu", "status")

    if error is None:  # a machine with a driver: the real GPUs are listed instead
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("INDEX")
        return
    assert_one_line_error(result, "NVML", "libnvidia-ml.so.1", "simulated GPU backend explicitly")
    assert result.stderr.strip() == f"Error: {error}"


def test_gpu_status_simulated_without_a_file_says_which_setting_is_missing() -> None:
    assert_one_line_error(
        cli("gpu", "status", "--gpu-backend", "simulated"), "needs a device file", "gpu_simulator_file"
    )


def test_gpu_status_with_a_broken_simulator_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [{index: 0}]\n", encoding="utf-8")
    missing = tmp_path / "missing.yaml"

    assert_one_line_error(cli("gpu", "status", *sim_args(bad)), str(bad), "devices[0]")
    assert_one_line_error(cli("gpu", "status", *sim_args(missing)), str(missing), "cannot read")


def test_gpu_status_refuses_an_unknown_backend() -> None:
    result = cli("gpu", "status", "--gpu-backend", "fake")
    assert result.exit_code == 2
    assert "'fake' is not one of 'nvml', 'simulated'" in result.stderr


def test_gpu_status_with_a_lost_gpu_is_one_line(sim_file: Path, gpus: list[GpuInfo]) -> None:
    SimulatedBackend(sim_file).update_device(gpus[1].uuid, lost=True)
    assert_one_line_error(cli("gpu", "status", *sim_args(sim_file)), "NVML error 15 (GPU is lost)")


# --------------------------------------------------------------------------- dry-run of a GPU alert


@pytest.fixture
def playbook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The alerts name node-a: this host is node-a (a single host plans node steps only for itself).
    monkeypatch.setenv("REMEDIATE_NODE_NAME", "node-a")
    directory = tmp_path / "playbooks"
    directory.mkdir()
    (directory / "gpu-overheat-try.yaml").write_text(GPU_PLAYBOOK, encoding="utf-8")
    return directory


def dry_run_args(uuid: str, sim_file: Path, playbook_dir: Path, db: Path) -> list[Any]:
    return [
        "dry-run",
        "--alertname",
        "GPUTemperatureHigh",
        "--label",
        f"UUID={uuid}",
        "--label",
        "Hostname=node-a",
        "--label",
        "severity=warning",
        *sim_args(sim_file),
        "--playbooks",
        playbook_dir,
        "--database-url",
        f"sqlite:///{db}",
    ]


def test_dry_run_of_a_gpu_alert_shows_the_real_current_and_target_limits_and_writes_nothing(
    sim_file: Path, gpus: list[GpuInfo], playbook_dir: Path, tmp_path: Path
) -> None:
    hot = gpus[2]
    SimulatedBackend(sim_file).set_power_limit(hot.uuid, 650_000)  # the GPU's real current limit is not its default
    before = sim_file.read_bytes()
    db = tmp_path / "remediate.db"

    result = cli(*dry_run_args(hot.uuid, sim_file, playbook_dir, db))

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "alert GPUTemperatureHigh (firing" in out
    assert "playbook gpu-overheat-try -> target node-a, mode enforce" in out
    assert "decision: accepted" in out
    assert "step 0 " in out
    assert "[gpu.set_power_limit @ node]" in out
    assert '"current_w": 650.0' in out
    assert '"default_w": 700.0' in out
    assert '"min_w": 200.0' in out
    assert '"max_w": 700.0' in out
    assert '"target_w": 560.0' in out
    assert '"change": "650 W -> 560 W"' in out
    assert '"80% of the default 700 W"' in out
    assert f'"gpu": "{hot.uuid}"' in out
    assert out.strip().endswith("would run: yes")
    assert sim_file.read_bytes() == before
    assert not db.exists()


def test_dry_run_json_of_a_gpu_alert_carries_the_plan(
    sim_file: Path, gpus: list[GpuInfo], playbook_dir: Path, tmp_path: Path
) -> None:
    before = sim_file.read_bytes()

    result = cli(*dry_run_args(gpus[0].uuid.upper(), sim_file, playbook_dir, tmp_path / "none.db"), "--json")

    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["alerts"]
    (playbook,) = entry["playbooks"]
    (step,) = playbook["steps"]
    assert step["params"] == {
        "gpu": gpus[0].uuid.upper(),
        "percent_of_default": 80.0,
        "min_watts": 200.0,
        "allow_increase": False,
    }
    plan = step["plan"]
    assert plan["backend"] == "simulated"
    assert plan["would_change"] == 1
    (gpu,) = plan["gpus"]
    assert (gpu["gpu"], gpu["current_w"], gpu["target_w"]) == (gpus[0].uuid, 700.0, 560.0)
    assert sim_file.read_bytes() == before


def test_dry_run_of_a_gpu_not_on_this_node_shows_the_plan_error(
    sim_file: Path, playbook_dir: Path, tmp_path: Path
) -> None:
    result = cli(*dry_run_args("GPU-00000000-0000-0000-0000-000000000000", sim_file, playbook_dir, tmp_path / "x.db"))

    # The guards accept it, but a run whose plan fails cannot succeed: would run: no, exit 1.
    assert result.exit_code == 1, result.output
    assert "would run: no" in result.stdout
    assert "plan failed: GpuNotFound: no GPU GPU-00000000-0000-0000-0000-000000000000 on this node" in result.stdout


def test_dry_run_without_a_gpu_backend_flag_uses_nvml_never_the_simulator(
    sim_file: Path, gpus: list[GpuInfo], playbook_dir: Path, tmp_path: Path
) -> None:
    error = nvml_error()
    if error is None:
        pytest.skip("a real NVML answers on this machine")
    args = dry_run_args(gpus[0].uuid, sim_file, playbook_dir, tmp_path / "x.db")
    args.remove("--gpu-backend")
    args.remove("simulated")  # the file alone does not select the simulator

    result = cli(*args)

    assert result.exit_code == 1, result.output  # the plan fails: the run cannot succeed
    assert f"plan failed: NvmlUnavailable: {error}" in result.stdout


# --------------------------------------------------------------------------- serve


def test_serve_passes_the_gpu_flags_to_the_settings(sim_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import remediate.serve.launcher

    seen: list[Any] = []
    monkeypatch.setattr(remediate.serve.launcher, "run_server", seen.append)

    result = cli("serve", "--insecure-no-auth", *sim_args(sim_file))

    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert (settings.gpu.backend, settings.gpu.simulator_file) == ("simulated", sim_file)


def test_serve_refuses_to_start_with_the_simulated_backend_and_no_device_file(
    playbook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import remediate.serve.launcher

    def no_gunicorn(*args: Any) -> None:
        pytest.fail("the server started: preflight should have refused the settings")

    monkeypatch.setattr(remediate.serve.launcher, "_GunicornApp", no_gunicorn)

    result = cli(
        "serve",
        "--insecure-no-auth",
        "--gpu-backend",
        "simulated",
        "--playbooks",
        playbook_dir,
        "--database-url",
        f"sqlite:///{tmp_path / 'serve.db'}",
    )

    assert_one_line_error(result, "needs a device file", "gpu_simulator_file")


# --------------------------------------------------------------------------- gpu simulate init


@pytest.mark.parametrize(
    ("preset", "count", "name", "limit_mw", "min_mw"),
    [
        ("h100x8", 8, "NVIDIA H100 80GB HBM3", 700_000, 200_000),
        ("a100x4", 4, "NVIDIA A100-SXM4-80GB", 400_000, 100_000),
    ],
)
def test_simulate_init_writes_a_file_that_gpu_status_loads(
    tmp_path: Path, preset: str, count: int, name: str, limit_mw: int, min_mw: int
) -> None:
    path = tmp_path / "gpus.yaml"

    written = cli("gpu", "simulate", "init", path, "--preset", preset)

    assert written.exit_code == 0, written.output
    assert str(path) in written.stdout and "--gpu-simulator-file" in written.stdout
    status = cli("gpu", "status", "--json", *sim_args(path))
    assert status.exit_code == 0, status.output
    gpus = json.loads(status.stdout)
    assert [g["index"] for g in gpus] == list(range(count))
    assert {g["name"] for g in gpus} == {name}
    assert {(g["power_limit_mw"], g["default_limit_mw"], g["min_limit_mw"], g["max_limit_mw"]) for g in gpus} == {
        (limit_mw, limit_mw, min_mw, limit_mw)
    }
    assert len({g["uuid"] for g in gpus}) == count


def test_simulate_init_defaults_to_eight_h100s_and_comments_every_field(tmp_path: Path) -> None:
    from remediate.gpu import simfile

    path = tmp_path / "gpus.yaml"
    assert cli("gpu", "simulate", "init", path).exit_code == 0

    text = path.read_text()
    assert len(SimulatedBackend(path).devices()) == 8
    commented = {line.strip()[2:].split(":")[0] for line in text.splitlines() if line.strip().startswith("# ")}
    written = {key for device in simfile.read_state(path).raw["devices"] for key in device}
    # Every key written, the optional ones it leaves out and the failures it can inject are explained.
    assert written | {"as_root"} <= commented | {"as_root"}
    assert commented >= simfile.DEVICE_KEYS, simfile.DEVICE_KEYS - commented
    assert "milliwatts" in text and all(name in text for name in simfile.FAILURES)


def test_simulate_init_json_writes_a_file_that_loads(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"

    assert cli("gpu", "simulate", "init", path, "--preset", "a100x4").exit_code == 0

    assert len(json.loads(path.read_text())["devices"]) == 4
    assert len(SimulatedBackend(path).devices()) == 4


def test_simulate_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("mine\n")

    assert_one_line_error(cli("gpu", "simulate", "init", path), str(path), "exists", "--force")
    assert path.read_text() == "mine\n"

    assert cli("gpu", "simulate", "init", path, "--force", "--preset", "a100x4").exit_code == 0
    assert len(SimulatedBackend(path).devices()) == 4


def test_simulate_init_refuses_an_unknown_preset_naming_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"

    assert_one_line_error(cli("gpu", "simulate", "init", path, "--preset", "v100x2"), "v100x2", "h100x8", "a100x4")
    assert not path.exists()


def test_simulate_init_says_why_it_cannot_write(tmp_path: Path) -> None:
    assert_one_line_error(cli("gpu", "simulate", "init", tmp_path / "missing" / "gpus.yaml"), "cannot write")
