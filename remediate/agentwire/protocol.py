"""What both sides of a call to the node agent share: paths, requests, answers, errors.

The server (remediate.executor.agent_calls.AgentRunner) builds a StepRequest or CancelRequest and POSTs
its `encode()`d body, signed (remediate.agentwire.auth), to STEP_PATHS[kind] or CANCEL_PATH of the agent
it found through an AgentDirectory; the agent (remediate.agent.server) `parse`s the body and
answers with `step_answer` or, when the step was refused or failed, with `error_answer(exc)`:
{error, error_class: retryable|permanent, message, ...} and an HTTP status. `error_from_answer`
turns such an answer back into the exception the server's executor acts on (retry, fail, reconcile
a `follow_up`). Both sides import this module and nothing of each other; it knows no HTTP library.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from remediate.errors import (
    ActionError,
    OutcomePending,
    ParamsError,
    PartialFailure,
    RemediateError,
    RetryableActionError,
)

PLAN = "plan"
EXECUTE = "execute"
STEP_PATHS = {PLAN: "/v1/steps/plan", EXECUTE: "/v1/steps/execute"}
CANCEL_PATH = "/v1/steps/cancel"
CREDENTIAL_PATH = "/v1/agent-credential"
"""On the SERVER: an agent pod trades its projected ServiceAccount token for its node's credential
(POST, Authorization: Bearer <token>; 200 {node, credential}). remediate.kube.enroll says who may."""
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
MAX_STEP_TIMEOUT = 24 * 3600.0
RETRYABLE = "retryable"
PERMANENT = "permanent"
ERROR_CLASSES = (RETRYABLE, PERMANENT)


# --------------------------------------------------------------------------- errors


class AgentRequestError(RemediateError):
    """The request is not a step request (bad JSON shape)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class WrongNodeError(RemediateError):
    """The step is for another node than this agent's."""


class NotANodeAction(ParamsError):
    """The action does not exist here or is not a `where: node` action."""


class AgentStopping(RetryableActionError):
    """The agent is stopping (SIGTERM): it starts no new step; another agent (or this one restarted) may."""


class AgentNotFound(Exception):
    """No agent URL for a node (yet). `retryable`: a pod may still be starting."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class AgentDirectory(ABC):
    """Node name -> agent base URL (remediate.executor.agent_calls.StaticAgents,
    remediate.kube.agents.KubernetesAgents)."""

    @abstractmethod
    def url_for(self, node: str) -> str:
        """The agent URL of `node`; AgentNotFound if there is none."""

    def forget(self, node: str) -> None:  # noqa: B027 - optional hook
        """Drop a cached answer for `node` (its agent did not answer)."""

    def known_name(self, names: Sequence[str]) -> str | None:
        """The first of `names` (one node's names) this directory knows without asking anyone; None: none, or
        it cannot tell without a lookup (the first name is then looked up)."""
        return None


# --------------------------------------------------------------------------- requests


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class CancelRequest:
    """Stop one running step: {run_id, step_index, target}, sent by a server whose executor is stopping."""

    run_id: int
    step_index: int
    target: str

    @classmethod
    def parse(cls, body: Any) -> CancelRequest:
        if not isinstance(body, dict):
            raise AgentRequestError("body", "must be a JSON object {run_id, step_index, target}")
        for name in ("run_id", "step_index"):
            if not _non_negative_int(body.get(name)):
                raise AgentRequestError(name, "must be a non-negative integer")
        if not isinstance(body.get("target"), str) or not body["target"]:
            raise AgentRequestError("target", "must be a non-empty string")
        return cls(run_id=body["run_id"], step_index=body["step_index"], target=body["target"])

    def encode(self) -> bytes:
        return json.dumps({"run_id": self.run_id, "step_index": self.step_index, "target": self.target}).encode()


@dataclass(frozen=True)
class StepRequest:
    """One step as the server sends it: {action, params, context: {run_id, ..., timeout}}."""

    action: str
    params: dict[str, Any]
    run_id: int
    step_index: int
    playbook: str
    target: str
    alert: dict[str, Any]
    timeout: float

    @classmethod
    def parse(cls, body: Any) -> StepRequest:
        if not isinstance(body, dict):
            raise AgentRequestError("body", "must be a JSON object {action, params, context}")
        action = body.get("action")
        if not isinstance(action, str) or not action:
            raise AgentRequestError("action", "must be a non-empty string")
        params = body.get("params", {})
        if not isinstance(params, dict):
            raise AgentRequestError("params", "must be an object")
        context = body.get("context")
        if not isinstance(context, dict):
            raise AgentRequestError(
                "context", "must be an object {run_id, step_index, playbook, target, alert, timeout}"
            )
        for name in ("run_id", "step_index"):
            if not _non_negative_int(context.get(name)):
                raise AgentRequestError(f"context.{name}", "must be a non-negative integer")
        for name in ("playbook", "target"):
            if not isinstance(context.get(name), str) or not context[name]:
                raise AgentRequestError(f"context.{name}", "must be a non-empty string")
        alert = context.get("alert", {})
        if not isinstance(alert, dict):
            raise AgentRequestError("context.alert", "must be an object")
        timeout = context.get("timeout")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= MAX_STEP_TIMEOUT:
            raise AgentRequestError("context.timeout", f"must be seconds, more than 0 and at most {MAX_STEP_TIMEOUT:g}")
        return cls(
            action=action,
            params=params,
            run_id=context["run_id"],
            step_index=context["step_index"],
            playbook=context["playbook"],
            target=context["target"],
            alert=alert,
            timeout=float(timeout),
        )

    def encode(self) -> bytes:
        """The JSON body `parse` reads (values JSON cannot hold are sent as their text)."""
        body = {
            "action": self.action,
            "params": self.params,
            "context": {
                "run_id": self.run_id,
                "step_index": self.step_index,
                "playbook": self.playbook,
                "target": self.target,
                "alert": self.alert,
                "timeout": self.timeout,
            },
        }
        return json.dumps(body, default=str).encode()


# --------------------------------------------------------------------------- answers


def answer_key(kind: str) -> str:
    """The field of a successful answer that holds the action's value: "plan" or "result"."""
    return "plan" if kind == PLAN else "result"


def step_answer(kind: str, node: str, value: Any, seconds: float) -> dict[str, Any]:
    """The 200 answer of a step: {node, plan|result, seconds}."""
    return {"node": node, answer_key(kind): value, "seconds": seconds}


@dataclass(frozen=True)
class ErrorAnswer:
    """A refusal or failure: HTTP `status` and the body {error, error_class, message, **extra}."""

    status: int
    error: str
    error_class: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": self.error, "error_class": self.error_class, "message": self.message, **self.extra}


def classify(exc: BaseException) -> tuple[str, str]:
    """(error_class, message) of a failed step, as the agent reports it to the server."""
    if isinstance(exc, RetryableActionError):
        return RETRYABLE, str(exc)
    if isinstance(exc, RemediateError):
        return PERMANENT, str(exc)
    return PERMANENT, f"unexpected {exc.__class__.__name__} in the agent: {exc}"


def error_answer(exc: BaseException, node: str) -> ErrorAnswer:
    """How the agent of `node` answers a request that raised `exc`."""
    if isinstance(exc, AgentRequestError):
        return ErrorAnswer(400, "invalid_request", PERMANENT, str(exc), {"field": exc.field})
    if isinstance(exc, WrongNodeError):
        return ErrorAnswer(421, "wrong_node", PERMANENT, str(exc), {"node": node})
    if isinstance(exc, ParamsError):
        return ErrorAnswer(422, "invalid_params", PERMANENT, str(exc))
    error_class, message = classify(exc)
    extra: dict[str, Any] = {"type": exc.__class__.__name__}
    if isinstance(exc, OutcomePending):
        # What to look for when the change may still happen: the server reconciles it later.
        extra["follow_up"] = exc.follow_up
    if isinstance(exc, PartialFailure):
        extra["result"] = exc.result  # what the action did before it failed: the server records it on the step
    return ErrorAnswer(503 if error_class == RETRYABLE else 500, "action_failed", error_class, message, extra)


def error_from_answer(data: Any, where: str) -> ActionError | None:
    """The exception an error answer of the agent stands for (None: `data` is no error answer).

    retryable -> RetryableActionError (the executor may retry); permanent with a `follow_up` ->
    OutcomePending (the change may still happen: reconciled later); permanent with a `result` ->
    PartialFailure (what the action did before failing); other permanent -> ActionError.
    """
    if not isinstance(data, dict) or data.get("error_class") not in ERROR_CLASSES:
        return None
    message = f"{data.get('message') or data.get('error') or 'failed'} (on {where})"
    if data["error_class"] == RETRYABLE:
        return RetryableActionError(message)
    if isinstance(data.get("follow_up"), dict):
        return OutcomePending(message, data["follow_up"])
    if isinstance(data.get("result"), dict):
        return PartialFailure(message, data["result"])
    return ActionError(message)
