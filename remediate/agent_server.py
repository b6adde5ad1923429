"""The HTTP face of the node agent: a Flask app factory. Only this module (and server.py) knows HTTP.

Endpoints (on the /v1 routes: requests signed with this node's credential, remediate.agentauth; the
answer to a request whose signature was accepted carries the agent's signature, X-Remediate-Answer):

- POST /v1/steps/plan, POST /v1/steps/execute: body {action, params, context: {run_id,
  step_index, playbook, target, alert, timeout}}. 200 {node, plan|result, seconds}; an error is
  {error, error_class: retryable|permanent, message}: 400 not a step request, 401 missing, wrong,
  stale or replayed signature, 403 signed for another node than the step's target,
  415 not JSON, 421 a step for another node, 422 unknown/not-a-node action or invalid
  params, 500 the action failed (permanent), 503 the action failed and may succeed later
  (also: the agent is stopping and starts no new step, or its state file is busy).
- POST /v1/steps/cancel: body {run_id, step_index, target}, signed like a step. The server's
  executor is stopping while it waits for that step: the agent sets the step's `stopping` event
  (a training step withdraws a command the job has not taken) and the step's own request answers
  as usual. 200 {node, running: N} (0: that step is not running here).
- GET /healthz (alive), GET /readyz (state file readable; names the node and its actions).

The paths, the request parsing and the error answers are remediate.agent_protocol's, shared with the
server's AgentRunner; gunicorn serves this app through remediate.serving.run_agent.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from remediate.agent import AgentService, agent_verifier
from remediate.agent_protocol import (
    CANCEL_PATH,
    EXECUTE,
    HEALTH_PATH,
    PERMANENT,
    PLAN,
    READY_PATH,
    RETRYABLE,
    STEP_PATHS,
    AgentRequestError,
    CancelRequest,
    ErrorAnswer,
    StepRequest,
    WrongNodeError,
    error_answer,
)
from remediate.agentauth import ANSWER_HEADER, SCHEME, AgentAuthError, NotThisNode
from remediate.config import Settings
from remediate.errors import RemediateError, StoreUnavailable

log = logging.getLogger("remediate.agent")

MAX_BODY_BYTES = 4 * 1024 * 1024


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def stop_running_steps(app: Flask) -> None:
    """The worker's SIGTERM hook (remediate.httpworker): tell the agent's running steps to stop."""
    app.extensions["remediate-agent"].stop_all()


def create_agent_app(settings: Settings, *, service: AgentService | None = None) -> Flask:
    service = service or AgentService(settings)
    seen = service.store.seen() if service.store is not None else None
    verifier = agent_verifier(settings, service.node_name, service.names, seen=seen)
    if verifier is None:
        log.warning("AGENT AUTHENTICATION IS OFF (--insecure-no-auth)")
    app = Flask("remediate-agent")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.extensions["remediate-agent"] = service

    def error(status: int, name: str, error_class: str, message: str, **extra: Any) -> tuple[Response, int]:
        return answer(ErrorAnswer(status, name, error_class, message, extra))

    def answer(refusal: ErrorAnswer) -> tuple[Response, int]:
        return jsonify(refusal.body()), refusal.status

    def authenticate(kind: str, body: bytes) -> tuple[str | None, tuple[Response, int] | None]:
        """(the node the request is signed for, None) or (None, the refusal to answer)."""
        caller = request.remote_addr
        if verifier is None:
            return None, None
        try:
            signed = verifier.verify_request(request.headers.get("Authorization", ""), "POST", request.path, body)
        except (StoreUnavailable, sqlite3.Error) as exc:
            # The state file that keeps the signatures seen could not take this one (busy, replaced): nothing
            # runs unrecorded; the server may try again later.
            log.warning("refused %s from %s: the state file cannot record its signature: %s", kind, caller, exc)
            return None, error(503, "state_unavailable", RETRYABLE, f"agent state file: {exc}")
        except NotThisNode as exc:
            log.warning("refused %s from %s: %s", kind, caller, exc)
            return None, answer(error_answer(WrongNodeError(f"wrong agent: {exc}"), service.node_name))
        except AgentAuthError as exc:
            log.warning("refused %s from %s: %s", kind, caller, exc)
            response, status = error(401, "unauthorized", PERMANENT, f"agent credential: {exc}")
            response.headers["WWW-Authenticate"] = f'{SCHEME} realm="remediate-agent"'
            return None, (response, status)
        g.signed_request = signed  # the answer to it is signed (sign_answer below)
        return signed.node, None

    def signed_request(kind: str, parse: Callable[[Any], Any]) -> tuple[str | None, Any, tuple[Response, int] | None]:
        """(the node it is signed for, the parsed request, None), or (None, None, the refusal to answer):
        the credential, then the content type, then the body, as every POST of the agent checks them."""
        body = request.get_data(cache=True)
        signed_for, refused = authenticate(kind, body)
        if refused is not None:
            return None, None, refused
        if request.mimetype != "application/json":
            return None, None, error(415, "unsupported_media_type", PERMANENT, "send Content-Type: application/json")
        try:
            return signed_for, parse(_json_or_none(body)), None
        except AgentRequestError as exc:
            return None, None, answer(error_answer(exc, service.node_name))

    def step(kind: str) -> Any:
        caller = request.remote_addr
        signed_for, step_request, refused = signed_request(kind, StepRequest.parse)
        if refused is not None:
            return refused
        # The audit line of every call: which run and step, what, with which params, from whom.
        log.info(
            "call %s run %s step %s playbook %s action %s target %s params %s from %s (signed for %s)",
            kind,
            step_request.run_id,
            step_request.step_index,
            step_request.playbook,
            step_request.action,
            step_request.target,
            json.dumps(step_request.params, sort_keys=True, default=str)[:2000],
            caller,
            signed_for or "nobody: --insecure-no-auth",
        )
        if signed_for is not None and step_request.target != signed_for:
            log.warning(
                "refused run %s: signed for %s, target %s", step_request.run_id, signed_for, step_request.target
            )
            return error(
                403,
                "wrong_credential",
                PERMANENT,
                f"the request is signed for node {signed_for!r} but its step targets {step_request.target!r}",
            )
        try:
            return jsonify(service.run(kind, step_request))
        except Exception as exc:
            if not isinstance(exc, RemediateError):
                log.exception("unexpected error in %s of %s", kind, step_request.action)
            return answer(error_answer(exc, service.node_name))

    @app.post(STEP_PATHS[PLAN])
    def plan() -> Any:
        return step(PLAN)

    @app.post(STEP_PATHS[EXECUTE])
    def execute() -> Any:
        return step(EXECUTE)

    @app.post(CANCEL_PATH)
    def cancel() -> Any:
        signed_for, cancel_request, refused = signed_request("cancel", CancelRequest.parse)
        if refused is not None:
            return refused
        log.info(
            "call cancel run %s step %s target %s from %s (signed for %s)",
            cancel_request.run_id,
            cancel_request.step_index,
            cancel_request.target,
            request.remote_addr,
            signed_for or "nobody: --insecure-no-auth",
        )
        if signed_for is not None and cancel_request.target != signed_for:
            return error(
                403,
                "wrong_credential",
                PERMANENT,
                f"the request is signed for node {signed_for!r} but names target {cancel_request.target!r}",
            )
        try:
            running = service.stop_step(cancel_request)
        except WrongNodeError as exc:
            return answer(error_answer(exc, service.node_name))
        return jsonify({"node": service.node_name, "running": running})

    @app.after_request
    def sign_answer(response: Response) -> Response:
        # Only the answer to a request that carried this node's valid signature is signed: the server refuses
        # any other, and a caller without the credential gets no signature made for a nonce it chose.
        signed = g.get("signed_request")
        if verifier is not None and signed is not None:
            response.headers[ANSWER_HEADER] = verifier.sign_answer(
                signed, request.path, response.status_code, response.get_data()
            )
        return response

    @app.get(HEALTH_PATH)
    def healthz() -> Any:
        return jsonify({"status": "ok", "node": service.node_name})

    @app.get(READY_PATH)
    def readyz() -> Any:
        try:
            return jsonify(service.ready())
        except sqlite3.Error as exc:
            return error(503, "state_unreadable", RETRYABLE, f"agent state file: {exc.__class__.__name__}")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        code = exc.code or 500
        response, status = error(
            code, (exc.name or "error").lower().replace(" ", "_"), PERMANENT, exc.description or ""
        )
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response, status

    return app
