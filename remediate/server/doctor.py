"""GET /doctor: `remediate doctor`'s checks (remediate.doctor) for the playbooks this server holds now, as JSON.

The read role, as /breaker and /history: the checks change nothing and send only GET and HEAD requests (no
sink is notified); the answer names no secret. Always 200: the body's `status` is the worst check's (OK, WARN,
FAIL), as the CLI's exit code is."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from remediate.config.settings import READ
from remediate.doctor import Inputs, report_json, run_checks
from remediate.server.auth import requires
from remediate.services import Services


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("doctor", __name__)

    @bp.get("/doctor")
    @requires(services, READ)
    def doctor() -> Any:
        settings = services.settings
        playbooks = tuple(services.engine.playbooks.playbooks)
        checks = run_checks(Inputs(settings, playbooks, settings.prometheus.rule_files))
        return jsonify(report_json(checks))

    return bp
