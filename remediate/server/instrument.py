"""HTTP request metrics (remediate_http_requests_total, remediate_http_request_duration_seconds): one count
and one duration per answered request, by the Flask URL rule that served it ("/runs/<int:run_id>", never the
raw path: one series per route, not per run) and its status code."""

from __future__ import annotations

import time

from flask import Flask, Response, g, request

from remediate.metrics import Metrics

UNMATCHED = "unmatched"
"""The route label of a request no URL rule matched (a 404 or a 405): its path would make a series per path."""


def init_app(app: Flask, metrics: Metrics) -> None:
    @app.before_request
    def started() -> None:
        g.request_started = time.perf_counter()

    @app.after_request
    def answered(response: Response) -> Response:
        started_at = g.get("request_started")
        seconds = 0.0 if started_at is None else time.perf_counter() - started_at
        rule = request.url_rule
        metrics.http_request(UNMATCHED if rule is None else rule.rule, request.method, response.status_code, seconds)
        return response
