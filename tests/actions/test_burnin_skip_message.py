"""Through the engine and the executor: a burn-in with no baseline configured succeeds as `skipped`, and the
message of a later step reads it (`step[...].outcome`, `run.outcome`), so on-call is told that no burn-in
vouched for the node rather than that it passed one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from remediate.actions import default_registry
from remediate.config.settings import Settings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.realsystems import WebhookRecorder
from tests.support.store_json import run_json_of


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder() as server:
        yield server


def test_a_skipped_burnin_is_told_as_skipped_not_as_passed(recorder: WebhookRecorder, store: Store) -> None:
    # No burnin_* settings, and no cluster: a burn-in that reached it would fail the run.
    registry = default_registry(Settings())
    message = (
        "{% if step['burn-in'].outcome == 'skipped' %}NOT burnt in{% else %}burnt in{% endif %}: {{ run.outcome }}"
    )
    playbook = {
        "name": "readmit",
        "match": {"alertname": "GpuBack"},
        "steps": [
            {"name": "burn-in", "action": "k8s.burnin", "with": {"node": "gpu-1"}},
            {"name": "tell", "action": "notify.webhook", "with": {"url": recorder.url, "message": message}},
        ],
    }
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(playbook, registry)]), registry=registry)
    (decision,) = ingest_alerts(
        engine, alert_payload("GpuBack", labels={"node": "gpu-1"}), at=1_767_225_600.0
    ).decisions
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()

    detail = run_json_of(store, decision.run_id)
    assert [s["status"] for s in detail["steps"]] == ["succeeded", "succeeded"]
    assert detail["steps"][0]["result"]["outcome"] == "skipped"
    (request,) = recorder.requests
    assert request.json["message"] == "NOT burnt in: burn-in succeeded (skipped)", request.json
