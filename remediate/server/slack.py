"""Approve from Slack in place: POST /slack/interactions, the Slack app's interactivity request URL (docs/slack.md).

Slack POSTs a click on a message's button here, form-encoded `payload=<JSON>` (a `block_actions` payload). The
request is Slack's only if its signature verifies (`SlackSigner`): `X-Slack-Signature` is `v0=` + the hex
HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{raw body}` under the app's signing secret, compared in
constant time, and the timestamp is within `REPLAY_WINDOW_S` of now (a recorded request cannot be replayed
later). The bearer tokens play no part: the signature is the credential.

A click on the Approve button (`SLACK_APPROVE_ACTION`, value = the run id) by a Slack user of the
`slack_approvers` allow-list approves the run through the one approval path (approvals.approve_run), as
`slack:<name>`, then replaces the message through the payload's `response_url` with one that says who approved.
Every refusal is an audit event (`approval_refused`) and a clear answer: 401 for a forged or stale
signature (no answer to Slack can be trusted then), an ephemeral message to the clicker otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from flask import Blueprint, Response, request

from remediate.actions.chat import SLACK_APPROVE_ACTION, SLACK_MAX_BLOCKS
from remediate.actions.notify import post_json
from remediate.errors import ActionError, RunStateError, UnknownRunError
from remediate.logs.audit import audit_event
from remediate.outbound import inert
from remediate.server.answers import error
from remediate.server.approvals import approve_run
from remediate.services import Services

log = logging.getLogger("remediate.server")

REPLAY_WINDOW_S = 300
"""Slack's advice: refuse a request whose timestamp is more than five minutes from now."""
ANSWER_TIMEOUT_S = 2.0
"""The POST to response_url is made before the click is answered: Slack wants its answer within 3 s."""
APPROVE = SLACK_APPROVE_ACTION
_USER_ID = re.compile(r"[UW][A-Z0-9]{2,20}")
_DIGITS = re.compile(r"[0-9]{1,15}")
"""ASCII digits only: str.isdigit() also takes '²', which int() refuses."""


class SlackSignatureError(Exception):
    """The request is not Slack's (forged signature) or not from now (stale timestamp): 401."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BadPayload(Exception):
    """A signed request whose payload cannot be used (400, naming the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class SlackSigner:
    """Slack's request signing (api.slack.com/authentication/verifying-requests-from-slack)."""

    secret: bytes
    clock: Callable[[], float] = time.time

    def signature(self, timestamp: str, body: bytes) -> str:
        base = b"v0:" + timestamp.encode() + b":" + body
        return "v0=" + hmac.new(self.secret, base, hashlib.sha256).hexdigest()

    def verify(self, timestamp: str, body: bytes, signature: str) -> None:
        """Nothing when the request is Slack's and recent; SlackSignatureError otherwise."""
        if not _DIGITS.fullmatch(timestamp):
            raise SlackSignatureError("stale_timestamp", "X-Slack-Request-Timestamp is missing or not UNIX seconds")
        if abs(self.clock() - int(timestamp)) > REPLAY_WINDOW_S:
            raise SlackSignatureError(
                "stale_timestamp", f"X-Slack-Request-Timestamp is more than {REPLAY_WINDOW_S} s from now: refused"
            )
        if not hmac.compare_digest(self.signature(timestamp, body).encode(), signature.encode()):
            raise SlackSignatureError("forged_signature", "X-Slack-Signature does not verify with the signing secret")


@dataclass(frozen=True)
class Click:
    """One click on a button of our message, as the payload says."""

    action_id: str
    value: str
    user_id: str
    response_url: str | None
    message: Mapping[str, Any] | None


def parse_click(body: bytes) -> Click | None:
    """The click of a `block_actions` payload; None for other interactions (Slack wants them acknowledged)."""
    fields = parse_qs(body.decode("utf-8", "replace"))
    if "payload" not in fields:
        raise BadPayload("payload", "missing: Slack sends the interaction as form field payload=<JSON>")
    try:
        payload = json.loads(fields["payload"][0])
    except ValueError:
        raise BadPayload("payload", "is not JSON") from None
    if not isinstance(payload, dict):
        raise BadPayload("payload", "must be a JSON object")
    actions = payload.get("actions")
    if payload.get("type") != "block_actions" or not isinstance(actions, list) or not actions:
        return None
    action = actions[0] if isinstance(actions[0], dict) else {}
    user = payload.get("user") if isinstance(payload.get("user"), dict) else {}
    user_id = user.get("id")
    if not isinstance(user_id, str) or not _USER_ID.fullmatch(user_id):
        raise BadPayload("user.id", "missing or not a Slack user id")
    response_url = payload.get("response_url")
    message = payload.get("message")
    return Click(
        action_id=str(action.get("action_id", "")),
        value=str(action.get("value", "")),
        user_id=user_id,
        response_url=response_url if isinstance(response_url, str) and response_url else None,
        message=message if isinstance(message, dict) else None,
    )


def approved_message(click: Click, run_id: int, principal: str) -> dict[str, Any]:
    """The message in place of the announcement: every block as it was, the actions block that held the Approve
    button swapped for a line saying who approved (its other buttons, Open run, kept after it) and the Status
    field saying so. Without the message's blocks in the payload nothing is replaced: the line is posted on its
    own, so the announcement is never replaced by that one line."""
    said = (
        f"✅ Approved by <@{click.user_id}> (recorded as {inert.slack(principal)}): run {run_id} is queued and runs "
        "now; its own messages say how it goes."
    )
    line = {"type": "section", "text": {"type": "mrkdwn", "text": said}}
    shown = (click.message or {}).get("blocks")
    kept = [block for block in shown if isinstance(block, dict)] if isinstance(shown, list) else []
    if not kept:
        return {"response_type": "in_channel", "replace_original": False, "text": said}
    blocks: list[dict[str, Any]] = []
    swapped = False
    for block in kept:
        if not swapped and _holds_approve(block):
            swapped = True
            blocks.append(line)
            others = [e for e in block["elements"] if not (isinstance(e, dict) and e.get("action_id") == APPROVE)]
            if others:
                blocks.append({**block, "elements": others})
            continue
        blocks.append(_status_approved(block))
    if not swapped:
        blocks.append(line)
    return {"replace_original": True, "text": said, "blocks": blocks[:SLACK_MAX_BLOCKS]}


def _holds_approve(block: dict[str, Any]) -> bool:
    elements = block.get("elements")
    return (
        block.get("type") == "actions"
        and isinstance(elements, list)
        and any(isinstance(e, dict) and e.get("action_id") == APPROVE for e in elements)
    )


def _status_approved(block: dict[str, Any]) -> dict[str, Any]:
    """A fields section's `*Status*` (the announcement says awaiting approval) now says approved."""
    fields = block.get("fields")
    if block.get("type") != "section" or not isinstance(fields, list):
        return block
    status = {"type": "mrkdwn", "text": "*Status*\napproved, queued"}
    changed = [status if isinstance(f, dict) and str(f.get("text", "")).startswith("*Status*\n") else f for f in fields]
    return {**block, "fields": changed}


def ephemeral(text: str) -> dict[str, Any]:
    """An answer only the clicker sees; the message stays as it was."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("slack", __name__)
    settings = services.settings.notify
    # Read at start (serve.launcher.preflight reads it first): a missing or empty file stops the start, naming it.
    secret = settings.slack_signing_secret()
    signer = SlackSigner(secret.encode()) if secret else None
    if signer is not None and not settings.slack_approvers:
        log.warning("slack_signing_secret_file is set but slack_approvers lists nobody: every Approve click is refused")

    @bp.post("/slack/interactions")
    def interactions() -> Any:
        if signer is None:
            return error(404, "not_configured", "Slack interactivity is off: set slack_signing_secret_file")
        body = request.get_data(cache=True)
        try:
            signer.verify(
                request.headers.get("X-Slack-Request-Timestamp", ""),
                body,
                request.headers.get("X-Slack-Signature", ""),
            )
        except SlackSignatureError as exc:
            audit_event("approval_refused", level=logging.WARNING, reason=exc.reason, remote=request.remote_addr)
            return Response(f"{exc}\n", status=401, mimetype="text/plain")
        try:
            click = parse_click(body)
        except BadPayload as exc:
            return error(400, "invalid_request", f"{exc.field}: {exc}", field=exc.field)
        if click is None or click.action_id != APPROVE:
            return Response(status=200)  # a link button's click (Open run): Slack wants it acknowledged
        answer(click, approve(click))
        return Response(status=200)

    def approve(click: Click) -> dict[str, Any]:
        """Approve the run of `click` as its Slack user; what to answer Slack."""
        if not _DIGITS.fullmatch(click.value):
            return ephemeral(f"The button's value {inert.slack(click.value[:40])} is not a run id: nothing was done.")
        run_id = int(click.value)
        principal = settings.slack_approver(click.user_id)
        if principal is None:
            refuse("unlisted_user", click, run_id)
            return ephemeral(
                f"<@{click.user_id}>, you are not on remediate's Slack approver list (slack_approvers): run {run_id} "
                f"was not approved. Ask an operator to add your Slack user id {click.user_id}."
            )
        try:
            approve_run(services.store, services.wake, run_id, principal=principal, via="slack")
        except UnknownRunError:
            refuse("unknown_run", click, run_id, principal=principal)
            return ephemeral(f"There is no run {run_id} (any more): nothing was approved.")
        except RunStateError:
            detail = services.store.history.run_detail(run_id)
            refuse("not_waiting", click, run_id, principal=principal, status=detail.status)
            by = f" (approved by {inert.slack(detail.approved_by)})" if detail.approved_by else ""
            return ephemeral(f"Run {run_id} no longer waits for approval: it is {detail.status}{by}. Nothing was done.")
        return approved_message(click, run_id, principal)

    def answer(click: Click, body: dict[str, Any]) -> None:
        if click.response_url is None:
            log.warning("a Slack click without response_url: it was not answered")
            return
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        with requests.Session() as session:
            try:
                # The URL stays out of the log: for 30 minutes it lets anyone post to that message.
                post_json(
                    session, click.response_url, body, headers={}, timeout=ANSWER_TIMEOUT_S, shown_url="response_url"
                )
            except ActionError as exc:
                log.warning("answering a Slack click failed: %s", exc)

    return bp


def refuse(reason: str, click: Click, run_id: int, *, principal: str | None = None, status: str | None = None) -> None:
    audit_event(
        "approval_refused",
        level=logging.WARNING,
        reason=reason,
        slack_user=click.user_id,
        run_id=run_id,
        principal=principal,
        status=status,
    )
