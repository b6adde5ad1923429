"""The HTTP face of remediate: a Flask app factory. The only module that knows HTTP.

Endpoints: POST /webhook (AlertManager v4), GET /history, GET /runs/<id>,
POST /runs/<id>/approve, GET|POST /pause, POST /resume, GET /breaker,
POST /breaker/reset, GET /ladders, POST /ladders/reset, POST /v1/agent-credential (agent pods, with their own
ServiceAccount token), /healthz, /readyz, /metrics, and the web pages
under /ui/ (remediate.ui) unless the `ui` setting is off. The webhook answers 200 only
once the notification and its runs are committed; executing happens in the
executor, never inside the request.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from remediate.agent_protocol import CREDENTIAL_PATH
from remediate.alerts import parse_timestamp
from remediate.config import OPERATOR, READ, WEBHOOK, Credential, Settings
from remediate.durations import parse_duration
from remediate.errors import AlreadyPaused, PayloadError, RunStateError, StoreUnavailable, UnknownRunError
from remediate.history_api import history_json, ladder_state_json, run_json
from remediate.kube.enroll import EnrollmentRefused
from remediate.kube.errors import KubeError, KubeUnavailable
from remediate.metrics import ReliabilityCollector, exposition
from remediate.services import Services, build_services, pool_limits
from remediate.store import HistoryQuery, ReportQuery, Store

__all__ = ["Services", "build_services", "create_app", "pool_limits"]

log = logging.getLogger("remediate.server")

MAX_HISTORY_LIMIT = 1000
MAX_AGENT_TOKEN_BYTES = 16 * 1024
"""A projected ServiceAccount token (a JWT) is 1-2 KiB; anything far larger is not sent to the API server."""
LARGE_BODY_BYTES = 1024 * 1024
"""A webhook body over this (or of unknown length) is parsed one at a time per worker process:
parsing costs about 11-13 bytes of memory per body byte (docs/benchmarks.md), so with several
threads per worker, large bodies at once would multiply a worker's peak."""


def create_app(settings: Settings, *, services: Services | None = None) -> Flask:
    services = services or build_services(settings)
    if not services.credentials:
        log.warning(
            "AUTHENTICATION IS OFF (--insecure-no-auth): anyone who can reach %s can trigger remediation",
            settings.bind,
        )
    app = Flask("remediate")
    # One byte more than allowed: werkzeug silently cuts a body without Content-Length (chunked)
    # at this limit, so /webhook reads up to it and refuses a body that reached it.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions["remediate"] = services
    _register_routes(app, services)
    return app


def _error(status: int, error: str, message: str, **extra: Any) -> tuple[Response, int]:
    return jsonify({"error": error, "message": message, **extra}), status


class _Unauthenticated(Exception):
    """No token, or one the server does not know (401)."""


def _principal(services: Services) -> Credential | None:
    """The credential of the request's bearer token; None when authentication is off."""
    if not services.credentials:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise _Unauthenticated()
    presented_bytes = presented.strip().encode()
    found = None
    # Compare with every token (constant time each) so the answer's timing does not say which matched.
    for credential in services.credentials:
        if hmac.compare_digest(presented_bytes, credential.token.encode()):
            found = credential
    if found is None:
        raise _Unauthenticated()
    return found


def _requires(services: Services, need: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """401 for a missing or unknown token, 403 for a known token without the `need` role."""

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                credential = _principal(services)
            except _Unauthenticated:
                if view.__name__ == "webhook":
                    services.metrics.rejected.labels("401").inc()
                response, status = _error(401, "unauthorized", "missing or unknown bearer token")
                response.headers["WWW-Authenticate"] = 'Bearer realm="remediate"'
                return response, status
            if credential is not None and not credential.allows(need):
                if view.__name__ == "webhook":
                    services.metrics.rejected.labels("403").inc()
                roles = ", ".join(sorted(credential.roles))
                return _error(
                    403,
                    "forbidden",
                    f"the token of {credential.name!r} ({roles}) may not do this: it needs the {need} role",
                    principal=credential.name,
                )
            g.principal = credential.name if credential is not None else f"http:{request.remote_addr}"
            return view(*args, **kwargs)

        wrapper.__name__ = view.__name__
        return wrapper

    return decorate


class _BadBody(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _body() -> dict[str, Any] | None:
    """The optional JSON object body of an operator request; _BadBody if one was sent but is not usable."""
    if not request.is_json or not request.get_data(cache=True):
        return None
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise _BadBody("body", 'must be a JSON object, e.g. {"by": "alice", "reason": "..."}')
    return body


def _text(body: dict[str, Any] | None, field: str, limit: int) -> str:
    value = body.get(field) if body is not None else None
    if value is None or value == "":
        return ""
    text = str(value)[:limit]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _BadBody(field, "must be valid Unicode text (no lone surrogates)") from None
    return text


def _actor() -> str:
    """Who did it: the authenticated principal. A body `by` is only a note beside it, never the identity."""
    note = _text(_body(), "by", 255)
    principal: str = g.principal
    # At most 255 characters (the approved_by column); the principal always survives the cut.
    return f"{principal} (note: {note})"[:255] if note and note != principal else principal


def _register_routes(app: Flask, services: Services) -> None:
    store = services.store
    large_body = threading.BoundedSemaphore(1)

    @app.post("/webhook")
    @_requires(services, WEBHOOK)
    def webhook() -> Any:
        length = request.content_length
        if length is not None and length > services.settings.max_body_bytes:
            services.metrics.rejected.labels("413").inc()
            return _error(413, "payload_too_large", f"body over {services.settings.max_body_bytes} bytes")
        if request.mimetype != "application/json":
            services.metrics.rejected.labels("415").inc()
            return _error(415, "unsupported_media_type", "send Content-Type: application/json")
        if length is not None and length <= LARGE_BODY_BYTES:
            return _ingest()
        if not large_body.acquire(timeout=services.settings.store_busy_timeout):
            services.metrics.rejected.labels("503").inc()
            return _error(503, "busy", "another large notification is being stored; AlertManager will retry")
        try:
            return _ingest()
        finally:
            large_body.release()

    def _ingest() -> Any:
        body = request.get_data(cache=False)
        if len(body) > services.settings.max_body_bytes:
            services.metrics.rejected.labels("413").inc()
            return _error(413, "payload_too_large", f"body over {services.settings.max_body_bytes} bytes")
        try:
            result = services.engine.ingest_body(body, received_at=time.time())
            # The commit went to the file this process has open; if the path names another file now
            # (deleted, replaced), nobody will ever read it: AlertManager must send it again.
            store.check_file()
        except PayloadError as exc:
            services.metrics.rejected.labels("400").inc()
            return _error(400, "invalid_payload", exc.detail, field=exc.field)
        except StoreUnavailable as exc:
            log.error("could not store a notification: %s", exc)
            services.metrics.rejected.labels("503").inc()
            return _error(503, "store_unavailable", f"{exc}; AlertManager will retry")
        except sa.exc.SQLAlchemyError:
            log.exception("could not store a notification")
            services.metrics.rejected.labels("503").inc()
            return _error(503, "store_unavailable", "the notification could not be stored; AlertManager will retry")
        services.metrics.record_ingest(result)
        return app.response_class(result.summary_json(), mimetype="application/json")

    @app.get("/history")
    @_requires(services, READ)
    def history() -> Any:
        try:
            query = _history_query(request.args)
            entries, cursor = store.history(query)
        except ValueError as exc:
            return _error(400, "invalid_query", str(exc))
        return jsonify(history_json(entries, cursor))

    @app.get("/runs/<int:run_id>")
    @_requires(services, READ)
    def run(run_id: int) -> Any:
        try:
            return jsonify(run_json(store.run_detail(run_id)))
        except UnknownRunError as exc:
            return _error(404, "not_found", str(exc))

    @app.post("/runs/<int:run_id>/approve")
    @_requires(services, OPERATOR)
    def approve(run_id: int) -> Any:
        try:
            store.approve(run_id, by=_actor(), now=time.time())
        except UnknownRunError as exc:
            return _error(404, "not_found", str(exc))
        except RunStateError as exc:
            return _error(409, "conflict", str(exc))
        services.wake()
        return jsonify(run_json(store.run_detail(run_id)))

    @app.get("/pause")
    @_requires(services, READ)
    def pause_state() -> Any:
        return jsonify(_pause_json(store))

    @app.post("/pause")
    @_requires(services, OPERATOR)
    def pause() -> Any:
        body = _body()
        reason = _text(body, "reason", 1000)
        force = body.get("force", False) if body is not None else False
        if not isinstance(force, bool):
            raise _BadBody("force", "must be true or false")
        try:
            store.set_paused(True, by=_actor(), reason=reason, now=time.time(), replace=force)
        except AlreadyPaused as exc:
            # Who paused and why are the operator's record of an incident: replaced only on purpose.
            return _error(409, "already_paused", str(exc), paused_by=exc.by, reason=exc.reason, since=exc.since)
        return jsonify(_pause_json(store))

    @app.post("/resume")
    @_requires(services, OPERATOR)
    def resume() -> Any:
        store.set_paused(False, by=_actor(), reason="", now=time.time())
        return jsonify(_pause_json(store))

    @app.get("/breaker")
    @_requires(services, READ)
    def breaker_status() -> Any:
        return jsonify(services.executor.breaker.status())

    @app.post("/breaker/reset")
    @_requires(services, OPERATOR)
    def breaker_reset() -> Any:
        reason = _text(_body(), "reason", 1000)
        status = services.executor.breaker.reset(by=_actor(), reason=reason)
        if status["reset"]:
            log.warning("circuit breaker reset by %s%s", status["reset_by"], f": {reason}" if reason else "")
        return jsonify(status)

    def _ladders_json(states: list[Any]) -> list[dict[str, Any]]:
        def names(playbook: str) -> list[str] | None:
            loaded = services.engine.playbooks.get(playbook)
            return [r.name for r in loaded.rungs] if loaded is not None and loaded.is_ladder else None

        return [ladder_state_json(state, names(state.playbook)) for state in states]

    @app.get("/ladders")
    @_requires(services, READ)
    def ladders() -> Any:
        unknown = sorted(set(request.args) - {"target", "node", "playbook"})
        if unknown:
            return _error(400, "invalid_query", f"unknown query parameter {unknown[0]!r} (known: playbook, target)")
        target = request.args.get("target") or request.args.get("node") or None
        states = store.ladders(target=target, playbook=request.args.get("playbook") or None)
        return jsonify({"ladders": _ladders_json(states)})

    @app.post("/ladders/reset")
    @_requires(services, OPERATOR)
    def ladders_reset() -> Any:
        body = _body()
        target = _text(body, "target", 255)
        if not target:
            raise _BadBody("target", "required: the target (node) whose ladders to reset")
        playbook = _text(body, "playbook", 128) or None
        reason = _text(body, "reason", 1000)
        states = store.reset_ladders(target, playbook=playbook, by=_actor(), reason=reason, now=time.time())
        if not states:
            which = f" of playbook {playbook}" if playbook else ""
            return _error(404, "not_found", f"no ladder{which} for target {target}")
        log.warning("ladders of %s%s reset by %s", target, f" ({playbook})" if playbook else "", g.principal)
        return jsonify({"ladders": _ladders_json(states)})

    if services.settings.ui:
        # The web pages (remediate.ui, docs/ui.md): the same store, tokens, breaker and parsers as the API.
        from remediate.ui import UiDeps, create_blueprint
        from remediate.ui.session import secret_key

        ui_deps = UiDeps(
            store=store,
            credentials=services.credentials,
            breaker=services.executor.breaker,
            wake=services.wake,
            history_query=_history_query,
            ladders=lambda: _ladders_json(store.ladders()),
            secret_key=secret_key(services.settings.ui_secret_file, services.credentials),
            cookie_always_secure=services.settings.ui_cookie_secure == "always",
        )
        app.register_blueprint(create_blueprint(ui_deps))

    @app.post(CREDENTIAL_PATH)
    def agent_credential() -> Any:
        """An agent pod's own node credential, for the pod's projected ServiceAccount token (remediate.kube.enroll):
        authenticated by that token alone, so none of the server's bearer tokens is needed (nor accepted)."""
        enrollment = services.agent_enrollment
        if enrollment is None:
            return _error(
                404,
                "not_found",
                "this server hands out no agent credentials: it finds no agents through Kubernetes "
                "(agent_selector) or has no agent_token",
            )
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_AGENT_TOKEN_BYTES:
            response, status = _error(
                401,
                "unauthorized",
                "send the agent pod's projected ServiceAccount token: Authorization: Bearer <token>",
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="remediate-agent-credential"'
            return response, status
        try:
            pod, credential = enrollment.issue(token)
        except EnrollmentRefused as exc:
            log.warning("refused an agent credential to %s: %s", request.remote_addr, exc)
            return _error(exc.status, "unauthorized" if exc.status == 401 else "forbidden", str(exc))
        except (KubeError, KubeUnavailable) as exc:
            log.warning("cannot check the agent token of %s: %s", request.remote_addr, exc)
            return _error(503, "kube_unavailable", f"cannot ask the Kubernetes API whose token this is: {exc}")
        log.info(
            "gave the agent credential of node %s to pod %s/%s (%s)",
            pod.node,
            pod.namespace,
            pod.pod,
            request.remote_addr,
        )
        return jsonify({"node": pod.node, "credential": credential})

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Any:
        # Ready means a notification can be stored now: the file is still ours and a write commits
        # (not only a read: a read-only, full or deleted database still answers reads).
        try:
            store.probe_write()
        except StoreUnavailable as exc:
            return _error(503, "store_unavailable", str(exc))
        except sa.exc.SQLAlchemyError as exc:
            return _error(503, "store_unreachable", f"{exc.__class__.__name__}: {getattr(exc, 'orig', '') or ''}")
        ready: dict[str, Any] = {"status": "ready", "playbooks": len(services.engine.playbooks)}
        if services.executor_beat is not None:
            # Shown, not judged: the master replaces an executor process whose beat is older than the lease.
            age = services.executor_beat.age()
            ready["executor"] = {
                "heartbeat_age_s": None if age is None else round(age, 3),
                "lease_s": services.settings.lease,
            }
        return jsonify(ready)

    # /metrics needs no token: `report_window: 0` keeps node and job names (and the read) off it.
    reliability = (
        ReliabilityCollector(
            store,
            window=services.settings.report_window,
            max_age=services.settings.report_cache,
            job_labels=services.settings.report_job_labels,
        )
        if services.settings.report_window > 0
        else None
    )

    @app.get("/report")
    @_requires(services, READ)
    def report() -> Any:
        try:
            query = report_query(request.args, services.settings.report_job_labels, now=time.time())
        except ValueError as exc:
            return _error(400, "invalid_query", str(exc))
        return jsonify(store.report(query).as_json())

    @app.get("/metrics")
    def metrics() -> Any:
        body = exposition(services.metrics_registry, store, reliability, services.executor_beat)
        return Response(body, mimetype="text/plain; version=0.0.4")

    @app.errorhandler(StoreUnavailable)
    def store_unavailable(exc: StoreUnavailable) -> Any:
        # A locked or replaced database is a moment's unavailability (503: try again), not a bug (500).
        log.error("%s %s: %s", request.method, request.path, exc)
        return _error(503, "store_unavailable", str(exc))

    @app.errorhandler(_BadBody)
    def bad_body(exc: _BadBody) -> Any:
        return _error(400, "invalid_request", f"{exc.field}: {exc}", field=exc.field)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        code = exc.code or 500
        if code == 413:
            services.metrics.rejected.labels("413").inc()
        response, status = _error(code, (exc.name or "error").lower().replace(" ", "_"), exc.description or "")
        # Keep the exception's own headers (a 405 must say Allow), but the body stays JSON.
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response, status


def _pause_json(store: Store) -> dict[str, Any]:
    state = store.pause_state()
    return {"paused": state.paused, "by": state.by, "reason": state.reason, "since": state.since}


def _history_query(args: Any) -> HistoryQuery:
    known = {"playbook", "alertname", "target", "node", "status", "since", "until", "limit", "cursor"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"unknown query parameter {unknown[0]!r} (known: {', '.join(sorted(known))})")
    limit_text = args.get("limit", "50")
    try:
        limit = int(limit_text)
    except ValueError:
        raise ValueError(f"limit must be a whole number, got {limit_text!r}") from None
    if not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_HISTORY_LIMIT}")
    return HistoryQuery(
        playbook=args.get("playbook") or None,
        alertname=args.get("alertname") or None,
        target=args.get("target") or args.get("node") or None,
        status=args.get("status") or None,
        since=parse_time_arg(args.get("since"), "since"),
        until=parse_time_arg(args.get("until"), "until"),
        limit=limit,
        cursor=args.get("cursor") or None,
    )


DEFAULT_REPORT_SINCE = "7d"


def report_query(args: Any, job_labels: Sequence[str], *, now: float) -> ReportQuery:
    """GET /report's (and `remediate report`'s) window: `since` a duration back from `until` (7d, the
    default) or a time (RFC 3339, UNIX seconds); `until` a time, default now."""
    unknown = sorted(set(args) - {"since", "until"})
    if unknown:
        raise ValueError(f"unknown query parameter {unknown[0]!r} (known: since, until)")
    until = parse_time_arg(args.get("until"), "until") or now
    since_text = (args.get("since") or DEFAULT_REPORT_SINCE).strip()
    try:
        float(since_text)
    except ValueError:
        try:
            since = until - parse_duration(since_text).total_seconds()
        except ValueError:
            since = _required_time(since_text)
    else:
        since = float(since_text)
    if since >= until:
        raise ValueError("since must be before until")
    return ReportQuery(since=since, until=until, job_labels=tuple(job_labels))


def _required_time(text: str) -> float:
    try:
        moment = parse_time_arg(text, "since")
    except ValueError:
        raise ValueError("since must be a duration (7d, 24h) or a time (RFC 3339, UNIX seconds)") from None
    assert moment is not None
    return moment


def parse_time_arg(value: str | None, name: str) -> float | None:
    """RFC 3339 timestamps or UNIX seconds."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_timestamp(value, name).timestamp()
    except PayloadError:
        raise ValueError(f"{name} must be an RFC 3339 time (2026-11-21T05:40:14Z) or UNIX seconds") from None
