"""The shipped Prometheus rules (alertmanager/rules/) and their promtool unit tests, as the rules tests read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from remediate.actions import default_registry
from remediate.config.settings import load_settings
from remediate.intake.alerts import Alert, parse_notification
from remediate.judging.engine import Engine
from remediate.playbooks.loading import load_playbooks
from tests.support.server import notification

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "alertmanager" / "rules"


def rules_of(name: str) -> list[dict[str, Any]]:
    """The rules (alerting and recording) of alertmanager/rules/<name>.rules.yml, in file order."""
    groups = yaml.safe_load((RULES_DIR / f"{name}.rules.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def expected_alerts(name: str) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(alertname, labels, annotations) of every alert <name>.rules.test.yml expects to fire."""
    found = []
    for case in yaml.safe_load((RULES_DIR / f"{name}.rules.test.yml").read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                found.append((check["alertname"], alert["exp_labels"], alert.get("exp_annotations", {})))
    return found


def as_alert(alertname: str, labels: dict[str, str], annotations: dict[str, str], status: str = "firing") -> Alert:
    """The alert as AlertManager would send it to remediate."""
    payload = notification(alertname, labels, status=status)
    payload["alerts"][0]["annotations"] = annotations
    (alert,) = parse_notification(payload).alerts
    return alert


def shipped_engine(schedulers: str = "kubernetes") -> Engine:
    """An engine with every shipped playbook and no store, loaded as a site with these `schedulers` loads them:
    it judges, it records nothing. The GPU, Kubernetes, Slurm and training clients are built lazily, so judging
    touches no device and no cluster."""
    registry = default_registry(load_settings(env={}, overrides={"schedulers": schedulers}))
    return Engine(store=None, playbooks=load_playbooks(ROOT / "playbooks", registry), registry=registry)
