"""End to end on a simulated GPU: real AlertManager 0.25 -> real ``remediate serve`` (gunicorn, 2 workers)
running the shipped ``playbooks/gpu-overheat.yaml`` -> the simulated GPU backend.

The server runs with ``REMEDIATE_GPU_BACKEND=simulated`` on a device file written by
``SimulatedBackend.write_example`` (8 H100-like GPUs: 700 W default and max, 200 W min).
What it did is read back twice: from ``GET /runs/<id>`` (the step results an operator sees) and
from the device file itself through a second ``SimulatedBackend`` (what the "driver" now holds).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.gpu.simulator import SimulatedBackend
from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = "gpu-overheat"
DEFAULT_MW = 700_000  # write_example's default (and current) limit
LOWERED_MW = 560_000  # 80% of the default, above both floors (200 W, 50% of default)

StartServer = Callable[..., RemediateServer]
StartAlertManager = Callable[..., AlertManager]


@pytest.fixture
def gpus(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml"))


@pytest.fixture
def server(start_server: StartServer, playbooks_dir: Path, gpus: SimulatedBackend) -> RemediateServer:
    shutil.copy(ROOT / "playbooks" / f"{PLAYBOOK}.yaml", playbooks_dir)
    return start_server(
        env={"REMEDIATE_GPU_BACKEND": "simulated", "REMEDIATE_GPU_SIMULATOR_FILE": str(gpus.path)},
    )


def _hot_gpu_labels(gpus: SimulatedBackend, index: int) -> dict[str, str]:
    gpu = gpus.devices()[index]
    # What the shipped GPUTemperatureHigh rule sends (see alertmanager/rules/gpu.rules.test.yml).
    return {
        "alertname": "GPUTemperatureHigh",
        "severity": "warning",
        "UUID": gpu.uuid,
        "gpu": str(gpu.index),
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.name,
        "Hostname": "node-a",
    }


def _step(run: dict[str, Any], name: str) -> dict[str, Any]:
    steps = {s["name"]: s for s in run["steps"]}
    assert name in steps, f"no step {name!r} in run {run['id']}: {sorted(steps)}"
    step: dict[str, Any] = steps[name]
    return step


def _fire_and_wait_until_lowered(
    server: RemediateServer, am: AlertManager, gpus: SimulatedBackend, labels: dict[str, str]
) -> dict[str, Any]:
    am.fire(labels, {"summary": f"GPU {labels['gpu']} on node-a is at 91 C"})
    entry = server.wait_for_run(
        lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK, alertname="GPUTemperatureHigh"
    )
    assert entry["decision"] == "accepted"
    assert entry["target"] == "node-a"
    run = server.run(entry["run_id"])
    assert run["status"] == "succeeded"
    assert [(s["name"], s["action"], s["status"]) for s in run["steps"]] == [
        ("lower-power-limit", "gpu.set_power_limit", "succeeded"),
        ("log-lowered", "log", "succeeded"),
    ]
    lower = _step(run, "lower-power-limit")
    assert lower["params"]["gpu"] == labels["UUID"]
    assert lower["params"]["percent_of_default"] == 80
    result = lower["result"]
    assert result["backend"] == "simulated"
    assert result["changed"] == 1
    (gpu,) = result["gpus"]
    assert gpu["gpu"] == labels["UUID"]
    assert gpu["index"] == int(labels["gpu"])
    assert gpu["outcome"] == "set"
    assert gpu["previous_w"] == DEFAULT_MW / 1000
    assert gpu["new_w"] == LOWERED_MW / 1000
    assert gpu["remembered_original_w"] == DEFAULT_MW / 1000
    assert gpu["change"] == "700 W -> 560 W"
    assert gpu["reasons"] == ["80% of the default 700 W"]
    # The "driver" holds the new limit; the other GPUs were not touched.
    limits = {g.uuid: g.power_limit_mw for g in gpus.devices()}
    assert limits.pop(labels["UUID"]) == LOWERED_MW
    assert set(limits.values()) == {DEFAULT_MW}
    assert "power limit now at most 80% of its default" in _step(run, "log-lowered")["result"]["logged"]
    return run


def _wait_for_resolved_run(server: RemediateServer) -> dict[str, Any]:
    entry = server.wait_for_run(
        lambda e: e["run"]["phase"] == "resolved", status="succeeded", playbook=PLAYBOOK, alertname="GPUTemperatureHigh"
    )
    assert entry["decision"] == "accepted"
    assert entry["alert_status"] == "resolved"
    run = server.run(entry["run_id"])
    assert [(s["name"], s["action"], s["status"]) for s in run["steps"]] == [
        ("restore-power-limit", "gpu.restore_power_limit", "succeeded"),
        ("log-restored", "log", "succeeded"),
    ]
    return run


def test_a_hot_gpu_gets_80_percent_of_its_default_limit_and_it_is_restored_when_the_alert_resolves(
    server: RemediateServer, start_alertmanager: StartAlertManager, gpus: SimulatedBackend
) -> None:
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    labels = _hot_gpu_labels(gpus, 3)

    fired = _fire_and_wait_until_lowered(server, am, gpus, labels)

    am.resolve(labels)
    run = _wait_for_resolved_run(server)
    result = _step(run, "restore-power-limit")["result"]
    assert result["restored"] == 1
    (gpu,) = result["gpus"]
    assert gpu["gpu"] == labels["UUID"]
    assert gpu["outcome"] == "restored"
    assert gpu["previous_w"] == LOWERED_MW / 1000
    assert gpu["new_w"] == DEFAULT_MW / 1000
    assert gpu["reason"] == f"restoring 700 W replaced by run {fired['id']}"
    assert gpus.device(labels["UUID"]).power_limit_mw == DEFAULT_MW
    assert {g.power_limit_mw for g in gpus.devices()} == {DEFAULT_MW}
    # Exactly one firing and one resolved run: AlertManager's re-sends were recorded as duplicates.
    assert [e["run"]["phase"] for e in server.runs(playbook=PLAYBOOK)] == ["firing", "resolved"]


def test_the_restore_leaves_a_limit_someone_else_changed_alone_and_says_why(
    server: RemediateServer, start_alertmanager: StartAlertManager, gpus: SimulatedBackend
) -> None:
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    labels = _hot_gpu_labels(gpus, 5)
    fired = _fire_and_wait_until_lowered(server, am, gpus, labels)

    # A person caps the GPU harder by hand while the alert is still firing.
    gpus.set_power_limit(labels["UUID"], 450_000)

    am.resolve(labels)
    run = _wait_for_resolved_run(server)
    result = _step(run, "restore-power-limit")["result"]
    assert result["restored"] == 0
    (gpu,) = result["gpus"]
    assert gpu["outcome"] == "left_alone"
    assert gpu["previous_w"] == 450
    assert "new_w" not in gpu
    assert gpu["reason"] == (
        f"left alone: the limit is 450 W, not the 560 W remediate set in run {fired['id']} — someone changed it since"
    )
    assert gpus.device(labels["UUID"]).power_limit_mw == 450_000


def test_a_uuid_label_all_from_alertmanager_is_rejected_and_changes_no_gpu(
    server: RemediateServer, start_alertmanager: StartAlertManager, gpus: SimulatedBackend
) -> None:
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    every = {**_hot_gpu_labels(gpus, 2), "UUID": "all"}  # what lowered 7 GPUs in the field

    am.fire(every, {"summary": "a label says all"})
    entry = server.wait_for_run(status="rejected", playbook=PLAYBOOK, alertname="GPUTemperatureHigh")

    assert "names every GPU of the node" in entry["reason"]
    assert server.run(entry["run_id"])["steps"] == []
    # The executor is live: a real hot GPU, sent after, is lowered; and it is the only GPU that changed.
    _fire_and_wait_until_lowered(server, am, gpus, _hot_gpu_labels(gpus, 6))
    assert sum(g.power_limit_mw != DEFAULT_MW for g in gpus.devices()) == 1


def test_a_gpu_still_hot_after_its_power_cap_gets_its_clocks_locked_and_the_resolve_undoes_both_top_down(
    start_server: StartServer, playbooks_dir: Path, start_alertmanager: StartAlertManager, gpus: SimulatedBackend
) -> None:
    """The shipped gpu-overheat ladder, with its first holds_for cut to seconds. AlertManager re-sends
    the alert that never resolves (repeat_interval); the re-send after holds_for climbs to the clock lock."""
    playbook = yaml.safe_load((ROOT / "playbooks" / f"{PLAYBOOK}.yaml").read_text())
    playbook["cooldown"] = "0s"
    playbook["escalate"][0]["holds_for"] = "3s"
    (playbooks_dir / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    server = start_server(env={"REMEDIATE_GPU_BACKEND": "simulated", "REMEDIATE_GPU_SIMULATOR_FILE": str(gpus.path)})
    am = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s", repeat_interval="1s")
    labels = _hot_gpu_labels(gpus, 4)
    max_mhz = gpus.clocks(labels["UUID"]).max_graphics_mhz
    assert max_mhz is not None and gpus.clocks(labels["UUID"]).locked_graphics_mhz is None

    capped = _fire_and_wait_until_lowered(server, am, gpus, labels)
    locked_entry = server.wait_for_run(lambda e: e.get("rung") == 2, status="succeeded", playbook=PLAYBOOK)

    locked = server.run(locked_entry["run_id"])
    assert capped["rung"] == 1 and locked["rung"] == 2
    assert locked["ladder"]["name"] == "lock-clocks" and "still firing" in locked["ladder"]["why"]
    assert [(s["name"], s["status"]) for s in locked["steps"]] == [
        ("lock-clocks", "succeeded"),
        ("log-locked", "succeeded"),
    ]
    low, high = gpus.clocks(labels["UUID"]).locked_graphics_mhz or (0, 0)
    assert high <= 0.7 * max_mhz and low <= high
    assert gpus.device(labels["UUID"]).power_limit_mw == LOWERED_MW  # the cap stays while the ladder climbs

    am.resolve(labels)
    entry = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="succeeded", playbook=PLAYBOOK)
    undo = server.run(entry["run_id"])
    assert [s["name"] for s in undo["steps"]] == ["unlock-clocks", "restore-power-limit", "log-restored"]
    assert "undoes rungs 2, 1" in entry["reason"]
    assert gpus.clocks(labels["UUID"]).locked_graphics_mhz is None
    assert gpus.device(labels["UUID"]).power_limit_mw == DEFAULT_MW
    ladder = server.get("/ladders", target="node-a")
    assert [(entry["playbook"], entry["rung"]) for entry in ladder["ladders"]] == [(PLAYBOOK, 2)]
