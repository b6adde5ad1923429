"""The GPU memory pressure and training throughput rules' unit tests see both alerts fire; every alert they expect
is handled by the shipped playbooks, which plan training.command with the published params. (promtool itself runs
on every rule file in test_gpu_rules.py.) The scrape-interval caveat of docs/training-protocol.md is pinned by a
promtool case with a stale sample; without that sample the same case fails, so the case is what holds the claim.
Its fault -> command table names every shipped training playbook with its rule's `for:`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.realsystems import PROMTOOL
from tests.support.rules import RULES_DIR, as_alert, expected_alerts, rules_of, shipped_engine
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

ACTING = {
    "GPUMemoryPressure": ("gpu-memory-pressure", "reduce_batch_size", {"factor": 0.5}),
    "TrainingThroughputDrop": ("training-throughput-drop", "set_dataloader_workers", {"factor": 0.5}),
}


def test_the_unit_tests_see_both_alerts_fire_and_the_memory_rule_reads_the_normalised_fb_used_and_free() -> None:
    rules = {r["alert"]: r for r in rules_of("training-resources")}
    assert sorted(rules) == sorted(ACTING)
    assert {name for name, _, _ in expected_alerts("training-resources")} == set(ACTING)
    memory = rules["GPUMemoryPressure"]["expr"]
    assert "gpu:fb_used_bytes" in memory and "gpu:fb_free_bytes" in memory
    # ... which dcgm.rules.yml records from both exporter generations' names.
    layer = {r["record"]: r["expr"] for r in rules_of("dcgm") if "record" in r}
    assert {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES"} <= set(re.findall(r"\w+", layer["gpu:fb_used_bytes"]))
    assert {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES"} <= set(re.findall(r"\w+", layer["gpu:fb_free_bytes"]))
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
        node = labels.get("hostname") or labels["instance"].rsplit(":", 1)[0]
        assert evaluation.target == node
        # training-throughput-drop is a ladder: its first rung sends the command.
        first = evaluation.rungs[0].steps if evaluation.rungs else evaluation.steps
        ((action, with_),) = [(s.spec.action, s.params) for s in first]
        assert action == "training.command"
        assert (with_["command"], with_["params"]) == (command, params)


def _stale_case(tests: list[dict]) -> dict:
    (case,) = [c for c in tests if any("stale" in s["values"].split() for s in c["input_series"])]
    return case


def _promtool_test(directory: Path, tests: list[dict]) -> subprocess.CompletedProcess[str]:
    shutil.copy(RULES_DIR / "training-resources.rules.yml", directory)
    shutil.copy(RULES_DIR / "dcgm.rules.yml", directory)
    test_file = directory / "training-resources.rules.test.yml"
    document = yaml.safe_load((RULES_DIR / test_file.name).read_text())
    test_file.write_text(yaml.safe_dump({**document, "tests": tests}))
    command = [PROMTOOL, "test", "rules", str(test_file)]
    return subprocess.run(command, capture_output=True, text=True, timeout=scaled(60), check=False)


def test_a_stale_sample_restarts_the_for_of_gpu_memory_pressure_as_the_docs_say(tmp_path: Path) -> None:
    """A failed scrape (stale markers) in the middle of `for: 5m` makes the alert wait 5 minutes more."""
    tests = yaml.safe_load((RULES_DIR / "training-resources.rules.test.yml").read_text())["tests"]
    case = _stale_case(tests)
    assert {c["alertname"] for c in case["alert_rule_test"]} == {"GPUMemoryPressure"}
    assert _promtool_test(tmp_path, [case]).returncode == 0
    # The same series without the stale sample: firing since 5m, so the case's "still pending" checks fail.
    for series in case["input_series"]:
        series["values"] = series["values"].split("x")[0] + "x29"  # '79000x8 stale 79000x20' -> '79000x29'
    fresh = _promtool_test(tmp_path, [case])
    assert fresh.returncode != 0 and "time: 9m30s" in fresh.stdout + fresh.stderr, fresh.stdout + fresh.stderr
    doc = (RULES_DIR.parents[1] / "docs" / "training-protocol.md").read_text()
    assert "### Scrape interval and `for:`" in doc and "training-resources.rules.test.yml" in doc


def test_the_docs_timing_table_has_every_training_playbook_with_its_alert_and_the_rules_for() -> None:
    """docs/training-protocol.md, "From fault to applied command": one row per shipped training playbook, whose
    alert and `for:` are those of the shipped rules (a changed `for:` must change the table)."""
    doc = (RULES_DIR.parents[1] / "docs" / "training-protocol.md").read_text()
    section = doc.split("### From fault to applied command", 1)[1].split("\n#", 1)[0]
    _header, *rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and "(" in line]
    table = {cells[0].strip(): cells[1].strip() for cells in rows}
    shipped = ("training", "training-resources", "training-failslow")
    rules = {r["alert"]: r["for"] for name in shipped for r in rules_of(name)}
    playbooks = {
        "loss-spike": "TrainingLossSpike",
        "loss-nan": "TrainingLossNaN",
        "training-fail-slow": "TrainingStragglerRank",
        **{p: a for a, (p, _, _) in ACTING.items()},
    }
    assert table == {f"{playbook} ({alert})": rules[alert] for playbook, alert in playbooks.items()}
