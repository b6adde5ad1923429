"""What every HTTP resource answers with: the JSON error body, the fields of an operator's request body,
and the app-wide error handlers (`init_app`).

An error is always `{"error": <code>, "message": <what to do>, ...}` with its status, including
werkzeug's own (404, 405, 413), so a client never parses an HTML page.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from remediate.errors import StoreUnavailable
from remediate.services import Services

log = logging.getLogger("remediate.server")


def error(status: int, code: str, message: str, **extra: Any) -> tuple[Response, int]:
    return jsonify({"error": code, "message": message, **extra}), status


class BadBody(Exception):
    """A field of an operator request's body that cannot be used (400, naming the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def json_body() -> dict[str, Any] | None:
    """The optional JSON object body of an operator request; BadBody if one was sent but is not usable."""
    if not request.is_json or not request.get_data(cache=True):
        return None
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadBody("body", 'must be a JSON object, e.g. {"by": "alice", "reason": "..."}')
    return body


def text(body: dict[str, Any] | None, field: str, limit: int) -> str:
    value = body.get(field) if body is not None else None
    if value is None or value == "":
        return ""
    cut = str(value)[:limit]
    try:
        cut.encode("utf-8")
    except UnicodeEncodeError:
        raise BadBody(field, "must be valid Unicode text (no lone surrogates)") from None
    return cut


def actor() -> str:
    """Who did it: the authenticated principal. A body `by` is only a note beside it, never the identity."""
    note = text(json_body(), "by", 255)
    principal: str = g.principal
    # At most 255 characters (the approved_by column); the principal always survives the cut.
    return f"{principal} (note: {note})"[:255] if note and note != principal else principal


def init_app(app: Flask, services: Services) -> None:
    """The error handlers of every route but the pages' (remediate.server.ui answers with pages of its own)."""

    @app.errorhandler(StoreUnavailable)
    def store_unavailable(exc: StoreUnavailable) -> Any:
        # A locked or replaced database is a moment's unavailability (503: try again), not a bug (500).
        log.error("%s %s: %s", request.method, request.path, exc)
        return error(503, "store_unavailable", str(exc))

    @app.errorhandler(BadBody)
    def bad_body(exc: BadBody) -> Any:
        return error(400, "invalid_request", f"{exc.field}: {exc}", field=exc.field)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        code = exc.code or 500
        if code == 413:
            services.metrics.rejected.labels("413").inc()
        response, status = error(code, (exc.name or "error").lower().replace(" ", "_"), exc.description or "")
        # Keep the exception's own headers (a 405 must say Allow), but the body stays JSON.
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response, status
