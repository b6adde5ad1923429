"""The HTTP face of remediate: `create_app`, the Flask app factory. Only this package (its pages in ui/
included) knows HTTP.

Each resource is a module with a `create_blueprint(services)` (webhook, runs, control, agents, health, slack,
doctor; the pages' is remediate.server.ui's), handed the process's services (remediate.services) explicitly: no
module holds state. auth.py checks bearer tokens per route, answers.py holds the error shape and the app-wide error
handlers, queries.py parses the query strings; approvals.py is the one way a run is approved (API, page,
Slack), ratelimit.py bounds unauthenticated requests. docs/openapi.yaml describes the routes.

May import: every stage's public face (services, store, judging's ladder, the breaker, history's shapes) and
Flask; nothing imports it but the process model (remediate.serve) and the tests.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Flask

from remediate.config.settings import Settings
from remediate.server import agents, answers, control, doctor, health, requestlog, runs, slack, webhook
from remediate.server.queries import history_query, repeat_rules
from remediate.services import Services, build_services

__all__ = ["Services", "build_services", "create_app"]

log = logging.getLogger("remediate.server")


def create_app(settings: Settings, *, services: Services) -> Flask:
    if not services.credentials:
        log.warning(
            "AUTHENTICATION IS OFF (--insecure-no-auth): anyone who can reach %s can trigger remediation",
            settings.server.bind,
        )
    app = Flask("remediate")
    # One byte more than allowed: werkzeug silently cuts a body without Content-Length (chunked)
    # at this limit, so /webhook reads up to it and refuses a body that reached it.
    app.config["MAX_CONTENT_LENGTH"] = settings.server.max_body_bytes + 1
    requestlog.init_app(app, services.metrics)  # first: the id is set before any other hook logs
    answers.init_app(app, services)
    for resource in (webhook, runs, control, agents, health, slack, doctor):
        app.register_blueprint(resource.create_blueprint(services))
    from remediate.server.ui import runbooks

    app.register_blueprint(runbooks.create_blueprint())  # GET /runbooks: the self-alerts' runbook_url (the chart's)
    if settings.ui.enabled:
        from remediate.server.ui import root

        app.register_blueprint(_pages(services))
        app.register_blueprint(root.create_blueprint())  # GET / -> the pages
    return app


def _pages(services: Services) -> Blueprint:
    """The web pages (remediate.server.ui, docs/ui.md): the same store, tokens, breaker and parsers as the API."""
    from remediate.server.ui import UiDeps, create_blueprint
    from remediate.server.ui.readmission import gate_playbooks
    from remediate.server.ui.session import secret_key

    store = services.store
    return create_blueprint(
        UiDeps(
            store=store,
            credentials=services.credentials,
            breaker=services.executor.breaker,
            wake=services.wake,
            history_query=history_query,
            ladders=lambda: control.ladders_json(services, store.ladders.read()),
            repeat_offenders=lambda: [
                offender.as_json()
                for offender in store.history.repeat_offenders(
                    repeat_rules(services.engine.playbooks.playbooks), until=time.time()
                )
            ],
            secret_key=secret_key(services.settings.ui.secret_file, services.credentials),
            cookie_always_secure=services.settings.ui.cookie_secure == "always",
            waves=lambda node: services.engine.waves_of(node),
            gate_playbooks=lambda: gate_playbooks(services.engine.playbooks.playbooks),
        )
    )
