"""training.command: the job's own declared commands, checked against its declared schema before anything is sent.

The job is a real `TrainingControl` polling in a thread (tests/support/training.LiveJob) with a
`Batching` attached; the action writes real command files and reads the job's real answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import InMemoryMemory
from remediate.actions.training_command import TrainingCommandAction
from remediate.agent.service import AgentService
from remediate.agentwire.auth import node_token, sign
from remediate.config.settings import load_settings
from remediate.errors import ActionError, ParamsError
from remediate.training.batching import Batching
from remediate.training.files import JobPaths, atomic_write_json, read_json
from tests.support.agent import AGENT_TOKEN, agent_client, agent_settings, step_body
from tests.support.training import LABELS, LiveJob, ctx_for

POD = {"pod": "trainer-0"}


@pytest.fixture
def jobs(root: Path) -> Iterator[list[LiveJob]]:
    started: list[LiveJob] = []
    yield started
    for job in started:
        job.stop()


def batching_job(jobs: list[LiveJob], root: Path, batching: Batching, *, start: bool = True) -> LiveJob:
    job = LiveJob(root, "trainer-0")
    job.control.attach(batching=batching)
    jobs.append(job)
    return job.start() if start else job.register()


def inbox(root: Path) -> list[str]:
    return os.listdir(JobPaths(root, "trainer-0").inbox)


def test_the_registry_builds_it_and_its_params_are_checked(root: Path) -> None:
    settings = load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)})
    action = default_registry(settings).get("training.command")
    assert isinstance(action, TrainingCommandAction) and action.root == root and action.where == "node"
    assert action.validate({"command": "reduce_batch_size", "params": {"factor": 0.5}})["params"] == {"factor": 0.5}
    assert action.validate({"command": "checkpoint"})["params"] == {}
    assert action.schema.check_static({"command": "{{ labels.cmd }}"}) == [
        "parameter 'command' must be written in the playbook, not templated from the alert"
    ]
    assert action.schema.check_static({"command": "reduce_batch_size", "params": {"to": "{{ labels.b }}"}}) == []
    for bad in (
        {},
        {"command": "Reduce Batch"},
        {"command": "x", "params": {"a/b": 1}},
        {"command": "x", "params": {"nested": {"a": 1}}},
        {"command": "x", "params": {"long": "x" * 2000}},
        {"command": "x", "params": [1]},
    ):
        with pytest.raises(ParamsError):
            action.validate(bad)


def test_reduce_batch_size_from_a_label_is_typed_by_the_job_schema_applied_and_reported(
    root: Path, jobs: list[LiveJob]
) -> None:
    batching = Batching(32, 2)
    batching_job(jobs, root, batching)
    action = TrainingCommandAction(root, LABELS)
    params = action.validate({"command": "reduce_batch_size", "params": {"to": "8"}})  # as rendered from a label
    plan = action.plan(params, ctx_for(POD))
    assert plan["can_act"] is True and plan["why_not"] is None
    assert plan["would_send"] == {"kind": "reduce_batch_size", "params": {"to": 8}}
    assert plan["declared_schema"]["oneOf"] == [{"required": ["factor"]}, {"required": ["to"]}]
    assert inbox(root) == [] and batching.micro_batch_size == 32  # a plan changes nothing

    result = action.execute(params, ctx_for(POD))
    assert result["status"] == "applied" and result["kind"] == "reduce_batch_size"
    assert result["params"] == {"to": 8}
    assert (result["micro_batch_size_before"], result["micro_batch_size_after"]) == (32, 8)
    assert (result["accumulation_steps_before"], result["accumulation_steps_after"]) == (2, 8)
    assert result["effective_batch_size_before"] == result["effective_batch_size_after"] == 64
    assert (batching.micro_batch_size, batching.accumulation_steps) == (8, 8)


def test_an_undeclared_command_is_refused_at_plan_time_and_nothing_is_sent(root: Path, jobs: list[LiveJob]) -> None:
    batching_job(jobs, root, Batching(32))  # no dataloader_workers: set_dataloader_workers is not declared
    action = TrainingCommandAction(root, LABELS)
    params = action.validate({"command": "set_dataloader_workers", "params": {"workers": 2}})
    plan = action.plan(params, ctx_for(POD))
    assert plan["can_act"] is False
    assert plan["why_not"] == (
        "training job 'trainer-0' does not declare command 'set_dataloader_workers' (it declares: checkpoint, "
        "reduce_batch_size, restart, rollback, scale_lr, skip_batches): a job declares a command by handling it (a "
        "Batching for reduce_batch_size and set_dataloader_workers, control.handler() for its own; "
        'docs/training-protocol.md, "Declared commands")'
    )
    with pytest.raises(ActionError, match=r"does not declare command 'set_dataloader_workers' .*; nothing was sent"):
        action.execute(params, ctx_for(POD))
    assert inbox(root) == [] and not os.listdir(JobPaths(root, "trainer-0").outbox)


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"factor": 1.5}, "param 'factor': must be < 1, got 1.5"),
        ({"to": "eight"}, "param 'to': must be an integer, got 'eight'"),
        ({}, "exactly one of factor | to must be given (given: none)"),
        ({"factor": 0.5, "size": 3}, "unknown param 'size' (the job declares: factor, to)"),
    ],
)
def test_params_outside_the_declared_schema_are_refused_at_plan_time_and_nothing_is_sent(
    root: Path, jobs: list[LiveJob], params: dict[str, Any], problem: str
) -> None:
    batching = Batching(32)
    batching_job(jobs, root, batching, start=False)
    action = TrainingCommandAction(root, LABELS)
    validated = action.validate({"command": "reduce_batch_size", "params": params})
    plan = action.plan(validated, ctx_for(POD))
    assert plan["can_act"] is False
    assert plan["why_not"].startswith(
        "the params of command 'reduce_batch_size' do not match what training job 'trainer-0' declares "
        "(factor: number > 0 < 1, to: integer >= 1): "
    )
    assert problem in plan["why_not"]
    with pytest.raises(ActionError) as failure:
        action.execute(validated, ctx_for(POD))
    assert problem in str(failure.value) and str(failure.value).endswith("; nothing was sent")
    assert inbox(root) == [] and batching.micro_batch_size == 32


def test_a_job_of_an_older_library_gets_its_built_in_commands_but_nothing_else(root: Path) -> None:
    LiveJob(root, "trainer-0").register()
    paths = JobPaths(root, "trainer-0")
    older = read_json(paths.registration)
    del older["commands"]
    older["kinds"] = ["checkpoint", "rollback", "scale_lr"]
    atomic_write_json(paths.registration, older)
    action = TrainingCommandAction(root, LABELS)
    checkpoint = action.plan(action.validate({"command": "checkpoint"}), ctx_for(POD))
    assert checkpoint["can_act"] is True and checkpoint["declared_schema"] is None
    assert "not checked" in checkpoint["schema_check"]
    custom = action.validate({"command": "reduce_batch_size", "params": {"factor": 0.5}})
    plan = action.plan(custom, ctx_for(POD))
    assert plan["can_act"] is False and "declares no commands in its registration" in plan["why_not"]
    with pytest.raises(ActionError, match="not 'reduce_batch_size'; nothing was sent"):
        action.execute(custom, ctx_for(POD))
    assert inbox(root) == []


def test_a_job_that_refuses_the_command_anyway_fails_the_step_with_its_reason(root: Path, jobs: list[LiveJob]) -> None:
    batching_job(jobs, root, Batching(7, min_micro_batch_size=2))  # 7 is prime: to 3 cannot keep the batch
    action = TrainingCommandAction(root, LABELS)
    params = action.validate({"command": "reduce_batch_size", "params": {"to": 3}})
    assert action.plan(params, ctx_for(POD))["can_act"] is True  # within the schema: only the job knows
    with pytest.raises(ActionError, match=r"answered rejected to reduce_batch_size command .*effective batch"):
        action.execute(params, ctx_for(POD))


# --------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("label", ["9" * 309, "1" * 309, "9" * 1000, "-" + "1" * 400, "1e999", "inf"])
def test_a_number_param_beyond_any_float_is_refused_as_bad_input_naming_the_param(
    root: Path, jobs: list[LiveJob], tmp_path: Path, label: str
) -> None:
    """A 309-digit label in a `number` param raised OverflowError (the agent answered 500)."""
    batching = Batching(32)
    batching_job(jobs, root, batching, start=False)
    action = TrainingCommandAction(root, LABELS)
    validated = action.validate({"command": "reduce_batch_size", "params": {"factor": label}})
    plan = action.plan(validated, ctx_for(POD))
    assert plan["can_act"] is False and "param 'factor': must be " in plan["why_not"]
    with pytest.raises(ParamsError, match=r"param 'factor': must be .*; nothing was sent"):
        action.execute(validated, ctx_for(POD))
    assert inbox(root) == [] and batching.micro_batch_size == 32

    # The node agent answers it as bad params (422), not as its own crash (500).
    settings = agent_settings(tmp_path / "agent", training_control_root=root)
    service = AgentService(settings, registry=default_registry(settings), memory=InMemoryMemory())
    body = step_body("training.command", {"command": "reduce_batch_size", "params": {"factor": label}})
    body["context"]["alert"]["labels"].update(POD)
    data = json.dumps(body).encode()
    path = "/v1/steps/execute"
    header = sign(node_token(AGENT_TOKEN, "node-b"), "node-b", "POST", path, data)
    with agent_client(service, settings) as client:
        response = client.post(path, data=data, content_type="application/json", headers={"Authorization": header})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_params"
    assert "param 'factor': must be " in response.json()["message"]
    assert inbox(root) == []
