"""The doctor's walk of AlertManager's route tree, checked against AlertManager's own (`amtool config routes
test`, the real 0.25 Debian ships), and the repeat_interval each playbook's ladder needs."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.config.settings import Settings
from remediate.doctor import Status
from remediate.doctor.probe import Probe
from remediate.doctor.routing import check_routing, parse_route
from remediate.doctor.rules import Rule
from remediate.playbooks.loading import parse_playbook
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "alertmanager" / "alertmanager.yml"
AMTOOL = "/usr/bin/amtool"

TREE = {
    "route": {
        "receiver": "default",
        "repeat_interval": "2h",
        "routes": [
            {
                "receiver": "remediate",
                "matchers": ['alertname=~"GPU.*"'],
                "continue": True,
                "routes": [{"match": {"severity": "critical"}, "repeat_interval": "10m"}],
            },
            {"receiver": "pager", "match_re": {"severity": "critical|page"}},
            {"receiver": "team", "matchers": ['{team="ml", env!="dev"}']},
        ],
    },
    "receivers": [{"name": n} for n in ("default", "remediate", "pager", "team")],
}
LABEL_SETS = [
    {"alertname": "GPUTemperatureHigh", "severity": "warning"},
    {"alertname": "GPUTemperatureHigh", "severity": "critical"},
    {"alertname": "DiskFull", "severity": "page"},
    {"alertname": "DiskFull", "team": "ml", "env": "prod"},
    {"alertname": "DiskFull", "team": "ml", "env": "dev"},
    {"alertname": "GPUXidCritical", "source": "nvml"},
]


def amtool_receivers(config: Path, labels: Mapping[str, str]) -> list[str]:
    done = subprocess.run(
        [AMTOOL, "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True,
        text=True,
        timeout=scaled(20),
        check=True,
    )
    return done.stdout.strip().split(",")


@pytest.mark.parametrize("config", ["tree", "shipped"])
@pytest.mark.parametrize("labels", LABEL_SETS, ids=lambda labels: ",".join(f"{k}={v}" for k, v in labels.items()))
def test_the_walk_reaches_the_receivers_alertmanager_does(tmp_path: Path, config: str, labels: dict[str, str]) -> None:
    path = SHIPPED if config == "shipped" else tmp_path / "am.yml"
    if config == "tree":
        path.write_text(yaml.safe_dump(TREE))
    tree = parse_route(yaml.safe_load(path.read_text())["route"])
    assert [route.receiver for route in tree.match(labels)] == amtool_receivers(path, labels)


def test_children_inherit_the_receiver_and_repeat_interval_unless_they_set_their_own() -> None:
    tree = parse_route(TREE["route"])
    (critical,) = tree.match({"alertname": "GPUTemperatureHigh", "severity": "critical"})[:1]
    assert (critical.receiver, critical.repeat_interval.total_seconds(), critical.path) == (
        "remediate",
        600,
        "route.routes[0].routes[0]",
    )
    (warning, *_) = tree.match({"alertname": "GPUTemperatureHigh"})
    assert (warning.receiver, warning.repeat_interval.total_seconds()) == ("remediate", 7200)


class StatusOf(Probe):
    """A Probe answering /api/v2/status with `config` as AlertManager would (its config.original)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        self.original = yaml.safe_dump(dict(config))

    def get_json(self, url: str, *, params: dict[str, str] | None = None) -> Any:
        assert url == "http://am:9093/api/v2/status"
        return {"config": {"original": self.original}}


def shipped_with(**route_changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    config["route"]["routes"][0].update(route_changes)
    return config


def checks_of(config: Mapping[str, Any], playbook_file: str) -> dict[str, Any]:
    playbook = parse_playbook(
        yaml.safe_load((ROOT / "playbooks" / playbook_file).read_text()), default_registry(Settings())
    )
    rules = [Rule("GPUTemperatureHigh", "gpu.rules.yml", "x", (("severity", "warning"),))]
    here = lambda url: url == "http://127.0.0.1:9095/webhook"  # noqa: E731
    return {c.name: c for c in check_routing(StatusOf(config), "http://am:9093", [playbook], rules, here)}


def test_the_shipped_route_gives_the_shipped_ladder_its_repeat_interval() -> None:
    checks = checks_of(shipped_with(), "gpu-overheat.yaml")
    check = checks["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert check.status is Status.OK
    assert check.detail == "route.routes[0] -> remediate, repeat_interval 30m <= holds_for 30m"


def test_a_repeat_interval_over_the_shortest_holds_for_delays_the_climb() -> None:
    check = checks_of(shipped_with(repeat_interval="4h"), "gpu-overheat.yaml")[
        "routing: GPUTemperatureHigh (playbook gpu-overheat)"
    ]
    assert check.status is Status.WARN
    assert check.fix == "set repeat_interval: 30m (or less) on route.routes[0]"


def test_an_alert_the_routes_do_not_match_fails_naming_where_it_goes() -> None:
    config = shipped_with(matchers=['alertname=~"GPUXidCritical"'])
    check = checks_of(config, "gpu-overheat.yaml")["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert check.status is Status.FAIL
    assert check.detail == (
        "goes to default, not to this server (remediate): route.routes[0] -> remediate is not entered "
        "(alertname=~'GPUXidCritical')"
    )
    assert (
        check.fix
        == "make route.routes[0] match the alert (or put it first, with continue: true on the routes before it)"
    )


def test_send_resolved_false_fails_a_playbook_that_undoes() -> None:
    config = shipped_with()
    config["receivers"][1]["webhook_configs"][0]["send_resolved"] = False
    check = checks_of(config, "gpu-overheat.yaml")["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert check.status is Status.FAIL and "on_resolved steps never run" in check.detail


def test_a_hidden_webhook_url_is_a_warning_not_a_miss() -> None:
    config = shipped_with()
    config["receivers"][1]["webhook_configs"][0]["url"] = "<secret>"  # as a release that keeps the url secret shows it
    checks = checks_of(config, "gpu-overheat.yaml")
    assert checks["routing: receiver"].status is Status.WARN
    assert checks["routing: GPUTemperatureHigh (playbook gpu-overheat)"].status is Status.OK


def test_the_namespace_matcher_the_operator_adds_to_an_alertmanagerconfig_route_is_found_out() -> None:
    # prometheus-operator renders an AlertmanagerConfig's route with namespace="<its namespace>" first: GPU alerts
    # carry no namespace label, so the route is never entered.
    config = shipped_with(matchers=['namespace="gpu-ops"', 'alertname=~"GPUTemperatureHigh"'])
    check = checks_of(config, "gpu-overheat.yaml")["routing: GPUTemperatureHigh (playbook gpu-overheat)"]
    assert check.status is Status.FAIL
    assert check.detail == (
        "goes to default, not to this server (remediate): route.routes[0] -> remediate is not entered "
        "(namespace='gpu-ops')"
    )
    assert (
        check.fix
        == "drop the namespace matcher of route.routes[0] (the alert has no namespace label), or give the rule one"
    )
