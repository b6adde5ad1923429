"""The record, read: GET /history (one page of decisions and their runs), GET /runs/<id> (one run, its
steps and attempts) and GET /report (the reliability figures of a window). Each needs the read role;
the JSON shapes are remediate.history.api's, which the CLI prints too."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, jsonify, request

from remediate.config.settings import READ
from remediate.errors import UnknownRunError
from remediate.history.api import history_json, run_json
from remediate.server.answers import error
from remediate.server.auth import requires
from remediate.server.queries import history_query, report_query
from remediate.services import Services


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("runs", __name__)
    store = services.store

    @bp.get("/history")
    @requires(services, READ)
    def history() -> Any:
        try:
            entries, cursor = store.history.page(history_query(request.args))
        except ValueError as exc:
            return error(400, "invalid_query", str(exc))
        return jsonify(history_json(entries, cursor))

    @bp.get("/runs/<int:run_id>")
    @requires(services, READ)
    def run(run_id: int) -> Any:
        try:
            return jsonify(run_json(store.history.run_detail(run_id)))
        except UnknownRunError as exc:
            return error(404, "not_found", str(exc))

    @bp.get("/report")
    @requires(services, READ)
    def report() -> Any:
        try:
            query = report_query(
                request.args,
                services.settings.report.job_labels,
                now=time.time(),
                playbooks=services.engine.playbooks.playbooks,
            )
        except ValueError as exc:
            return error(400, "invalid_query", str(exc))
        return jsonify(store.history.report(query).as_json())

    return bp
