"""The shipped dcgm-exporter layer (alertmanager/rules/dcgm.rules.yml) in a real Prometheus: a hot GPU's alert
lives through a rolling exporter upgrade (legacy names and `Hostname` -> DCGM 4.7 names and `hostname`, both
scraped for a while) as ONE alert that never resolves; and a latched XID gauge (79 set once, never cleared)
fires GPUXidCritical once and lets it resolve, though the gauge still says 79.

Only the waits shrink: the GPU rules' `for`/`keep_firing_for`, and for the XID case the layer's 10m change
window and the XID rule's `for`/`keep_firing_for`; every expression is otherwise as shipped."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, WebhookRecorder, check_rules
from tests.support.rules import RULES_DIR, rules_of
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

UUID = "GPU-2d000000-0000-5000-8000-000000000000"
OLD = {"gpu": "2", "UUID": UUID, "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a"}
OLD_DRIVER = {"DCGM_FI_DRIVER_VERSION": "550.54.15"}
NEW = {"gpu": "2", "UUID": UUID, "modelName": "NVIDIA H100 80GB HBM3", "hostname": "node-a"}
NEW_DRIVER = {"DCGM_FI_SYSTEM_DRIVER_VERSION": "580.95.05"}
CHANGE_WINDOW = "6s"  # the layer's 10m window of a change of the last-XID gauge


def _write(directory: Path, name: str, groups: list[dict[str, Any]]) -> Path:
    path = directory / f"{name}.rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def _fast(name: str, waits: dict[str, str]) -> list[dict[str, Any]]:
    """The shipped groups of <name>.rules.yml, each alert's `for`/`keep_firing_for` replaced by `waits`."""
    groups = yaml.safe_load((RULES_DIR / f"{name}.rules.yml").read_text())["groups"]
    for group in groups:
        group["rules"] = [{**r, **waits} if "alert" in r else r for r in group["rules"]]
    return groups


def _alerts(prometheus: Prometheus, name: str) -> list[dict[str, Any]]:
    return [a for a in prometheus.alerts() if a["labels"]["alertname"] == name]


@pytest.fixture
def alertmanager(recorder: WebhookRecorder, start_alertmanager: Callable[..., AlertManager]) -> AlertManager:
    return start_alertmanager(recorder.url, group_wait="1s", group_interval="1s")


def test_a_hot_gpus_alert_lives_through_a_rolling_exporter_upgrade_as_one_alert(
    tmp_path: Path, alertmanager: AlertManager, watch_log: Callable[..., None]
) -> None:
    layer = RULES_DIR / "dcgm.rules.yml"
    gpu = _write(tmp_path, "gpu", _fast("gpu", {"for": "1s", "keep_firing_for": "3s"}))
    check_rules([layer, gpu])
    with (
        MetricsEndpoint() as exporter,
        Prometheus(
            tmp_path / "prometheus",
            scrape_targets=[exporter.target],
            rule_files=[layer, gpu],
            alertmanager_url=alertmanager.url,
        ) as prometheus,
    ):
        watch_log("prometheus", prometheus)
        exporter.set("DCGM_FI_DEV_GPU_TEMP", 90, {**OLD, **OLD_DRIVER})
        prometheus.wait_until_scraping(timeout=scaled(30))
        wait_until(
            lambda: [a["state"] for a in _alerts(prometheus, "GPUTemperatureHigh")] == ["firing"],
            scaled(30),
            interval=0.2,
            message="GPUTemperatureHigh never fired on the legacy exporter",
        )
        (before,) = _alerts(prometheus, "GPUTemperatureHigh")
        assert "Hostname" not in before["labels"] and before["labels"]["hostname"] == "node-a", before["labels"]

        # The new exporter starts next to the old one (both scraped), then the old one goes.
        exporter.set("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 91, {**NEW, **NEW_DRIVER})
        seen: list[list[dict[str, Any]]] = []
        deadline = time.monotonic() + scaled(6)
        while time.monotonic() < deadline:
            seen.append(_alerts(prometheus, "GPUTemperatureHigh"))
            time.sleep(0.2)
        exporter.remove("DCGM_FI_DEV_GPU_TEMP", {**OLD, **OLD_DRIVER})
        deadline = time.monotonic() + scaled(6)
        while time.monotonic() < deadline:
            seen.append(_alerts(prometheus, "GPUTemperatureHigh"))
            time.sleep(0.2)

        # One alert at every poll, the same labels, the same activeAt: never resolved, never a second one.
        assert all(len(alerts) == 1 for alerts in seen), [len(a) for a in seen]
        assert {(a[0]["state"], a[0]["activeAt"]) for a in seen} == {("firing", before["activeAt"])}
        assert all(a[0]["labels"] == before["labels"] for a in seen)
        (temp,) = prometheus.query(f'gpu:temp_celsius{{UUID="{UUID}"}}')
        assert temp["value"][1] == "91" and temp["metric"]["hostname"] == "node-a"  # the new exporter's value


def test_a_latched_xid_gauge_fires_once_and_resolves_while_it_still_reads_79(
    tmp_path: Path, alertmanager: AlertManager, watch_log: Callable[..., None]
) -> None:
    groups = yaml.safe_load((RULES_DIR / "dcgm.rules.yml").read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule["expr"] = (
                rule["expr"].replace("[10m]", f"[{CHANGE_WINDOW}]").replace("offset 10m", f"offset {CHANGE_WINDOW}")
            )
    assert any(f"[{CHANGE_WINDOW}]" in r["expr"] for g in groups for r in g["rules"])
    layer = _write(tmp_path, "dcgm", groups)
    assert {(r["for"], r["keep_firing_for"]) for r in rules_of("xid")} == {("1m", "30m")}
    xid = _write(tmp_path, "xid", _fast("xid", {"for": "1s", "keep_firing_for": "3s"}))
    check_rules([layer, xid])
    with (
        MetricsEndpoint() as exporter,
        Prometheus(
            tmp_path / "prometheus",
            scrape_targets=[exporter.target],
            rule_files=[layer, xid],
            alertmanager_url=alertmanager.url,
        ) as prometheus,
    ):
        watch_log("prometheus", prometheus)
        exporter.set("DCGM_FI_DEV_XID_ERRORS", 0, {**OLD, **OLD_DRIVER})
        prometheus.wait_until_scraping(timeout=scaled(30))
        time.sleep(scaled(7))  # the series is older than the change window: not "new"

        set_at = time.monotonic()
        exporter.set("DCGM_FI_DEV_XID_ERRORS", 79, {**OLD, **OLD_DRIVER})  # once, and never cleared
        states: list[tuple[float, str]] = []
        deadline = set_at + scaled(30)
        while time.monotonic() < deadline:
            alerts = _alerts(prometheus, "GPUXidCritical")
            assert len(alerts) <= 1, alerts
            states.append((round(time.monotonic() - set_at, 1), alerts[0]["state"] if alerts else "inactive"))
            time.sleep(0.2)
        (gauge,) = prometheus.query(f'gpu:xid_last{{UUID="{UUID}"}}')
        assert gauge["value"][1] == "79"  # still latched

    # inactive -> (pending) -> firing -> inactive, and it stays inactive: one incident.
    runs = [state for i, (_, state) in enumerate(states) if i == 0 or states[i - 1][1] != state]
    assert runs in (["inactive", "pending", "firing", "inactive"], ["inactive", "firing", "inactive"]), states
    fired = next(at for at, state in states if state == "firing")
    resolved = next(at for at, state in states if at > fired and state == "inactive")
    print(f"\nlatched XID 79: firing after {fired} s, resolved after {resolved} s, gauge still 79 at 30 s")
