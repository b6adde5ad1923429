"""The shipped training rules pass promtool; every alert their unit tests expect is handled by the shipped playbooks.

``promtool check rules`` / ``promtool test rules`` run on alertmanager/rules/training.rules*.yml;
then each alert the unit tests expect is judged by the engine with the shipped playbooks:
loss-spike or loss-nan must match it (and the log playbook), resolve the node, and plan the
rollback first and the lr cut second with the published defaults.
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
RULES = ROOT / "alertmanager" / "rules" / "training.rules.yml"
TESTS = ROOT / "alertmanager" / "rules" / "training.rules.test.yml"
ACTING = {"TrainingLossSpike": "loss-spike", "TrainingLossNaN": "loss-nan"}


def _promtool(*args: str) -> str:
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=scaled(60), check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed (rc={result.returncode}):\n{output}"
    return output


def test_promtool_accepts_the_training_rules_and_their_unit_tests_pass() -> None:
    assert "SUCCESS: 2 rules found" in _promtool("check", "rules", str(RULES))
    assert "SUCCESS" in _promtool("test", "rules", str(TESTS))


def _expected_alerts() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    found = []
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                found.append((check["alertname"], alert["exp_labels"], alert.get("exp_annotations", {})))
    return found


def test_the_unit_tests_see_both_alerts_fire() -> None:
    rules = [r["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]
    assert sorted(rules) == sorted(ACTING)
    assert {name for name, _, _ in _expected_alerts()} == set(ACTING)


def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks() -> None:
    registry = default_registry()
    engine = Engine(store=None, playbooks=load_playbooks(ROOT / "playbooks", registry), registry=registry)
    for alertname, labels, alert_annotations in _expected_alerts():
        payload: dict[str, Any] = notification(alertname, labels)
        payload["alerts"][0]["annotations"] = alert_annotations
        (alert,) = parse_notification(payload).alerts
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert set(evaluations) == {"log-critical-alerts", ACTING[alertname]}, f"{alertname} {labels}"
        evaluation = evaluations[ACTING[alertname]]
        assert evaluation.error is None, evaluation.error
        assert evaluation.target == labels["instance"].rsplit(":", 1)[0]
        steps = [(s.spec.action, s.params) for s in evaluation.steps]
        assert [action for action, _ in steps] == ["training.rollback", "training.scale_lr"]
        rollback, scale = steps[0][1], steps[1][1]
        assert rollback["checkpoint"] == "latest_good"
        if alertname == "TrainingLossSpike":
            assert (rollback["min_steps_back"], rollback["skip_batches"], scale["factor"]) == (100, 200, 0.5)
        else:
            assert (rollback["min_steps_back"], rollback["skip_batches"], scale["factor"]) == (0, 50, 0.9)
        assert scale["min_lr"] == 1e-6
