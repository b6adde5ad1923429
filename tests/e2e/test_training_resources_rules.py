"""The GPU memory pressure and training throughput rules' unit tests see both alerts fire; every alert they expect
is handled by the shipped playbooks, which plan training.command with the published params. (promtool itself runs
on every rule file in test_gpu_rules.py.)
"""

from __future__ import annotations

import pytest

from tests.support.rules import as_alert, expected_alerts, rules_of, shipped_engine

pytestmark = [pytest.mark.integration]

ACTING = {
    "GPUMemoryPressure": ("gpu-memory-pressure", "reduce_batch_size", {"factor": 0.5}),
    "TrainingThroughputDrop": ("training-throughput-drop", "set_dataloader_workers", {"factor": 0.5}),
}


def test_the_unit_tests_see_both_alerts_fire_and_the_memory_rule_reads_dcgm_fb_used_and_free() -> None:
    rules = {r["alert"]: r for r in rules_of("training-resources")}
    assert sorted(rules) == sorted(ACTING)
    assert {name for name, _, _ in expected_alerts("training-resources")} == set(ACTING)
    memory = rules["GPUMemoryPressure"]["expr"]
    assert "DCGM_FI_DEV_FB_USED" in memory and "DCGM_FI_DEV_FB_FREE" in memory
    assert "training_samples_total" in rules["TrainingThroughputDrop"]["expr"]


def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks_with_training_command() -> None:
    engine = shipped_engine()
    for alertname, labels, alert_annotations in expected_alerts("training-resources"):
        alert = as_alert(alertname, labels, alert_annotations)
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
