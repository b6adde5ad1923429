"""The GPU memory pressure and training throughput rules pass promtool; every alert their unit tests expect
is handled by the shipped playbooks, which plan training.command with the published params.

``promtool check rules`` / ``promtool test rules`` run on alertmanager/rules/training-resources.rules*.yml;
then each alert the unit tests expect is judged by the engine with every shipped playbook.
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
RULES = ROOT / "alertmanager" / "rules" / "training-resources.rules.yml"
TESTS = ROOT / "alertmanager" / "rules" / "training-resources.rules.test.yml"
ACTING = {
    "GPUMemoryPressure": ("gpu-memory-pressure", "reduce_batch_size", {"factor": 0.5}),
    "TrainingThroughputDrop": ("training-throughput-drop", "set_dataloader_workers", {"factor": 0.5}),
}


def _promtool(*args: str) -> str:
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=scaled(60), check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} failed (rc={result.returncode}):\n{output}"
    return output


def _expected_alerts() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    found = []
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                found.append((check["alertname"], alert["exp_labels"], alert.get("exp_annotations", {})))
    return found


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    assert "SUCCESS: 2 rules found" in _promtool("check", "rules", str(RULES))
    assert "SUCCESS" in _promtool("test", "rules", str(TESTS))


def test_the_unit_tests_see_both_alerts_fire_and_the_memory_rule_reads_dcgm_fb_used_and_free() -> None:
    rules = {r["alert"]: r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}
    assert sorted(rules) == sorted(ACTING)
    assert {name for name, _, _ in _expected_alerts()} == set(ACTING)
    memory = rules["GPUMemoryPressure"]["expr"]
    assert "DCGM_FI_DEV_FB_USED" in memory and "DCGM_FI_DEV_FB_FREE" in memory
    assert "training_samples_total" in rules["TrainingThroughputDrop"]["expr"]


def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks_with_training_command() -> None:
    registry = default_registry()
    engine = Engine(store=None, playbooks=load_playbooks(ROOT / "playbooks", registry), registry=registry)
    for alertname, labels, alert_annotations in _expected_alerts():
        payload: dict[str, Any] = notification(alertname, labels)
        payload["alerts"][0]["annotations"] = alert_annotations
        (alert,) = parse_notification(payload).alerts
        playbook, command, params = ACTING[alertname]
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert set(evaluations) == {playbook}, f"{alertname} {labels}"
        evaluation = evaluations[playbook]
        assert evaluation.error is None, evaluation.error
        node = labels.get("Hostname") or labels["instance"].rsplit(":", 1)[0]
        assert evaluation.target == node
        # training-throughput-drop is a ladder: its first rung sends the command.
        first = evaluation.rungs[0].steps if evaluation.rungs else evaluation.steps
        ((action, with_),) = [(s.spec.action, s.params) for s in first]
        assert action == "training.command"
        assert (with_["command"], with_["params"]) == (command, params)
