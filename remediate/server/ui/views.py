"""The pages' routes (a Flask blueprint under /ui): they read what the JSON API reads and act as it acts.

The history and the run page render `remediate.history.api`'s shapes of the store's rows (the JSON of
/history and /runs/<id>), so a page never shows something the API would not. Approve, pause, resume
and the breaker reset are forms (POST, a CSRF token, the operator role); each redirects back to the
page it came from, which then shows the new state.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Flask, abort, flash, g, make_response, redirect, render_template, request, session, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from remediate.breaker import CircuitBreaker
from remediate.config.durations import format_duration
from remediate.config.settings import READ, Credential
from remediate.errors import AlreadyPaused, RunStateError, UnknownRunError
from remediate.history.api import entry_json, run_json
from remediate.logs.audit import audit_event
from remediate.runs import RunStatus
from remediate.server.approvals import approve_run
from remediate.server.ui import session as ui_session
from remediate.server.ui.folding import fold_duplicates
from remediate.server.ui.gates import read_gates
from remediate.server.ui.node import timeline as node_timeline
from remediate.server.ui.preview import chat_preview
from remediate.server.ui.readmission import BURNIN_ACTIONS, GATE_ACTION, gate_views
from remediate.store import HistoryQuery, LoginThrottle, Store

log = logging.getLogger("remediate.ui")

FILTERS = ("playbook", "alertname", "target", "status", "since", "until")
"""The history form's fields: /history's filters, parsed by the same function."""
PAGE_SIZE = 50
REFRESH_CHOICE = 10
"""The seconds of the pages' "refresh every 10 s" link (any `?refresh=` from 5 to 3600 works)."""
REFRESH_RANGE = (5, 3600)
MAX_SEARCH = 200
APPROVALS_SHOWN = 50


@dataclass(frozen=True)
class UiDeps:
    """What the pages use, handed over by `remediate.server` (which owns them)."""

    store: Store
    credentials: tuple[Credential, ...]
    breaker: CircuitBreaker
    wake: Callable[[], None]
    """Tells the executor an approved run is queued."""
    history_query: Callable[[Mapping[str, str]], HistoryQuery]
    """GET /history's parser of the filters (ValueError on a bad one)."""
    ladders: Callable[[], list[dict[str, Any]]]
    """GET /ladders' answer (every ladder)."""
    secret_key: bytes
    repeat_offenders: Callable[[], list[dict[str, Any]]] = list
    """GET /report's `repeat_offenders` now: the targets at or over a playbook's `repeat_offender` count."""
    cookie_always_secure: bool = False
    """`ui_cookie_secure: always`: the session cookie is `Secure` even when the request came over plain http."""
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    """How many failed logins a client address may make per window before every login from it is 429."""
    waves: Callable[[str], list[str]] = lambda node: []
    """A node's staged-rollout wave and its mode now, one line per rollout in force (Engine.waves_of)."""
    gate_playbooks: Callable[[], tuple[str, ...]] = tuple
    """The loaded playbooks with a re-admission gate step (readmission.gate_playbooks), for the node page."""


def _time(value: float | str | None) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return ""
    seconds = end - start
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _web_link(url: str | None) -> str | None:
    """The URL when a browser may follow it (http, https); never a javascript: or data: link from an alert."""
    if not url:
        return None
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    return url if scheme in ("http", "https") else None


def _local(target: str | None, default: str) -> str:
    """A redirect target only within the pages (no open redirect through ?next=), and one that fits in a
    Location header: a line break or another control character would split the header (a 500, or a
    header of the sender's making), whitespace has no place in a path. Anything else: `default`."""
    if not target or not target.startswith("/ui/") or target.startswith("//") or "\\" in target:
        return default
    if any(char.isspace() or not char.isprintable() for char in target):
        return default
    return target


def _refresh_seconds(value: str) -> int | None:
    low, high = REFRESH_RANGE
    return int(value) if value.isdigit() and low <= int(value) <= high else None


def _refresh_links() -> dict[str, Any]:
    """The opt-in refresh: with `?refresh=N` the page reloads itself every N seconds by a <meta
    http-equiv=refresh> (no script: the CSP allows none) and links to itself without it; without it, the
    link adds `?refresh=10`. The page's other arguments (filters, search, cursor) are kept."""
    args = request.args.to_dict()
    seconds = _refresh_seconds(args.pop("refresh", ""))
    if request.endpoint is None or request.method != "GET":
        return {"refresh": None, "refresh_link": None}
    if seconds is None:
        args["refresh"] = str(REFRESH_CHOICE)
    return {"refresh": seconds, "refresh_link": url_for(request.endpoint, **(request.view_args or {}), **args)}


def create_blueprint(deps: UiDeps) -> Blueprint:
    ui = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates", static_folder="static")
    store = deps.store

    @ui.record_once
    def _setup(state: Any) -> None:
        app: Flask = state.app
        ui_session.configure(app, deps.secret_key, always_secure=deps.cookie_always_secure)
        app.jinja_env.filters["time"] = _time
        app.jinja_env.filters["pretty"] = _pretty

    @ui.app_context_processor
    def _globals() -> dict[str, Any]:
        if request.blueprint != "ui":
            return {}
        viewer = g.get("viewer")
        return {
            **_refresh_links(),
            "viewer": viewer,
            "gates": read_gates(store, deps.breaker) if viewer is not None else None,
            "csrf_token": lambda: ui_session.csrf_token(session),
            "auth_on": bool(deps.credentials),
            "duration": _duration,
            "chat_preview": chat_preview,
            "session_hours": ui_session.SESSION_HOURS,
        }

    @ui.before_request
    def _gate() -> Response | None:
        if request.endpoint in ("ui.static", "ui.login"):
            return None
        if "refresh" in request.args and _refresh_seconds(request.args["refresh"]) is None:
            low, high = REFRESH_RANGE
            abort(
                400, f"refresh must be a whole number of seconds from {low} to {high}, got {request.args['refresh']!r}"
            )
        if request.method == "POST" and not ui_session.csrf_ok(session, request.form.get("csrf_token")):
            abort(403, "the form's CSRF token is missing or does not belong to this session: reload the page")
        if request.endpoint == "ui.logout":
            return None  # an expired session may still end itself
        now = time.time()
        g.viewer = ui_session.viewer(session, deps.credentials, request, key=deps.secret_key, now=now)
        if g.viewer is not None and deps.credentials:
            current = ui_session.session_id(session, now=now)
            if current is None or store.ui_sessions.ended(current.sid):  # logged out (in any worker or replica)
                g.viewer = None
        if g.viewer is None:
            if request.method != "GET":
                abort(401, "log in first")
            return redirect(url_for("ui.login", next=request.full_path.rstrip("?")))
        return None

    @ui.after_request
    def _headers(response: Response) -> Response:
        # No script runs on these pages, nothing loads from elsewhere, no other site may frame them (the
        # Approve button), and no cache keeps a page of the history.
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'",
        )
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if request.endpoint != "ui.static":
            response.headers["Cache-Control"] = "no-store"
        return response

    def _operator() -> str:
        if not g.viewer.operator:
            abort(
                403,
                f"{g.viewer.principal} may only read: approving, pausing, resuming and resets need the operator role",
            )
        principal: str = g.viewer.principal
        return principal

    @ui.route("/login", methods=["GET", "POST"])
    def login() -> Any:
        target = _local(request.values.get("next"), url_for("ui.history"))
        if not deps.credentials:
            return redirect(target)
        if request.method == "GET":
            return render_template("login.html", next=target, error=None)
        if not ui_session.csrf_ok(session, request.form.get("csrf_token")):
            abort(403, "the form's CSRF token is missing or does not belong to this session: reload the page")
        # The token is checked first (constant time, every token): a right one always logs in, so a guesser
        # (or a colleague's typos) behind the same proxy address can never lock the others out. Only
        # failures are counted, per client address in the store (a guesser's tries land on every worker of
        # every replica), and past the limit a wrong token answers 429 until the window is over.
        client, now = request.remote_addr or "unknown", time.time()
        credential = ui_session.find_credential(deps.credentials, request.form.get("token", ""))
        if credential is None or not credential.allows(READ):
            wait = store.ui_sessions.login_retry_after(client, throttle=deps.login_throttle, now=now)
            if wait is not None:
                seconds = max(1, math.ceil(wait))
                error = (
                    f"Too many failed logins from your address: a wrong token is refused for {seconds} s more "
                    "(the right one still logs in)."
                )
                refused = make_response(render_template("login.html", next=target, error=error), 429)
                refused.headers["Retry-After"] = str(seconds)
                return refused
            store.ui_sessions.record_login_failure(client, throttle=deps.login_throttle, now=now)
            # One answer for both: which tokens exist is not the page's to say.
            error = "Unknown token, or one that may not read (the webhook token cannot log in)."
            return render_template("login.html", next=target, error=error), 401
        ui_session.log_in(session, credential, key=deps.secret_key, now=now)
        log.info("%s logged in to the web pages", credential.name)
        return redirect(target)

    @ui.post("/logout")
    def logout() -> Any:
        now = time.time()
        current = ui_session.session_id(session, now=now)
        if current is not None:  # the cookie is signed and may be kept: the store says it is over
            store.ui_sessions.end(current.sid, expires_at=current.expires_at, now=now)
        session.clear()
        return redirect(url_for("ui.login"))

    @ui.get("/")
    def history() -> Any:
        form = {name: request.args.get(name, "").strip() for name in (*FILTERS, "q")}
        args = {name: value for name, value in form.items() if value}
        cursor = request.args.get("cursor", "")
        filters = {name: value for name, value in args.items() if name != "q"}
        try:
            query = deps.history_query({**filters, "cursor": cursor, "limit": str(PAGE_SIZE)})
            if len(form["q"]) > MAX_SEARCH:
                raise ValueError(f"q (the search) must be at most {MAX_SEARCH} characters")
            # The search box: text in the alertname, the target, the playbook or the alert's labels and
            # annotations (store.HistoryQuery.search).
            entries, next_cursor = store.history.page(replace(query, search=form["q"] or None))
        except ValueError as exc:
            return render_template("history.html", form=form, rows=[], error=str(exc), older=None, newest=None), 400
        rows = [
            {"entry": entry_json(row.entry), "duplicates": [entry_json(d) for d in row.duplicates]}
            for row in fold_duplicates(entries)
        ]
        older = url_for("ui.history", **args, cursor=next_cursor) if next_cursor else None
        newest = url_for("ui.history", **args) if cursor else None
        return render_template("history.html", form=form, rows=rows, error=None, older=older, newest=newest)

    @ui.get("/runs/<int:run_id>")
    def run(run_id: int) -> Any:
        try:
            detail = run_json(store.history.run_detail(run_id))
            links = store.history.run_links(run_id)
        except UnknownRunError:
            abort(404, f"no run {run_id}")
        alert_link = _web_link(detail["alert"]["generatorURL"])
        return render_template("run.html", run=detail, links=links, alert_link=alert_link)

    @ui.get("/nodes/<name>")
    def node(name: str) -> Any:
        cursor = request.args.get("cursor", "")
        try:
            query = deps.history_query({"target": name, "cursor": cursor, "limit": str(PAGE_SIZE)})
            found, next_cursor = store.history.page(query)
        except ValueError as exc:
            abort(400, str(exc))
        entries = [entry_json(entry) for entry in found]
        ladders = [ladder for ladder in deps.ladders() if ladder["target"] == name]
        claims = store.breaker.claims_of(name)
        gated = store.history.latest_gate(name, GATE_ACTION, BURNIN_ACTIONS, playbooks=deps.gate_playbooks())
        return render_template(
            "node.html",
            name=name,
            gate_runs=gate_views(gated, time.time()),  # not `gates`: the banner's (base.html)
            gate_action=GATE_ACTION,
            events=node_timeline(entries, ladders, claims, more=next_cursor is not None),
            ladders=ladders,
            held=[c for c in claims if c.released_at is None],
            waves=deps.waves(name),
            older=url_for("ui.node", name=name, cursor=next_cursor) if next_cursor else None,
            newest=url_for("ui.node", name=name) if cursor else None,
        )

    @ui.post("/runs/<int:run_id>/approve")
    def approve(run_id: int) -> Any:
        by = _operator()
        try:
            approve_run(store, deps.wake, run_id, principal=by, via="ui")
        except UnknownRunError:
            abort(404, f"no run {run_id}")
        except RunStateError as exc:
            flash(f"Not approved: {exc}", "error")
        else:
            flash(f"Run {run_id} approved by {by}: queued.", "ok")
        return redirect(_local(request.form.get("next"), url_for("ui.run", run_id=run_id)))

    @ui.get("/state")
    def state() -> Any:
        pause = store.pause.state()
        waiting, _ = store.history.page(HistoryQuery(status=RunStatus.AWAITING_APPROVAL, limit=APPROVALS_SHOWN))
        return render_template(
            "state.html",
            pause=pause,
            breaker=deps.breaker.status(),
            waiting=[entry_json(entry) for entry in waiting],
            ladders=deps.ladders(),
            offenders=[{**o, "window": format_duration(o["window_seconds"])} for o in deps.repeat_offenders()],
        )

    @ui.post("/pause")
    def pause() -> Any:
        by = _operator()
        try:
            # The form shows only while not paused: a pause made since (another operator) is kept, not replaced.
            reason = request.form.get("reason", "")[:1000]
            store.pause.set(True, by=by, reason=reason, now=time.time(), replace=False)
        except AlreadyPaused as exc:
            flash(f"Not paused again: {exc}", "error")
            return redirect(url_for("ui.state"))
        audit_event("pause", principal=by, reason=reason, via="ui")
        flash(f"Paused by {by}: new alerts are recorded, nothing new runs.", "ok")
        return redirect(url_for("ui.state"))

    @ui.post("/resume")
    def resume() -> Any:
        by = _operator()
        store.pause.set(False, by=by, reason="", now=time.time())
        audit_event("resume", principal=by, via="ui")
        flash(f"Resumed by {by}.", "ok")
        return redirect(url_for("ui.state"))

    @ui.post("/breaker/reset")
    def breaker_reset() -> Any:
        by = _operator()
        reason = request.form.get("reason", "")[:1000]
        if not deps.breaker.reset(by=by, reason=reason)["reset"]:
            flash("The breaker is closed; nothing to reset.", "ok")
            return redirect(url_for("ui.state"))
        audit_event("breaker_reset", level=logging.WARNING, principal=by, reason=reason, via="ui")
        flash(f"Breaker reset by {by}.", "ok")
        return redirect(url_for("ui.state"))

    @ui.errorhandler(HTTPException)
    def _error(exc: HTTPException) -> Any:
        code = exc.code or 500
        return render_template("error.html", code=code, name=exc.name, message=exc.description), code

    return ui
