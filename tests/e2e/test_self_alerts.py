"""remediate's self-alerts (alertmanager/rules/remediate.rules.yml): each is unit-tested by promtool
firing and not firing (tests/e2e/test_gpu_rules.py runs `promtool test rules` on every shipped test file), has a
runbook section in docs/runbooks.md, and goes to on-call: no shipped playbook acts on it and the shipped
AlertManager route does not send it to remediate."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.rules import RULES_DIR, as_alert, expected_alerts, rules_of, shipped_engine
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/example/remediate/blob/main/docs/runbooks.md#"
SELF_ALERTS = {
    "RemediateDown",
    "RemediateExecutorNotRunning",
    "RemediateQueueStalled",
    "RemediateRunsFailing",
    "RemediateAgentCallsFailing",
    "RemediateStoreUnavailable",
    "RemediateApprovalAnnouncementsFailing",
    "RemediateCircuitBreakerOpen",
    "RemediateConfigReloadFailed",
    "RemediateAlertsTruncated",
}


def _checks() -> list[dict]:
    cases = yaml.safe_load((RULES_DIR / "remediate.rules.test.yml").read_text())["tests"]
    return [check for case in cases for check in case.get("alert_rule_test", [])]


def test_every_self_alert_is_unit_tested_firing_and_not_firing() -> None:
    rules = {rule["alert"] for rule in rules_of("remediate")}
    assert rules == SELF_ALERTS
    assert {name for name, _, _ in expected_alerts("remediate")} == rules
    assert {check["alertname"] for check in _checks() if not check["exp_alerts"]} == rules


def test_every_self_alert_links_its_runbook_section() -> None:
    page = RUNBOOKS.read_text(encoding="utf-8")
    # GitHub's anchor of a heading: lower case, spaces to dashes, other punctuation dropped.
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", page, re.M)}
    for rule in rules_of("remediate"):
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_BASE), url
        assert url.removeprefix(RUNBOOK_BASE) == rule["alert"].lower(), url
        assert url.removeprefix(RUNBOOK_BASE) in anchors, f"{rule['alert']}: no section {url} in docs/runbooks.md"
        section = page.split(f"## {rule['alert']}\n", 1)[1].split("\n## ", 1)[0]
        assert "**What it means.**" in section and "**What to do.**" in section, rule["alert"]


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_no_shipped_playbook_acts_on_a_self_alert(status: str) -> None:
    engine = shipped_engine()
    alerts = expected_alerts("remediate")
    assert {name for name, _, _ in alerts} == SELF_ALERTS
    for alertname, labels, texts in alerts:
        evaluations = engine.evaluate(as_alert(alertname, labels, texts, status))
        assert [e.playbook.name for e in evaluations] == [], f"{alertname} {labels}"


@pytest.mark.parametrize("alertname", sorted(SELF_ALERTS))
def test_amtool_routes_each_self_alert_to_on_call_not_to_remediate(alertname: str) -> None:
    labels = next(labels for name, labels, _ in expected_alerts("remediate") if name == alertname)
    result = subprocess.run(
        [
            "amtool", "config", "routes", "test", f"--config.file={ROOT / 'alertmanager' / 'alertmanager.yml'}",
            f"alertname={alertname}", *(f"{k}={v}" for k, v in labels.items()),
        ],
        capture_output=True, text=True, timeout=scaled(30), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "default"
