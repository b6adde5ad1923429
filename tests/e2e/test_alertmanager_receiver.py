"""alertmanager/alertmanager.yml is a complete receiver config for remediate, checked with the real amtool.

Its route sends exactly the alerts the shipped playbooks match to the remediate webhook, with the bearer
token and resolved notifications, on timings fit for remediation; everything else keeps going to the
default receiver.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from remediate.config.durations import parse_duration
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "alertmanager" / "alertmanager.yml"


def _config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def _remediate_route() -> dict:
    (route,) = [r for r in _config()["route"]["routes"] if r["receiver"] == "remediate"]
    return route


def _routed_alertnames() -> set[str]:
    (matcher,) = _remediate_route()["matchers"]
    name, _, pattern = matcher.partition("=~")
    assert name == "alertname"
    return set(pattern.strip('"').split("|"))


def _playbook_alertnames() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "playbooks").glob("*.yaml"):
        alertname = yaml.safe_load(path.read_text())["match"]["alertname"]
        names.update([alertname] if isinstance(alertname, str) else alertname)
    return names


def _climbing_holds_for() -> list[float]:
    """holds_for of every rung of the shipped ladders that has a rung above it (a re-send may climb from it)."""
    windows = []
    for path in (ROOT / "playbooks").glob("*.yaml"):
        rungs = yaml.safe_load(path.read_text()).get("escalate") or []
        windows += [parse_duration(rung["holds_for"]).total_seconds() for rung in rungs[:-1]]
    assert windows, "the shipped playbooks have ladders"
    return windows


def _amtool_routes(*labels: str) -> str:
    result = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={CONFIG}", *labels],
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_amtool_check_config_accepts_it() -> None:
    result = subprocess.run(["amtool", "check-config", str(CONFIG)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_route_sends_exactly_the_alerts_of_the_shipped_playbooks() -> None:
    assert _routed_alertnames() == _playbook_alertnames()


@pytest.mark.parametrize("alertname", sorted(_playbook_alertnames()))
def test_amtool_routes_each_playbook_alert_to_remediate(alertname: str) -> None:
    assert _amtool_routes(f"alertname={alertname}", "Hostname=gpu-node-1", "severity=critical") == "remediate"


def test_other_alerts_stay_with_the_default_receiver() -> None:
    assert _amtool_routes("alertname=KubeletDown", "severity=critical") == "default"


def test_the_receiver_sends_resolved_alerts_with_the_bearer_token() -> None:
    (receiver,) = [r for r in _config()["receivers"] if r["name"] == "remediate"]
    (webhook,) = receiver["webhook_configs"]
    assert webhook["url"].endswith("/webhook")
    assert webhook["send_resolved"] is True
    assert webhook["max_alerts"] == 0
    assert webhook["http_config"]["authorization"]["type"] == "Bearer"
    assert webhook["http_config"]["authorization"]["credentials_file"]


def test_the_timings_suit_remediation() -> None:
    route = _remediate_route()
    group_wait = parse_duration(route["group_wait"]).total_seconds()
    group_interval = parse_duration(route["group_interval"]).total_seconds()
    repeat_interval = parse_duration(route["repeat_interval"]).total_seconds()
    assert 1 <= group_wait <= 30  # starts within seconds, still collects an HA peer's copy
    assert group_wait <= group_interval <= 300  # resolved alerts (on_resolved) arrive within minutes
    # A ladder climbs on the re-send of an alert still firing `holds_for` after its rung: re-sent at least that
    # often, and not much more often (re-sends of other alerts are recorded as duplicates).
    assert 300 <= repeat_interval <= min(_climbing_holds_for())
    assert route["continue"] is True
    # Groups never mix two nodes, GPUs or filesystems.
    assert {"Hostname", "hostname", "node", "instance", "UUID", "mountpoint"} <= set(route["group_by"])
