"""The shipped disk rules' alerts are handled by the shipped disk-full playbook (promtool itself runs on every rule
file in test_gpu_rules.py)."""

from __future__ import annotations

from remediate.actions import default_registry
from remediate.playbooks.loading import load_directory
from tests.support.rules import ROOT, as_alert, expected_alerts, rules_of, shipped_engine


def test_the_rule_unit_tests_expect_both_severities() -> None:
    assert [r["alert"] for r in rules_of("disk")] == ["NodeFilesystemAlmostOutOfSpace"] * 2
    assert {labels["severity"] for _, labels, _ in expected_alerts("disk")} == {"warning", "critical"}


def test_every_disk_alert_the_rules_fire_is_cleaned_by_the_shipped_playbook_for_its_mountpoint() -> None:
    engine = shipped_engine()
    for alertname, labels, notes in expected_alerts("disk"):
        alert = as_alert(alertname, labels, notes)
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
