"""Every request's id, its one access line (logger `remediate.access`) and its HTTP metrics, in the Flask app
of `serve`.

The id is the client's `X-Request-Id` when it is sane (a proxy's or AlertManager's tracing id: letters,
digits, `._:-`, at most 128), else a new one; it is answered in `X-Request-Id` and every record logged
while the request is answered carries it (remediate.logs.setup.REQUEST_ID), the audit events included, so
one id joins the access line to what the request did. Probes and scrapes (/healthz, /readyz, /metrics)
are logged at DEBUG: a kubelet's every 10 s would drown the rest.

The same answer counts once in remediate_http_requests_total and remediate_http_request_duration_seconds, by the
Flask URL rule that served it ("/runs/<int:run_id>", never the raw path: one series per route, not per run;
`no_route` for a 404/405 no rule matched) and its status code.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from flask import Flask, Response, g, request

from remediate.logs.setup import REQUEST_ID
from remediate.metrics import Metrics

log = logging.getLogger("remediate.access")

HEADER = "X-Request-Id"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
NO_ROUTE = "no_route"
"""The route label of a request no URL rule matched: its path would make a series per path."""


def request_id_from(header: str | None) -> str:
    """The client's id when it is sane (it goes into every line of the request), else a new one."""
    if header is not None and _SANE.fullmatch(header):
        return header
    return uuid.uuid4().hex


def _principal() -> str | None:
    """Who sent it, once known: the API's token (remediate.server.auth) or the pages' session."""
    if (principal := g.get("principal")) is not None:
        return str(principal)
    viewer = g.get("viewer")
    return getattr(viewer, "principal", None)


def init_app(app: Flask, metrics: Metrics) -> None:
    @app.before_request
    def _begin() -> None:
        g.request_started = time.monotonic()
        g.request_id = request_id_from(request.headers.get(HEADER))
        g.request_id_token = REQUEST_ID.set(g.request_id)

    @app.after_request
    def _access(response: Response) -> Response:
        # After every answer, an error handler's too (a 500: Flask logged the exception before, with the id).
        request_id = g.get("request_id")
        if request_id is None:
            return response
        response.headers[HEADER] = request_id
        route = request.url_rule.rule if request.url_rule is not None else None
        seconds = time.monotonic() - g.request_started
        metrics.http_request(route or NO_ROUTE, request.method, response.status_code, seconds)
        duration_ms = round(seconds * 1000, 1)
        log.log(
            logging.DEBUG if route in QUIET_ROUTES else logging.INFO,
            "%s %s %s %.1fms",
            request.method,
            route or request.path,
            response.status_code,
            duration_ms,
            extra={
                "method": request.method,
                "route": route,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": duration_ms,
                "principal": _principal(),
            },
        )
        return response

    @app.teardown_request
    def _end(_exc: Any) -> None:
        token = g.pop("request_id_token", None)
        if token is not None:
            try:
                REQUEST_ID.reset(token)
            except ValueError:  # set in another context (never in Flask today): clear it all the same
                REQUEST_ID.set(None)
