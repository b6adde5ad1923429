"""A step's `run_on: {labels: [...]}`: a node step runs on the node an alert label names (the
fail-slow ladder's restart on rank 0's node, `control_node`), while the run's target stays the slow node.
Validated when the playbook loads; resolved once, when the run is created, and stored with the step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from remediate.actions.base import ActionRegistry
from remediate.errors import PlaybookError
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE
from tests.support.stores import rows as table_rows

T0 = 1_767_225_600.0
RESTART = {"name": "restart", "action": "training.command", "with": {"command": "restart"}}
NOTE = {"name": "note", "action": "log", "with": {"message": "straggler on {{ labels.node }}"}}
LOCAL = {"name": "here", "action": "training.command", "with": {"command": "checkpoint"}}


def playbook(*steps: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "name": "fail-slow",
        "match": {"alertname": "TrainingStragglerRank"},
        "target": "node",
        "cooldown": "10m",
        "steps": list(steps),
        **changes,
    }


def on(step: dict[str, Any], value: Any) -> dict[str, Any]:
    return {**step, "run_on": value}


def error_of(data: dict[str, Any], registry: ActionRegistry) -> PlaybookError:
    with pytest.raises(PlaybookError) as info:
        parse_playbook(data, registry, source="pb.yaml")
    return info.value


# --------------------------------------------------------------------------- loading


def test_a_node_step_may_name_the_labels_of_the_node_it_runs_on(registry: ActionRegistry) -> None:
    loaded = parse_playbook(playbook(NOTE, on(RESTART, {"labels": ["control_node", "exported_node"]}), LOCAL), registry)

    assert [s.run_on for s in loaded.steps] == [(), ("control_node", "exported_node"), ()]


def test_run_on_is_allowed_in_rungs_and_their_undo(registry: ActionRegistry) -> None:
    rungs = [
        {"name": "tell", "holds_for": "30m", "steps": [NOTE]},
        {
            "name": "restart",
            "holds_for": "1h",
            "steps": [on(RESTART, {"labels": ["control_node"]})],
            "on_resolved": [on(LOCAL, {"labels": "control_node"})],
        },
    ]
    data = playbook(escalate=rungs)
    del data["steps"]

    loaded = parse_playbook(data, registry)

    assert loaded.rungs[1].steps[0].run_on == ("control_node",)
    assert loaded.rungs[1].on_resolved[0].run_on == ("control_node",)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (playbook(on(NOTE, {"labels": ["control_node"]})), "steps[0].run_on"),
        (
            {**playbook(NOTE), "on_resolved": [NOTE, on(NOTE, {"labels": ["control_node"]})]},
            "on_resolved[1].run_on",
        ),
    ],
)
def test_a_cluster_action_has_no_run_on(registry: ActionRegistry, data: dict[str, Any], field: str) -> None:
    error = error_of(data, registry)

    assert (error.file, error.playbook, error.field) == ("pb.yaml", "fail-slow", field)
    assert "log is a cluster action" in str(error)


def test_a_ladder_rungs_cluster_step_with_run_on_names_its_path(registry: ActionRegistry) -> None:
    cordon = {"action": "k8s.cordon", "with": {"node": "{{ labels.node }}"}, "run_on": {"labels": ["control_node"]}}
    rungs = [
        {"name": "tell", "holds_for": "30m", "steps": [NOTE]},
        {"name": "restart", "holds_for": "1h", "steps": [NOTE, RESTART, cordon]},
    ]
    data = playbook(escalate=rungs)
    del data["steps"]

    error = error_of(data, registry)

    assert error.field == "escalate[1].steps[2].run_on"
    assert "k8s.cordon is a cluster action" in str(error)


@pytest.mark.parametrize(
    "value",
    [
        "control_node",
        ["control_node"],
        {"labels": []},
        {"labels": [""]},
        {"labels": [3]},
        {"labels": ["control_node"], "default": "x"},
        {"label": ["control_node"]},
        None,
    ],
)
def test_a_malformed_run_on_is_refused_naming_the_field(registry: ActionRegistry, value: Any) -> None:
    error = error_of(playbook(NOTE, on(RESTART, value)), registry)

    assert error.field == "steps[1].run_on"
    assert "must be {labels: [label, ...]}" in str(error)


# --------------------------------------------------------------------------- resolved when the run is created


def straggler(node: str, **labels: str) -> dict[str, Any]:
    return alert_payload("TrainingStragglerRank", labels={"node": node, "training_job": "llm", "rank": "3", **labels})


@EVERY_DATABASE
@pytest.mark.parametrize(
    ("labels", "stored"),
    [
        ({"control_node": "node-a"}, "node-a"),
        # the first label the alert has wins; `instance` loses its port, as the target's does
        ({"instance": "node-c:9100"}, "node-c"),
        ({"control_node": "node-a", "instance": "node-c:9100"}, "node-a"),
        # none present: the run's target, said on the step
        ({}, "node-b"),
    ],
)
def test_a_run_on_step_stores_its_node_and_the_run_keeps_its_target(
    store: Store, make_engine: Callable[..., Engine], labels: dict[str, str], stored: str
) -> None:
    engine = make_engine(playbook(NOTE, on(RESTART, {"labels": ["control_node", "instance"]}), LOCAL))

    result = ingest_alerts(engine, straggler("node-b", **labels), at=T0)

    (decision,) = result.decisions
    assert decision.target == "node-b"
    (run,) = table_rows(store, t.runs.name)
    assert (run.target, run.guard_key) == ("node-b", "node-b")  # cooldowns and caps count per slow node
    steps = table_rows(store, t.steps.name, run_id=run.id)
    assert [(s.name, s.node) for s in steps] == [("note", None), ("restart", stored), ("here", None)]
    claimed = _claimed(store)
    assert [s.node_of(claimed) for s in store.queue.steps_of(run.id)] == ["node-b", stored, "node-b"]


def _claimed(store: Store) -> Any:
    claimed = store.queue.claim("host:1", T0 + 1)
    assert claimed is not None
    return claimed


def test_a_ladder_rungs_run_on_step_is_resolved_too(store: Store, make_engine: Callable[..., Engine]) -> None:
    rungs = [
        {"name": "tell", "holds_for": "30m", "steps": [on(RESTART, {"labels": ["control_node"]}), NOTE]},
        {"name": "keep-out", "holds_for": "1h", "steps": [NOTE]},
    ]
    data = playbook(escalate=rungs)
    del data["steps"]
    engine = make_engine(data)

    ingest_alerts(engine, straggler("node-b", control_node="node-a"), at=T0)

    (run,) = table_rows(store, t.runs.name)
    assert (run.target, run.rung) == ("node-b", 1)
    assert [s.node for s in table_rows(store, t.steps.name, run_id=run.id)] == ["node-a", None]
