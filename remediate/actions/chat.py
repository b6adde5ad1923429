"""Chat messages people read: what fired, what remediate did or will do, and a link to the run page.

`ChatMessage` is the content, built once from a step's context; `slack_blocks` renders it as a Slack
Block Kit message (incoming webhook) and `teams_card` as a Microsoft Teams Adaptive Card (incoming or
Workflows webhook). `ChatWebhookAction` is what notify.slack and notify.teams share: where to post (a
URL written in the playbook or read from a Secret-backed file, never from a label) and the POST itself,
which is notify.webhook's (`post_json`: no redirect followed, retried only when nothing was sent).

Label and annotation values are data: each format makes them inert text (remediate.outbound.inert), so a label
cannot add a link, a mention, formatting or a line break to the message. The playbook's own `message`
is rendered when the step runs (remediate.actions.messages: the earlier steps' outcomes, the run's
link) with that escaping of every value it prints, and keeps its own markup.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Self

from remediate.actions.base import ActionDeps, StepContext
from remediate.actions.messages import render_message, run_page_url
from remediate.actions.notify import (
    TIMEOUT,
    PostingAction,
    idempotency_key,
    post_json,
    read_url_file,
    stored_or_file,
)
from remediate.actions.schema import Param, ParamSchema
from remediate.outbound import inert
from remediate.outbound.urls import check_stored_url
from remediate.runs import StepStatus

if TYPE_CHECKING:
    import requests

# Slack's documented limits (api.slack.com/reference/block-kit/blocks).
SLACK_HEADER_MAX = 150
SLACK_SECTION_MAX = 3000
SLACK_FIELD_MAX = 2000
SLACK_BUTTON_TEXT_MAX = 75
SLACK_MAX_BLOCKS = 50
SLACK_APPROVE_ACTION = "remediate-approve"
"""The action_id of the interactive Approve button (its `value`: the run id), which POST /slack/interactions
answers (remediate.server.slack); the link buttons keep action_ids of their own."""
# Teams drops messages over about 28 KB: keep each text well under it.
TEAMS_TEXT_MAX = 3000
ELLIPSIS = "…"

_STEP_MARK = {
    StepStatus.SUCCEEDED: "✅",
    StepStatus.PLANNED: "📝",
    StepStatus.FAILED: "❌",
    StepStatus.SKIPPED: "⏭",
    StepStatus.INTERRUPTED: "⚠️",
    StepStatus.RUNNING: "⏳",
    StepStatus.PENDING: "•",
}


@dataclass(frozen=True)
class StepLine:
    """One step of the run in a message."""

    index: int
    name: str
    action: str
    status: str
    error: str | None
    current: bool
    """The step sending this message."""


@dataclass(frozen=True)
class ChatMessage:
    """What a chat message says, in no format yet. Texts are raw: each renderer escapes them for its markup."""

    title: str
    """What fired: `alertname on target` (header)."""
    alert_status: str
    summary: str
    """The alert's summary annotation (or description), empty when it has none."""
    note: str
    """The playbook's own words (the step's `message` param), rendered already in the format's markup, its
    values escaped (remediate.actions.messages): the renderers place it as it is."""
    playbook: str
    mode: str
    phase: str
    run_id: int
    steps: tuple[StepLine, ...]
    run_url: str | None
    """`{public_url}/ui/runs/<id>`; None without public_url (the message then says `run <id>`, no link)."""
    rung: int | None = None
    """The escalation ladder's rung (1 = the gentlest); None without a ladder."""
    awaiting_approval: bool = False
    """The run waits for a person: an Approve button, to the run page (which carries the approve form)."""
    approve_in_place: bool = False
    """Slack's Approve button approves the run itself (an interactive button: Slack calls POST
    /slack/interactions) instead of opening the run page; set when slack_signing_secret_file is."""
    approved_by: str | None = None
    """Who approved the run (the principal, e.g. `slack:alice`); None for a run that needed no approval."""
    sent_at: datetime | None = None
    note_error: str | None = None
    """Why the playbook's message could not be rendered (the note then says so); None when it was."""

    @classmethod
    def of_step(
        cls, ctx: StepContext, *, public_url: str | None, note: str = "", note_error: str | None = None
    ) -> Self:
        alert = ctx.alert
        alertname = alert.alertname or alert.labels.get("alertname", "") or "alert"
        return cls(
            title=f"{alertname} on {ctx.target}" if ctx.target else alertname,
            alert_status=alert.status or "firing",
            summary=alert.annotations.get("summary") or alert.annotations.get("description") or "",
            note=note,
            playbook=ctx.playbook,
            mode=ctx.mode,
            phase=ctx.phase,
            run_id=ctx.run_id,
            steps=tuple(
                StepLine(s.index, s.name, s.action, s.status, s.error, s.index == ctx.step_index) for s in ctx.steps
            ),
            run_url=run_page_url(public_url, ctx.run_id),
            rung=ctx.rung,
            approved_by=ctx.approved_by,
            sent_at=datetime.now(UTC),
            note_error=note_error,
        )

    @property
    def run_text(self) -> str:
        return f"run {self.run_id}"

    @property
    def status(self) -> str:
        """The run's state as this message sees it, in a few words."""
        if self.awaiting_approval:
            return "waiting for approval"
        failed = [s for s in self.steps if s.status == StepStatus.FAILED and not s.current]
        if self.mode == "dry-run":
            state = "dry run: planning only, nothing is changed"
        elif failed:
            state = f"running after a failed step ({failed[0].name})"
        else:
            state = "running"
        if self.mode == "approve":
            state += f" (approved by {self.approved_by})" if self.approved_by else " (approved)"
        return f"alert {self.alert_status}; {'undo' if self.phase == 'resolved' else 'remediation'} {state}"

    @property
    def doing(self) -> str:
        """One line: what remediate did or will do."""
        verb = "undoes" if self.phase == "resolved" else "runs"
        if self.awaiting_approval:
            return f"once approved, remediate {verb} playbook {self.playbook} ({len(self.steps)} steps):"
        return f"remediate {verb} playbook {self.playbook} ({len(self.steps)} steps):"

    def awaiting(self) -> ChatMessage:
        """This message as the announcement that the run waits for approval: no step is sending it (each is
        shown as it stands, pending), and the Approve button."""
        return replace(self, awaiting_approval=True, steps=tuple(replace(s, current=False) for s in self.steps))

    @property
    def context(self) -> str:
        when = (self.sent_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
        rung = f" · rung {self.rung}" if self.rung is not None else ""
        return f"{self.run_text} · playbook {self.playbook}{rung} · mode {self.mode} · {when}"


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut (never inside an `&...;` escape)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(ELLIPSIS)]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:] and amp >= len(cut) - 6:
        cut = cut[:amp]
    return cut + ELLIPSIS


# --------------------------------------------------------------------------- Slack


def _mrkdwn(text: str) -> dict[str, Any]:
    # verbatim: Slack links no bare URL, #channel or @name in it; our own `<url|text>` would still work.
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _slack_step(step: StepLine) -> str:
    mark = _STEP_MARK.get(step.status, "•")
    status = "this message" if step.current else step.status
    line = f"{mark} {step.index + 1}. *{inert.slack(step.name)}* `{inert.slack(step.action)}`: {status}"
    if step.error and not step.current:
        line += f"\n      {inert.slack(clip(step.error, 300))}"
    return line


def slack_blocks(msg: ChatMessage) -> dict[str, Any]:
    """The incoming webhook's body: Block Kit `blocks` and the `text` fallback (notifications, old clients)."""
    # plain_text is not parsed for markup (nor, with emoji false, for :shortcodes:): one line, no URL.
    title = inert.unlinked(inert.one_line(msg.title))
    header = clip(f"{'✅ resolved: ' if msg.alert_status == 'resolved' else '🔥 '}{title}", SLACK_HEADER_MAX)
    lines = [inert.slack(msg.doing)] + [_slack_step(step) for step in msg.steps]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": False}},
    ]
    if msg.summary or msg.note:
        about = "\n".join(text for text in (inert.slack(msg.summary) if msg.summary else "", msg.note) if text)
        blocks.append({"type": "section", "text": _mrkdwn(clip(about, SLACK_SECTION_MAX))})
    blocks += [
        {"type": "section", "text": _mrkdwn(clip("\n".join(lines), SLACK_SECTION_MAX))},
        {
            "type": "section",
            "fields": [
                _mrkdwn(clip(f"*Status*\n{inert.slack(msg.status)}", SLACK_FIELD_MAX)),
                _mrkdwn(clip(f"*Playbook*\n{inert.slack(msg.playbook)}", SLACK_FIELD_MAX)),
            ],
        },
        {"type": "context", "elements": [_mrkdwn(clip(inert.slack(msg.context), 2000))]},
    ]
    buttons = [_slack_button(f"Open {msg.run_text}", msg.run_url, "open-run")] if msg.run_url else []
    if msg.awaiting_approval and msg.approve_in_place:
        buttons.append(_slack_approve_button(msg))
    elif msg.awaiting_approval and msg.run_url:
        buttons.append(_slack_button("Approve", msg.run_url, "approve-run", style="primary"))
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    fallback = inert.slack(f"{msg.title}: {msg.status}. {msg.doing.rstrip(':')} ({msg.run_text})")
    if msg.run_url:
        fallback += " " + msg.run_url.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return {"text": clip(fallback, SLACK_SECTION_MAX), "blocks": blocks[:SLACK_MAX_BLOCKS]}


def _slack_button(text: str, url: str, action_id: str, *, style: str | None = None) -> dict[str, Any]:
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": clip(text, SLACK_BUTTON_TEXT_MAX)},
        "url": url,
        "action_id": action_id,
    }
    if style:
        button["style"] = style
    return button


def _slack_approve_button(msg: ChatMessage) -> dict[str, Any]:
    """The interactive Approve button: Slack POSTs its click (action_id, value = the run id, who clicked) to
    the app's interactivity URL, POST /slack/interactions; a confirmation dialog first, as one click runs it."""
    doing = inert.unlinked(inert.one_line(f"{msg.doing.rstrip(':')} for {msg.title}"))
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": "Approve"},
        "action_id": SLACK_APPROVE_ACTION,
        "value": str(msg.run_id),
        "style": "primary",
        "confirm": {
            "title": {"type": "plain_text", "text": clip(f"Approve {msg.run_text}?", 100)},
            "text": {"type": "plain_text", "text": clip(doing, 300), "emoji": False},
            "confirm": {"type": "plain_text", "text": "Approve"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        },
    }


# --------------------------------------------------------------------------- Microsoft Teams


def teams_card(msg: ChatMessage) -> dict[str, Any]:
    """The webhook's body: a `message` with one Adaptive Card (1.4) attachment."""
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": clip(f"{'Resolved: ' if msg.alert_status == 'resolved' else ''}{inert.teams(msg.title)}", 300),
            "size": "Large",
            "weight": "Bolder",
            "wrap": True,
        }
    ]
    for text in (inert.teams(msg.summary) if msg.summary else "", msg.note):
        if text:
            body.append({"type": "TextBlock", "text": clip(text, TEAMS_TEXT_MAX), "wrap": True})
    body.append({"type": "TextBlock", "text": inert.teams(msg.doing), "wrap": True})
    body.append(
        {
            "type": "FactSet",
            "facts": [
                {
                    "title": clip(f"{s.index + 1}. {inert.teams(f'{s.name} ({s.action})')}", 200),
                    "value": clip(
                        inert.teams("this message" if s.current else s.status + (f": {s.error}" if s.error else "")),
                        500,
                    ),
                }
                for s in msg.steps
            ],
        }
    )
    body.append({"type": "FactSet", "facts": [{"title": "Status", "value": inert.teams(msg.status)}]})
    body.append(
        {"type": "TextBlock", "text": inert.teams(msg.context), "isSubtle": True, "size": "Small", "wrap": True}
    )
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "msteams": {"width": "Full"},
        "body": body,
    }
    if msg.run_url:
        card["actions"] = [{"type": "Action.OpenUrl", "title": f"Open {msg.run_text}", "url": msg.run_url}]
        if msg.awaiting_approval:
            card["actions"].append(
                {"type": "Action.OpenUrl", "title": "Approve", "url": msg.run_url, "style": "positive"}
            )
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


# --------------------------------------------------------------------------- the actions' shared part


class ChatWebhookAction(PostingAction):
    """notify.slack and notify.teams: build the message (`render`), POST it once to the chat's webhook."""

    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            **stored_or_file(
                "url",
                str,
                check=check_stored_url,
                doc="a webhook URL without a secret, e.g. an in-cluster relay (or url_file); a Slack or Teams "
                "incoming-webhook URL is its own secret and is refused here: give it in url_file or a sink",
                file_doc="file holding the webhook URL (a mounted Kubernetes Secret), read when the step runs",
            ),
            "message": Param(
                str,
                default="",
                late=True,
                doc="a line of your own under the alert's summary; a template rendered when the step runs, which "
                "may read the earlier steps' outcomes (`steps`, `step.<name>`, `run.outcome`) and `run.link`",
            ),
            "timeout": TIMEOUT,
        }
    )

    @abstractmethod
    def render(self, message: ChatMessage) -> dict[str, Any]:
        """The webhook's JSON body for `message`."""

    @abstractmethod
    def escape(self, text: str) -> str:
        """A value from the alert as inert text of this chat's markup (remediate.outbound.inert)."""

    approve_in_place: bool = False
    """The message's Approve button approves the run itself (NotifySlackAction with a signing secret)."""

    def message(self, params: Mapping[str, Any], ctx: StepContext) -> ChatMessage:
        note, error = render_message(params.get("message", ""), ctx, public_url=self.public_url, escape=self.escape)
        message = ChatMessage.of_step(ctx, public_url=self.public_url, note=note, note_error=error)
        return replace(message, approve_in_place=self.approve_in_place)

    @staticmethod
    def _where(params: Mapping[str, Any]) -> str:
        """The URL as the history may show it: from url_file, only the file's name (the URL is a secret)."""
        return params["url"] if params.get("url") else f"the URL in {params['url_file']}"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would_post_to": self._where(params), "body": self.render(self.message(params, ctx))}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return self._post(params, ctx, self.message(params, ctx), idempotency_key(ctx))

    def announce(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """Post, to this step's webhook, that `ctx`'s run waits for approval (remediate.executor.announce calls it once
        per run, before any step ran): what fired, what remediate will do once approved, the Approve button.
        The same POST as `execute`, under an Idempotency-Key of its own."""
        key = f"remediate-run-{ctx.run_id}-awaiting-approval-{ctx.step_index}"
        return self._post(params, ctx, self.message(params, ctx).awaiting(), key)

    def _post(self, params: Mapping[str, Any], ctx: StepContext, message: ChatMessage, key: str) -> dict[str, Any]:
        url = params.get("url") or read_url_file(params["url_file"])
        shown = self._where(params)
        status = post_json(
            self.session,
            url,
            self.render(message),
            headers={"Idempotency-Key": key},
            timeout=min(params["timeout"], max(ctx.remaining(), 0.1)),
            shown_url="" if params.get("url") else shown,
        )
        # The message as sent: the step's params keep its template, rendered only now (actions.messages).
        result: dict[str, Any] = {"posted_to": shown, "status_code": status, "message": message.note}
        if message.note_error:
            result["message_error"] = message.note_error
        return result


class NotifySlackAction(ChatWebhookAction):
    name: ClassVar[str] = "notify.slack"
    description: ClassVar[str] = (
        "Post a Block Kit message to a Slack incoming webhook: what fired, the playbook's steps and their "
        "status so far, and a button to the run page (public_url); while the run waits, an Approve button, which "
        "approves in place with slack_signing_secret_file (docs/slack.md); sent once, retried only when nothing "
        "was sent."
    )
    render = staticmethod(slack_blocks)
    escape = staticmethod(inert.slack)

    def __init__(
        self, session: requests.Session | None = None, *, public_url: str | None = None, approve_in_place: bool = False
    ) -> None:
        super().__init__(session, public_url=public_url)
        self.approve_in_place = approve_in_place

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        settings = deps.settings
        return cls(public_url=settings.public_url, approve_in_place=settings.slack_signing_secret_file is not None)


class NotifyTeamsAction(ChatWebhookAction):
    name: ClassVar[str] = "notify.teams"
    description: ClassVar[str] = (
        "Post an Adaptive Card to a Microsoft Teams (incoming or Workflows) webhook: what fired, the playbook's "
        "steps and their status so far, and a link to the run page (public_url); sent once, retried only when "
        "nothing was sent."
    )
    render = staticmethod(teams_card)
    escape = staticmethod(inert.teams)
