"""The shipped disk rules pass promtool, and the alerts they fire are handled by the shipped disk-full playbook."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.alerts import parse_notification
from remediate.engine import Engine
from remediate.playbooks import load_directory, load_playbooks
from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import PROMTOOL
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alertmanager" / "rules" / "disk.rules.yml"
RULES_TEST = ROOT / "alertmanager" / "rules" / "disk.rules.test.yml"


def _promtool(*args: str) -> str:
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=scaled(60), check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed (rc={result.returncode}):\n{output}"
    return output


@pytest.mark.integration
def test_promtool_check_rules_accepts_the_disk_rules() -> None:
    assert "SUCCESS: 2 rules found" in _promtool("check", "rules", str(RULES))


@pytest.mark.integration
def test_promtool_test_rules_passes_the_disk_rule_unit_tests() -> None:
    assert "SUCCESS" in _promtool("test", "rules", str(RULES_TEST))


def _expected_alerts() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    found = []
    for case in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                found.append((check["alertname"], alert["exp_labels"], alert.get("exp_annotations", {})))
    return found


def test_the_rule_unit_tests_expect_both_severities() -> None:
    assert {labels["severity"] for _, labels, _ in _expected_alerts()} == {"warning", "critical"}


def test_every_disk_alert_the_rules_fire_is_cleaned_by_the_shipped_playbook_for_its_mountpoint() -> None:
    registry = default_registry()
    engine = Engine(store=None, playbooks=load_playbooks(ROOT / "playbooks", registry), registry=registry)
    for alertname, labels, notes in _expected_alerts():
        payload: dict[str, Any] = alert_payload(alertname, labels=labels, annotations=notes)
        (alert,) = parse_notification(notification_payload(payload)).alerts
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert "disk-full" in evaluations, f"{labels} not handled: {sorted(evaluations)}"
        evaluation = evaluations["disk-full"]
        assert evaluation.error is None
        assert evaluation.target == "node-a"
        (step,) = evaluation.steps
        assert step.spec.action == "disk.cleanup"
        assert step.params["mountpoint"] == labels["mountpoint"]
        assert step.params["free_percent"] == 15.0
        assert step.params["missing_policy"] == "skip"


def test_the_shipped_playbooks_still_validate_with_the_disk_playbook() -> None:
    playbooks, errors = load_directory(ROOT / "playbooks", default_registry())
    assert errors == []
    assert "disk-full" in {p.name for p in playbooks}
