"""The shipped training rules' unit tests see both alerts fire; every alert they expect is handled by the shipped
playbooks: loss-spike or loss-nan must match it (and the log playbook), resolve the node, and plan the rollback
first and the lr cut second with the published defaults (a gradient norm spike: the loss-spike ladder's first rung,
the skip of the bad batch window). (promtool itself runs on every rule file in
test_gpu_rules.py.)
"""

from __future__ import annotations

import pytest

from tests.support.rules import as_alert, expected_alerts, rules_of, shipped_engine

pytestmark = [pytest.mark.integration]

SKIP = {"batches": 200}
ACTING = {"TrainingLossSpike": "loss-spike", "TrainingLossNaN": "loss-nan", "TrainingGradNormSpike": "loss-spike"}


def test_the_unit_tests_see_every_alert_fire() -> None:
    assert sorted(r["alert"] for r in rules_of("training")) == sorted(ACTING)
    assert {name for name, _, _ in expected_alerts("training")} == set(ACTING)


def test_every_alert_the_rules_fire_is_handled_by_the_shipped_playbooks() -> None:
    engine = shipped_engine()
    for alertname, labels, alert_annotations in expected_alerts("training"):
        alert = as_alert(alertname, labels, alert_annotations)
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert set(evaluations) == {ACTING[alertname]}, f"{alertname} {labels}"
        evaluation = evaluations[ACTING[alertname]]
        assert evaluation.error is None, evaluation.error
        assert evaluation.target == labels["instance"].rsplit(":", 1)[0]
        start = evaluation.playbook.start_rung(alertname)
        rung = evaluation.rungs[start[0] - 1 if start else 0] if evaluation.rungs else evaluation
        steps = [(s.spec.action, s.params) for s in rung.steps]
        if alertname == "TrainingGradNormSpike":  # the ladder's first rung: skip the bad batch window
            ((action, params),) = steps
            assert (action, params["command"], params["params"]) == ("training.command", "skip_batches", SKIP)
            continue
        assert [action for action, _ in steps] == ["training.rollback", "training.scale_lr"]
        rollback, scale = steps[0][1], steps[1][1]
        assert rollback["checkpoint"] == "latest_good"
        if alertname == "TrainingLossSpike":
            assert (rollback["min_steps_back"], rollback["skip_batches"], scale["factor"]) == (100, 200, 0.5)
        else:
            assert (rollback["min_steps_back"], rollback["skip_batches"], scale["factor"]) == (0, 50, 0.9)
        assert scale["min_lr"] == 1e-6
