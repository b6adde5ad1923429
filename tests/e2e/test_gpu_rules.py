"""The shipped Prometheus rules (alertmanager/rules/) pass promtool, and the GPU alerts feed the shipped playbooks.

``promtool check rules`` checks every ``*.rules.yml``; ``promtool test rules`` runs every unit-test
file next to them (input series -> expected alerts with their labels and annotations). Then every
alert the GPU unit tests (gpu.rules.test.yml) expect is turned into an AlertManager notification and
judged by the engine with the shipped playbooks: the GPU playbooks must match it, resolve the node
from ``hostname`` (dcgm.rules.yml writes it whichever exporter generation wrote ``Hostname``) and render the
GPU from ``UUID``, firing and resolved.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.support.realsystems import PROMTOOL
from tests.support.rules import RULES_DIR, as_alert, expected_alerts, rules_of, shipped_engine
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

RULE_FILES = sorted(RULES_DIR.glob("*.rules.yml"))
TEST_FILES = sorted(RULES_DIR.glob("*.test.yml"))
GPU_RULES = RULES_DIR / "gpu.rules.yml"

# Alert name -> the playbook that acts on it (the log playbook matches them all as well).
ACTING_PLAYBOOK = {
    "GPUTemperatureHigh": "gpu-overheat",
    "GPUThermalThrottling": "gpu-thermal-throttle",
}
TELLING_PLAYBOOK = {"GPUTemperatureCritical": "notify-oncall"}  # changes nothing: tells on-call


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


def test_the_gpu_unit_tests_see_every_gpu_alert_fire() -> None:
    rules = [rule["alert"] for rule in rules_of("gpu")]
    assert sorted(rules) == ["GPUTemperatureCritical", "GPUTemperatureHigh", "GPUThermalThrottling"]
    assert {name for name, _, _ in expected_alerts("gpu")} == set(rules)


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks(status: str) -> None:
    engine = shipped_engine()
    checked: set[str] = set()
    for alertname, labels, alert_annotations in expected_alerts("gpu"):
        alert = as_alert(alertname, labels, alert_annotations, status)
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert "Hostname" not in labels, f"{alertname}: the normalised series carry hostname only: {labels}"
        node = labels["hostname"]
        acting = ACTING_PLAYBOOK.get(alertname)
        expected = {acting} if acting else {TELLING_PLAYBOOK[alertname]}
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
            checked.add(alertname)
    assert checked == {"GPUTemperatureHigh", "GPUThermalThrottling"}
