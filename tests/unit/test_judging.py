"""remediate.judging.stages: a notification's pairs judged by named stages over facts read once per notification."""

from __future__ import annotations

from collections import Counter
from typing import Any

from remediate.actions.base import ActionRegistry
from remediate.intake.alerts import parse_notification
from remediate.judging.engine import Engine
from remediate.judging.stages import judge
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.runs import Decision
from remediate.store import EmptyGuardReader
from tests.conftest import alert_payload, notification_payload

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class CountingReader(EmptyGuardReader):
    """A store with no history that counts what it is asked."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "calls":
            object.__getattribute__(self, "calls")[name] += 1
        return object.__getattribute__(self, name)


def evaluations(registry: ActionRegistry, alerts: int) -> list:
    playbook = {
        "name": "xid",
        "match": {"alertname": "GpuXidError"},
        "target": "node",
        "cooldown": "10m",
        "max_attempts": 3,
        "steps": [{"action": "log", "with": {"message": "{{ labels.Hostname }}"}}],
    }
    engine = Engine(store=None, playbooks=PlaybookSet([parse_playbook(playbook, registry)]), registry=registry)
    payloads = [
        alert_payload("GpuXidError", fingerprint=f"f{i:04d}", labels={"Hostname": f"node-{i % 4}"})
        for i in range(alerts)
    ]
    unmatched = alert_payload("SomethingElse", fingerprint="other")
    return engine.evaluate_all(parse_notification(notification_payload(*payloads, unmatched)).alerts)


def test_the_store_facts_are_read_once_per_notification_and_once_per_target(registry: ActionRegistry) -> None:
    """The stages share the notification's facts: 100 alerts on 4 nodes read the runs, the pause and the
    breaker once, and each node's history once; a node's later alerts see the runs accepted before them."""
    reader = CountingReader()

    judged = judge(
        reader,
        evaluations(registry, 100),
        NOW,
        stale_horizon=900.0,
        gated=lambda ev: False,
    )

    assert reader.calls["existing_runs"] == reader.calls["pause_state"] == reader.calls["breaker_state"] == 1
    assert reader.calls["target_history"] == 4
    decisions = Counter(j.verdict.decision for j in judged)
    # cooldown 10m: each node's first alert runs, the other 24 wait (this notification's run counts)
    assert decisions == {Decision.ACCEPTED: 4, Decision.COOLDOWN: 96, Decision.UNMATCHED: 1}
    assert [j.index for j in judged] == list(range(101))
