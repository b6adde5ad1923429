"""The shipped fail-slow parts as the end-to-end tests run them (tests/e2e/test_straggler.py on Kubernetes,
tests/e2e/test_slurm_failslow.py on Slurm): the shipped TrainingStragglerRank rule and training-fail-slow playbook
with only their times shrunk, so that a ladder of hours runs in a minute; expressions, labels, annotations, steps,
params and templates as shipped."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.realsystems import check_rules
from tests.support.rules import rules_of
from tests.support.shipped import shipped_playbook

PLAYBOOK = "training-fail-slow"


def fast_straggler_rule(directory: Path) -> Path:
    """The shipped TrainingStragglerRank with a 10 s rate window, `for: 8s`, `keep_firing_for: 4s`, written to
    `directory`; its path."""
    (rule,) = [r for r in rules_of("training-failslow") if r["alert"] == "TrainingStragglerRank"]
    assert rule["expr"].count("[2m]") == 4 and (rule["for"], rule["keep_firing_for"]) == ("5m", "5m")
    rule = {**rule, "expr": rule["expr"].replace("[2m]", "[10s]"), "for": "8s", "keep_firing_for": "4s"}
    path = directory / "training-failslow.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "failslow", "rules": [rule]}]}, sort_keys=False))
    check_rules([path])
    return path


def fast_failslow_playbook(directory: Path, *, holds_for: tuple[str, str, str] = ("12s", "60s", "120s")) -> None:
    """The shipped playbook written to `directory` with its times shrunk: the rungs' holds_for 30m/1h/12h ->
    `holds_for`, cooldown 10m -> 3s, the undo check 10 s of a 10 s window, polled every second (90 s to give
    up)."""
    playbook = shipped_playbook(PLAYBOOK)
    assert [r["holds_for"] for r in playbook["escalate"]] == ["30m", "1h", "12h"]
    playbook.update(cooldown="3s", reset_after="5m")
    for rung, holds in zip(playbook["escalate"], holds_for, strict=True):
        rung["holds_for"] = holds
    check = playbook["escalate"][1]["on_resolved"][0]
    assert check["action"] == "check.prometheus" and check["with"]["query"].count("[5m]") == 4
    check["with"].update(query=check["with"]["query"].replace("[5m]", "[10s]"), poll="1s", timeout="90s")
    check["with"]["for"] = "10s"
    check["timeout"] = "95s"
    (directory / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
