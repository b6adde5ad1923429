"""The HTTP face of the node agent: a Flask app factory. Only this module (and server.py) knows HTTP.

Endpoints (bearer token `agent_token`, compared in constant time, on the /v1 routes):

- POST /v1/steps/plan, POST /v1/steps/execute: body {action, params, context: {run_id,
  step_index, playbook, target, alert, timeout}}. 200 {node, plan|result, seconds}; an error is
  {error, error_class: retryable|permanent, message}: 400 not a step request, 401 token,
  415 not JSON, 421 a step for another node, 422 unknown/not-a-node action or invalid
  params, 500 the action failed (permanent), 503 the action failed and may succeed later.
- GET /healthz (alive), GET /readyz (state file readable; names the node and its actions).
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import sqlalchemy as sa
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from remediate.agent import (
    EXECUTE,
    PERMANENT,
    PLAN,
    RETRYABLE,
    AgentRequestError,
    AgentService,
    StepRequest,
    WrongNodeError,
    check_agent_settings,
    classify,
)
from remediate.config import Settings
from remediate.errors import OutcomePending, ParamsError, RemediateError

log = logging.getLogger("remediate.agent")

MAX_BODY_BYTES = 4 * 1024 * 1024


def create_agent_app(settings: Settings, *, service: AgentService | None = None) -> Flask:
    token = check_agent_settings(settings)
    service = service or AgentService(settings)
    if token is None:
        log.warning("AGENT AUTHENTICATION IS OFF (--insecure-no-auth)")
    app = Flask("remediate-agent")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.extensions["remediate-agent"] = service

    def error(status: int, name: str, error_class: str, message: str, **extra: Any) -> tuple[Response, int]:
        return jsonify({"error": name, "error_class": error_class, "message": message, **extra}), status

    def authorized() -> bool:
        if token is None:
            return True
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())

    def step(kind: str) -> Any:
        if not authorized():
            response, status = error(401, "unauthorized", PERMANENT, "missing or wrong agent token")
            response.headers["WWW-Authenticate"] = 'Bearer realm="remediate-agent"'
            return response, status
        if request.mimetype != "application/json":
            return error(415, "unsupported_media_type", PERMANENT, "send Content-Type: application/json")
        try:
            step_request = StepRequest.parse(request.get_json(silent=True))
        except AgentRequestError as exc:
            return error(400, "invalid_request", PERMANENT, str(exc), field=exc.field)
        try:
            return jsonify(service.run(kind, step_request))
        except WrongNodeError as exc:
            return error(421, "wrong_node", PERMANENT, str(exc), node=service.node_name)
        except ParamsError as exc:
            return error(422, "invalid_params", PERMANENT, str(exc))
        except Exception as exc:
            if not isinstance(exc, RemediateError):
                log.exception("unexpected error in %s of %s", kind, step_request.action)
            error_class, message = classify(exc)
            status = 503 if error_class == RETRYABLE else 500
            # What to look for when the change may still happen: the server reconciles it later.
            extra = {"follow_up": exc.follow_up} if isinstance(exc, OutcomePending) else {}
            return error(status, "action_failed", error_class, message, type=exc.__class__.__name__, **extra)

    @app.post("/v1/steps/plan")
    def plan() -> Any:
        return step(PLAN)

    @app.post("/v1/steps/execute")
    def execute() -> Any:
        return step(EXECUTE)

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify({"status": "ok", "node": service.node_name})

    @app.get("/readyz")
    def readyz() -> Any:
        try:
            return jsonify(service.ready())
        except sa.exc.SQLAlchemyError as exc:
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
