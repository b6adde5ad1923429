"""The agent's GPU fault watcher (remediate.agent.gpu_faults) on the simulator's events, through the same
`open_events` capability NVML has: an XID event becomes one alert posted to AlertManager's v2 API with the
labels the shipped playbook matches; a lost GPU alerts once; application XIDs do not; stop ends it.

AlertManager here is a recorder of what is POSTed (tests/e2e/test_gpu_fault_path.py runs the real one).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from remediate.agent.gpu_faults import FaultAlerts, FaultWatcher
from remediate.gpu import SimulatedBackend, capability
from tests.support.realsystems import WebhookRecorder, free_port
from tests.support.waiting import scaled, wait_until

NODE = "gpu-node-07"


@pytest.fixture
def gpus(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=4))


@pytest.fixture
def alertmanager() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/api/v2/alerts") as recorder:
        yield recorder


def watcher_for(gpus: SimulatedBackend, url: str, **config: object) -> FaultWatcher:
    watch = capability(gpus, "open_events", doing="watch")()
    settings = FaultAlerts(url=url, node=NODE, resolve_after=600.0, **config)  # type: ignore[arg-type]
    return FaultWatcher(watch, settings, wait_seconds=0.05)


@pytest.fixture
def watching(gpus: SimulatedBackend, alertmanager: WebhookRecorder) -> Iterator[FaultWatcher]:
    watcher = watcher_for(gpus, alertmanager.url.removesuffix("/api/v2/alerts"), token="t" * 32).start()
    yield watcher
    watcher.stop()


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_an_xid_event_is_posted_as_one_alert_the_shipped_playbook_matches(
    gpus: SimulatedBackend, alertmanager: WebhookRecorder, watching: FaultWatcher
) -> None:
    gpu = gpus.devices()[2]
    gpus.inject_event(gpu.uuid, xid=79)

    request = alertmanager.wait_for()
    assert request.method == "POST" and request.path == "/api/v2/alerts"
    assert request.header("Authorization") == "Bearer " + "t" * 32
    (alert,) = request.json
    labels = alert["labels"]
    occurrence = labels.pop("occurrence")
    assert labels == {
        "alertname": "GPUXidCritical",  # playbooks/gpu-xid-quarantine.yaml matches it with severity=critical
        "severity": "critical",
        "source": "nvml",
        "node": NODE,
        "UUID": gpu.uuid,
        "gpu": "2",
        "xid": "79",
        "event": "xid",
    }
    assert occurrence
    assert (_time(alert["endsAt"]) - _time(alert["startsAt"])).total_seconds() == 600.0
    assert NODE in alert["annotations"]["summary"] and "XID 79" in alert["annotations"]["summary"]
    wait_until(lambda: watching.posted == 1, 5)
    assert len(alertmanager.requests) == 1


def test_each_fault_is_its_own_alert_and_application_xids_are_not_alerts(
    gpus: SimulatedBackend, alertmanager: WebhookRecorder, watching: FaultWatcher
) -> None:
    uuid = gpus.devices()[0].uuid
    gpus.inject_event(uuid, xid=13)  # a graphics engine exception: kills a process, not the node
    gpus.inject_event(uuid, xid=48)
    gpus.inject_event(uuid, "double_bit_ecc")
    gpus.inject_event(uuid, xid=48)

    wait_until(lambda: len(alertmanager.requests) >= 3, 5)
    alerts = [r.json[0]["labels"] for r in alertmanager.requests]
    assert [(a["xid"], a["event"]) for a in alerts] == [("48", "xid"), ("48", "double_bit_ecc"), ("48", "xid")]
    assert len({a["occurrence"] for a in alerts}) == 3  # the same XID twice: two alerts, not one re-sent


def test_a_gpu_that_fell_off_the_bus_alerts_once_while_it_stays_lost(
    gpus: SimulatedBackend, alertmanager: WebhookRecorder, watching: FaultWatcher
) -> None:
    gpu = gpus.devices()[1]
    gpus.update_device(gpu.uuid, lost=True)

    request = alertmanager.wait_for()
    labels = request.json[0]["labels"]
    assert (labels["event"], labels["xid"], labels["UUID"], labels["gpu"]) == ("gpu_lost", "79", gpu.uuid, "1")
    other = next(u for u in _uuids(gpus) if u != gpu.uuid)  # devices() would fail: one GPU is lost
    gpus.inject_event(other, xid=74)
    alertmanager.wait_for(lambda r: r.json[0]["labels"]["xid"] == "74")
    assert [r.json[0]["labels"]["event"] for r in alertmanager.requests] == ["gpu_lost", "xid"]


def _uuids(gpus: SimulatedBackend) -> list[str]:
    return [d["uuid"] for d in yaml.safe_load(gpus.path.read_text())["devices"]]


def test_posts_are_retried_while_alertmanager_cannot_be_reached(
    gpus: SimulatedBackend, alertmanager: WebhookRecorder
) -> None:
    alertmanager.status = 503
    watcher = watcher_for(gpus, alertmanager.url.removesuffix("/api/v2/alerts")).start()
    try:
        gpus.inject_event(_uuids(gpus)[0], xid=95)
        alertmanager.wait_for(after=1)  # refused once, asked again
        alertmanager.status = 200
        wait_until(lambda: watcher.posted == 1, 10)
        assert {r.json[0]["labels"]["occurrence"] for r in alertmanager.requests} == {
            alertmanager.requests[0].json[0]["labels"]["occurrence"]
        }
    finally:
        watcher.stop()


def test_stop_ends_both_threads_even_while_a_post_is_being_retried(gpus: SimulatedBackend) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # connection refused: retried until stop
    watcher = watcher_for(gpus, nobody).start()
    gpus.inject_event(_uuids(gpus)[0], xid=79)
    wait_until(lambda: watcher.posting, 5)
    watcher.stop(timeout=scaled(5))
    assert not watcher.alive
    assert watcher.posted == 0


def test_the_agent_refuses_to_start_watching_where_the_gpus_cannot_be_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    from remediate.agent.server import start_fault_watcher
    from remediate.config.settings import Settings
    from remediate.errors import ConfigError
    from remediate.gpu import NvmlUnavailable

    def no_driver() -> None:
        raise NvmlUnavailable("NVML error 12 (NVML Shared Library Not Found)")

    monkeypatch.setattr("remediate.gpu.nvml.load_nvml", no_driver)

    off = Settings.of(gpu_backend="nvml")
    assert start_fault_watcher(off, NODE) is None  # off by default: NVML is not even opened
    asked = Settings.of(gpu_backend="nvml", gpu_events_alertmanager_url="http://127.0.0.1:9093")
    with pytest.raises(ConfigError, match="gpu_events_alertmanager_url is set but this node's GPUs cannot be watched"):
        start_fault_watcher(asked, NODE)


def test_a_malformed_alertmanager_url_is_refused_naming_the_setting() -> None:
    from remediate.config.settings import FLAT

    with pytest.raises(ValueError, match="gpu_events_alertmanager_url must be an absolute http"):
        FLAT["gpu_events_alertmanager_url"]("alertmanager:9093")


def test_the_agent_reads_gpu_health_beside_the_fault_watch_unless_the_poll_is_off(gpus: SimulatedBackend) -> None:
    from remediate.agent.server import start_fault_watcher
    from remediate.config.settings import Settings

    nobody = f"http://127.0.0.1:{free_port()}"
    common = {"gpu_backend": "simulated", "gpu_simulator_file": str(gpus.path), "gpu_events_alertmanager_url": nobody}
    polled = start_fault_watcher(Settings.of(**common, gpu_health_slowdown_polls=4), NODE)
    off = start_fault_watcher(Settings.of(**common, gpu_health_poll_interval=0.0), NODE)
    assert polled is not None and off is not None
    try:
        assert polled.health is not None and off.health is None
        scan, tracker = polled.health
        assert (tracker.node, tracker.policy.poll_seconds, tracker.policy.slowdown_polls) == (NODE, 60.0, 4)
        assert [g.uuid for g in scan()] == [d.uuid for d in gpus.devices()]
        assert "gpu-health-poll" in {t.name for t in polled._threads}
    finally:
        polled.stop()
        off.stop()
