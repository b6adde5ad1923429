"""remediate.agentwire.protocol: what the server sends is what the agent parses; what the agent answers for an
exception is what the server raises again (the one classification both sides use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate.agentwire.protocol import (
    EXECUTE,
    PERMANENT,
    PLAN,
    RETRYABLE,
    AgentRequestError,
    AgentStopping,
    CancelRequest,
    NotANodeAction,
    StepRequest,
    WrongNodeError,
    error_answer,
    error_from_answer,
    step_answer,
)
from remediate.errors import (
    ActionError,
    AmbiguousActionError,
    OutcomePending,
    ParamsError,
    RetryableActionError,
)


def step_request(**changes: object) -> StepRequest:
    fields: dict[str, object] = {
        "action": "gpu.power_limit",
        "params": {"watts": 250},
        "run_id": 7,
        "step_index": 1,
        "playbook": "gpu-hot",
        "target": "node-b",
        "alert": {"labels": {"alertname": "GpuHot"}},
        "timeout": 12.5,
    }
    fields.update(changes)
    return StepRequest(**fields)  # type: ignore[arg-type]


def test_a_step_request_reads_back_what_the_server_encoded() -> None:
    sent = step_request()

    assert StepRequest.parse(json.loads(sent.encode())) == sent


def test_values_json_cannot_hold_are_sent_as_text() -> None:
    sent = step_request(params={"path": Path("/scratch/x")})

    assert StepRequest.parse(json.loads(sent.encode())).params == {"path": "/scratch/x"}


def test_a_cancel_request_reads_back_what_the_server_encoded() -> None:
    sent = CancelRequest(run_id=3, step_index=0, target="node-a")

    assert CancelRequest.parse(json.loads(sent.encode())) == sent


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"action": "", "context": {}}, "action"),
        ({"action": "a", "params": [], "context": {}}, "params"),
        ({"action": "a", "context": {"run_id": True, "step_index": 0}}, "context.run_id"),
        (json.loads(step_request(timeout=0).encode()), "context.timeout"),
        (json.loads(step_request(timeout=24 * 3600 + 1).encode()), "context.timeout"),
    ],
)
def test_a_body_that_is_not_a_step_request_names_the_field(body: object, field: str) -> None:
    with pytest.raises(AgentRequestError) as refused:
        StepRequest.parse(body)

    assert refused.value.field == field
    assert error_answer(refused.value, "node-b").status == 400
    assert error_answer(refused.value, "node-b").body()["field"] == field


def test_a_successful_answer_holds_the_plan_or_the_result() -> None:
    assert step_answer(PLAN, "node-b", {"x": 1}, 0.5) == {"node": "node-b", "plan": {"x": 1}, "seconds": 0.5}
    assert step_answer(EXECUTE, "node-b", None, 0.5) == {"node": "node-b", "result": None, "seconds": 0.5}


@pytest.mark.parametrize(
    ("raised", "status", "error_class", "comes_back_as"),
    [
        (RetryableActionError("busy"), 503, RETRYABLE, RetryableActionError),
        (AgentStopping("stopping"), 503, RETRYABLE, RetryableActionError),
        (ActionError("broken"), 500, PERMANENT, ActionError),
        # The agent applied nothing ambiguous of its own: the server's own ambiguity rules apply on its side.
        (AmbiguousActionError("lost"), 500, PERMANENT, ActionError),
        (ValueError("bug"), 500, PERMANENT, ActionError),
        (ParamsError("watts: too low"), 422, PERMANENT, ActionError),
        (NotANodeAction("k8s.cordon is not a node action"), 422, PERMANENT, ActionError),
        (WrongNodeError("not node-c"), 421, PERMANENT, ActionError),
    ],
)
def test_the_server_raises_again_the_class_of_error_the_agent_reported(
    raised: Exception, status: int, error_class: str, comes_back_as: type[Exception]
) -> None:
    answer = error_answer(raised, "node-b")
    again = error_from_answer(json.loads(json.dumps(answer.body())), "agent http://x of node node-b")

    assert (answer.status, answer.error_class) == (status, error_class)
    assert type(again) is comes_back_as
    assert str(again).endswith("(on agent http://x of node node-b)")


def test_an_unexpected_exception_is_named_in_the_message() -> None:
    answer = error_answer(KeyError("gpu"), "node-b")

    assert answer.message == "unexpected KeyError in the agent: 'gpu'"
    assert answer.body()["type"] == "KeyError"


def test_a_wrong_node_answer_names_this_node() -> None:
    assert error_answer(WrongNodeError("not mine"), "node-b").body()["node"] == "node-b"


def test_a_pending_outcome_keeps_what_to_look_for() -> None:
    follow_up = {"command_id": "c-1", "job": "llama"}
    answer = error_answer(OutcomePending("handed over", follow_up), "node-b")

    again = error_from_answer(json.loads(json.dumps(answer.body())), "agent")

    assert isinstance(again, OutcomePending)
    assert again.follow_up == follow_up


@pytest.mark.parametrize("data", [None, "text", {"error": "x"}, {"error_class": "maybe", "message": "m"}])
def test_an_answer_that_is_no_error_answer_stands_for_no_exception(data: object) -> None:
    assert error_from_answer(data, "agent") is None
