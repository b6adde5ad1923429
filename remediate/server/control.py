"""The operator's levers: approve a run, pause and resume, the circuit breaker, the ladders, a reload.

Reading the state needs the read role, changing it the operator role; who changed it is the token's
principal (a body `by` is only a note beside it, answers.actor). Every change answers with the new state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from flask import Blueprint, g, jsonify, request

from remediate.config.settings import OPERATOR, READ
from remediate.errors import AlreadyPaused, NotPaused, RunStateError, UnknownRunError
from remediate.history.api import ladder_state_json, run_json
from remediate.live import RELOAD_ERRORS, read_live
from remediate.logs.audit import audit_event
from remediate.runs import LadderState
from remediate.server.answers import BadBody, actor, error, json_body, text
from remediate.server.approvals import approve_run
from remediate.server.auth import requires
from remediate.services import Services
from remediate.store import Store

log = logging.getLogger("remediate.server")


def ladders_json(services: Services, states: Iterable[LadderState]) -> list[dict[str, Any]]:
    """GET /ladders' entries: each state with the names of its playbook's rungs as loaded now."""

    def names(playbook: str) -> list[str] | None:
        loaded = services.engine.playbooks.get(playbook)
        return [r.name for r in loaded.rungs] if loaded is not None and loaded.is_ladder else None

    states = list(states)
    statuses = services.store.ladders.run_statuses(states)
    return [ladder_state_json(state, names(state.playbook), statuses.get(state.run_id)) for state in states]


def _pause_json(store: Store) -> dict[str, Any]:
    state = store.pause.state()
    return {"paused": state.paused, "by": state.by, "reason": state.reason, "since": state.since}


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("control", __name__)
    store = services.store

    @bp.post("/runs/<int:run_id>/approve")
    @requires(services, OPERATOR)
    def approve(run_id: int) -> Any:
        try:
            approve_run(store, services.wake, run_id, principal=g.principal, by=actor(), via="api")
        except UnknownRunError as exc:
            return error(404, "not_found", str(exc))
        except RunStateError as exc:
            return error(409, "conflict", str(exc))
        return jsonify(run_json(store.history.run_detail(run_id)))

    @bp.get("/pause")
    @requires(services, READ)
    def pause_state() -> Any:
        return jsonify(_pause_json(store))

    @bp.post("/pause")
    @requires(services, OPERATOR)
    def pause() -> Any:
        body = json_body()
        reason = text(body, "reason", 1000)
        force = body.get("force", False) if body is not None else False
        if not isinstance(force, bool):
            raise BadBody("force", "must be true or false")
        try:
            store.pause.set(True, by=actor(), reason=reason, now=time.time(), replace=force)
        except AlreadyPaused as exc:
            # Who paused and why are the operator's record of an incident: replaced only on purpose.
            return error(409, "already_paused", str(exc), paused_by=exc.by, reason=exc.reason, since=exc.since)
        audit_event("pause", principal=g.principal, reason=reason, replaced=force, via="api")
        return jsonify(_pause_json(store))

    @bp.post("/resume")
    @requires(services, OPERATOR)
    def resume() -> Any:
        try:
            store.pause.set(False, by=actor(), reason="", now=time.time(), replace=False)
        except NotPaused as exc:
            return error(409, "not_paused", str(exc))
        audit_event("resume", principal=g.principal, via="api")
        return jsonify(_pause_json(store))

    @bp.get("/breaker")
    @requires(services, READ)
    def breaker_status() -> Any:
        return jsonify(services.executor.breaker.status())

    @bp.post("/breaker/reset")
    @requires(services, OPERATOR)
    def breaker_reset() -> Any:
        reason = text(json_body(), "reason", 1000)
        status = services.executor.breaker.reset(by=actor(), reason=reason)
        if status["reset"]:
            audit_event("breaker_reset", level=logging.WARNING, principal=g.principal, reason=reason, via="api")
        return jsonify(status)

    @bp.get("/ladders")
    @requires(services, READ)
    def ladders() -> Any:
        unknown = sorted(set(request.args) - {"target", "node", "playbook"})
        if unknown:
            return error(400, "invalid_query", f"unknown query parameter {unknown[0]!r} (known: playbook, target)")
        target = request.args.get("target") or request.args.get("node") or None
        states = store.ladders.read(target=target, playbook=request.args.get("playbook") or None)
        return jsonify({"ladders": ladders_json(services, states)})

    @bp.post("/ladders/reset")
    @requires(services, OPERATOR)
    def ladders_reset() -> Any:
        body = json_body()
        target = text(body, "target", 255)
        if not target:
            raise BadBody("target", "required: the target (node) whose ladders to reset")
        playbook = text(body, "playbook", 128) or None
        reason = text(body, "reason", 1000)
        states = store.ladders.reset(target, playbook=playbook, by=actor(), reason=reason, now=time.time())
        if not states:
            which = f" of playbook {playbook}" if playbook else ""
            return error(404, "not_found", f"no ladder{which} for target {target}")
        audit_event(
            "ladder_reset", level=logging.WARNING, principal=g.principal, target=target, playbook=playbook,
            reason=reason, ladders=len(states),
        )  # fmt: skip
        return jsonify({"ladders": ladders_json(services, states)})

    @bp.post("/-/reload")
    @requires(services, OPERATOR)
    def reload() -> Any:
        # Read here first, so the answer says which file is wrong; the master reads again (SIGHUP's path).
        try:
            live = read_live(services.settings)
        except RELOAD_ERRORS as exc:
            services.metrics.reload.refused()
            audit_event("reload_asked", level=logging.ERROR, principal=g.principal, outcome="refused", error=str(exc))
            file = getattr(exc, "file", None) or services.settings.server.config_file
            message = f"reload refused, the running set kept: {exc}"
            return error(422, "invalid_playbooks", message, file=None if file is None else str(file))
        if not services.apply(live):
            audit_event("reload_asked", level=logging.ERROR, principal=g.principal, outcome="not_applied")
            return error(503, "reload_not_applied", "the server did not apply the reload in time: its log says why")
        audit_event("reload_asked", principal=g.principal, outcome="applied", playbooks=len(live.playbooks))
        answer = {"reloaded": True, "count": len(live.playbooks), "playbooks": live.names}
        answer["sinks"] = [sink.name for sink in live.sinks]
        if missing := live.unconfigured():
            answer["warning"] = missing
        return jsonify(answer)

    return bp
