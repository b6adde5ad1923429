"""Silent degradations (remediate.agent.gpu_degradations) on the simulator's health reads: a downtrained PCIe
link fires GPUPcieDowntrained by gpu.health's own PCIe rule (width at any load, generation only under load),
HW slowdown fires GPUHwSlowdownPersistent only after K reads in a row, and each resolves once the GPU is clear.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.agent.gpu_degradations import DegradationPolicy, DegradationTracker
from remediate.gpu import SimulatedBackend

NODE = "gpu-node-07"
HEALTHY = {"pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}, "utilization_percent": 0}


@pytest.fixture
def gpus(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=4))


def health(gpus: SimulatedBackend, index: int, **changes: Any) -> str:
    uuid = gpus.devices()[index].uuid
    gpus.update_device(uuid, health={**HEALTHY, **changes})
    return uuid


def pcie(gen: int = 5, width: int = 16) -> dict[str, int]:
    return {"gen": gen, "max_gen": 5, "width": width, "max_width": 16}


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def poll(tracker: DegradationTracker, gpus: SimulatedBackend, now: float) -> list[dict[str, Any]]:
    return tracker.observe(gpus.health_scan(), now)


def test_a_link_at_x8_of_x16_fires_with_its_evidence_and_resolves_once_it_trains_back(
    gpus: SimulatedBackend,
) -> None:
    tracker = DegradationTracker(node=NODE, policy=DegradationPolicy(poll_seconds=60))
    assert poll(tracker, gpus, 1000.0) == []  # the example GPUs are healthy
    uuid = health(gpus, 2, pcie=pcie(width=8))

    (alert,) = poll(tracker, gpus, 1060.0)
    assert alert["labels"] == {
        "alertname": "GPUPcieDowntrained",
        "severity": "warning",
        "source": "nvml",
        "node": NODE,
        "UUID": uuid,
        "gpu": "2",
    }
    notes = alert["annotations"]
    assert notes["evidence"] == "pcie width x8 < max x16"
    assert (notes["pcie_width"], notes["pcie_gen"], notes["utilization"]) == ("x8 of x16", "5 of 5", "0%")
    assert NODE in notes["summary"] and "x8" in notes["summary"]
    assert _time(alert["endsAt"]) == 1060.0 + 3 * 60  # kept firing by the next polls' re-sends

    (again,) = poll(tracker, gpus, 1120.0)
    assert again["startsAt"] == alert["startsAt"] and _time(again["endsAt"]) == 1120.0 + 180

    health(gpus, 2, pcie=pcie())
    (cleared,) = poll(tracker, gpus, 1180.0)
    assert cleared["labels"] == alert["labels"] and cleared["startsAt"] == alert["startsAt"]
    assert _time(cleared["endsAt"]) == 1180.0  # endsAt now: AlertManager resolves it
    assert poll(tracker, gpus, 1240.0) == []


def test_a_lower_generation_fires_only_under_load_and_idle_does_not_clear_it(gpus: SimulatedBackend) -> None:
    tracker = DegradationTracker(node=NODE)
    health(gpus, 0, pcie=pcie(gen=1), utilization_percent=0)
    assert poll(tracker, gpus, 0.0) == []  # the driver lowers the generation at idle

    health(gpus, 0, pcie=pcie(gen=3), utilization_percent=90)
    (busy,) = poll(tracker, gpus, 60.0)
    assert busy["annotations"]["evidence"] == "pcie gen 3 < max gen 5 at 90% GPU utilization >= 50%"

    health(gpus, 0, pcie=pcie(gen=1), utilization_percent=0)
    (idle,) = poll(tracker, gpus, 120.0)  # idle cannot show the link trained back: still firing
    assert _time(idle["endsAt"]) > 120.0 and "the driver lowers the generation" in idle["annotations"]["evidence"]

    health(gpus, 0, pcie=pcie(gen=5), utilization_percent=90)
    (cleared,) = poll(tracker, gpus, 180.0)
    assert _time(cleared["endsAt"]) == 180.0


def test_hw_slowdown_fires_only_after_k_reads_in_a_row_and_clears_after_k_clean_ones(gpus: SimulatedBackend) -> None:
    tracker = DegradationTracker(node=NODE, policy=DegradationPolicy(poll_seconds=10, slowdown_polls=3))
    health(gpus, 1, clock_event_reasons=["hw_power_brake"])
    assert poll(tracker, gpus, 0.0) == [] and poll(tracker, gpus, 10.0) == []
    health(gpus, 1, clock_event_reasons=[])
    assert poll(tracker, gpus, 20.0) == []  # a clean read in between: the streak starts over
    health(gpus, 1, clock_event_reasons=["hw_slowdown", "hw_thermal"])
    assert poll(tracker, gpus, 30.0) == [] and poll(tracker, gpus, 40.0) == []

    (alert,) = poll(tracker, gpus, 50.0)
    assert alert["labels"]["alertname"] == "GPUHwSlowdownPersistent" and alert["labels"]["gpu"] == "1"
    notes = alert["annotations"]
    assert notes["clock_event_reasons"] == "hw_slowdown,hw_thermal"
    assert notes["persistence"] == "set on 3 consecutive reads 10 s apart"
    assert "['hw_slowdown', 'hw_thermal'] active" in notes["evidence"]

    health(gpus, 1, clock_event_reasons=[])
    for at in (60.0, 70.0):  # clean, not yet K clean: still firing, with the slow read's evidence
        (held,) = poll(tracker, gpus, at)
        assert held["annotations"] == notes and _time(held["endsAt"]) > at
    (cleared,) = poll(tracker, gpus, 80.0)
    assert _time(cleared["endsAt"]) == 80.0
    assert tracker.firing() == []


def test_software_limits_are_not_a_hw_slowdown_and_a_lost_gpu_raises_nothing_here(gpus: SimulatedBackend) -> None:
    tracker = DegradationTracker(node=NODE, policy=DegradationPolicy(slowdown_polls=1))
    health(gpus, 0, clock_event_reasons=["sw_power_cap", "sw_thermal", "gpu_idle"])
    gpus.update_device(gpus.devices()[3].uuid, lost=True)
    assert poll(tracker, gpus, 0.0) == []
