"""The shipped Prometheus rules (alertmanager/rules/) pass promtool, and the GPU alerts feed the shipped playbooks.

``promtool check rules`` checks every ``*.rules.yml``; ``promtool test rules`` runs every unit-test
file next to them (input series -> expected alerts with their labels and annotations). Then every
alert the GPU unit tests (gpu.rules.test.yml) expect is turned into an AlertManager notification and
judged by the engine with the shipped playbooks: the GPU playbooks must match it, resolve the node
from ``Hostname`` or ``hostname`` and render the GPU from ``UUID``, firing and resolved.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.alerts import parse_notification
from remediate.engine import Engine
from remediate.playbooks import load_playbooks
from tests.support.realsystems import PROMTOOL
from tests.support.server import notification
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "alertmanager" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yml"))
TEST_FILES = sorted(RULES_DIR.glob("*.test.yml"))
GPU_RULES = RULES_DIR / "gpu.rules.yml"
GPU_TESTS = RULES_DIR / "gpu.rules.test.yml"

# Alert name -> the playbook that acts on it (the log playbook matches them all as well).
ACTING_PLAYBOOK = {
    "GPUTemperatureHigh": "gpu-overheat",
    "GPUThermalThrottling": "gpu-thermal-throttle",
}


def _promtool(*args: str) -> str:
    command = [PROMTOOL, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=scaled(60), check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} failed (rc={result.returncode}):\n{output}"
    return output


def test_every_shipped_rule_file_has_unit_tests() -> None:
    assert GPU_RULES in RULE_FILES
    assert {p.name.removesuffix(".rules.yml") for p in RULE_FILES} == {
        p.name.removesuffix(".rules.test.yml") for p in TEST_FILES
    }


def test_promtool_check_rules_accepts_every_shipped_rule_file() -> None:
    output = _promtool("check", "rules", *map(str, RULE_FILES))
    assert output.count("SUCCESS") == len(RULE_FILES), output
    assert "SUCCESS: 3 rules found" in _promtool("check", "rules", str(GPU_RULES))


def test_promtool_test_rules_passes_the_shipped_rule_unit_tests() -> None:
    output = _promtool("test", "rules", *map(str, TEST_FILES))
    assert output.count("SUCCESS") == len(TEST_FILES), output


def _expected_alerts() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(alertname, labels, annotations) of every alert the GPU rules' unit tests expect to fire."""
    found = []
    for case in yaml.safe_load(GPU_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                found.append((check["alertname"], alert["exp_labels"], alert.get("exp_annotations", {})))
    return found


def test_the_gpu_unit_tests_see_every_gpu_alert_fire() -> None:
    rules = [rule["alert"] for group in yaml.safe_load(GPU_RULES.read_text())["groups"] for rule in group["rules"]]
    assert sorted(rules) == ["GPUTemperatureCritical", "GPUTemperatureHigh", "GPUThermalThrottling"]
    assert {name for name, _, _ in _expected_alerts()} == set(rules)


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks(status: str) -> None:
    registry = default_registry()  # nvml, opened lazily: judging an alert never touches a GPU
    engine = Engine(store=None, playbooks=load_playbooks(ROOT / "playbooks", registry), registry=registry)
    checked: set[str] = set()
    for alertname, labels, alert_annotations in _expected_alerts():
        payload: dict[str, Any] = notification(alertname, labels, status=status)
        payload["alerts"][0]["annotations"] = alert_annotations
        (alert,) = parse_notification(payload).alerts
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        node = labels.get("Hostname") or labels["hostname"]
        assert "log-critical-alerts" in evaluations, f"{alertname} {labels} is not logged"
        acting = ACTING_PLAYBOOK.get(alertname)
        expected = {"log-critical-alerts"} | ({acting} if acting else set())
        assert set(evaluations) == expected, f"{alertname} {labels}: matched {sorted(evaluations)}"
        for evaluation in evaluations.values():
            assert evaluation.error is None, f"{evaluation.playbook.name}: {evaluation.error}"
            assert evaluation.target == node
        if acting:
            evaluation = evaluations[acting]
            # gpu-overheat is a ladder: its first rung (and that rung's undo) caps the power limit.
            steps = evaluation.rungs[0].steps if evaluation.rungs else evaluation.steps
            gpu_steps = [s for s in steps if s.spec.action.startswith("gpu.")]
            assert [s.spec.action for s in gpu_steps] == [
                "gpu.set_power_limit" if status == "firing" else "gpu.restore_power_limit"
            ]
            assert gpu_steps[0].params["gpu"] == labels["UUID"]
            checked.add(f"{alertname}/{'Hostname' if 'Hostname' in labels else 'hostname'}")
    assert {"GPUTemperatureHigh/Hostname", "GPUTemperatureHigh/hostname", "GPUThermalThrottling/Hostname"} <= checked
