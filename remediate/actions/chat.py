"""Chat messages people read: what fired, what remediate did or will do, and a link to the run page.

`ChatMessage` is the content, built once from a step's context; `slack_blocks` renders it as a Slack
Block Kit message (incoming webhook) and `teams_card` as a Microsoft Teams Adaptive Card (incoming or
Workflows webhook). `ChatWebhookAction` is what notify.slack and notify.teams share: where to post (a
URL written in the playbook or read from a Secret-backed file, never from a label) and the POST itself,
which is notify.webhook's (`post_json`: no redirect followed, retried only when nothing was sent).

Label and annotation values are data: each format's control characters are escaped in them, so a label
cannot add a link, a mention or formatting to the message.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.notify import check_url, idempotency_key, post_json
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError, ParamsError
from remediate.lazyhttp import SessionSlot
from remediate.runs import StepStatus

if TYPE_CHECKING:
    import requests

# Slack's documented limits (api.slack.com/reference/block-kit/blocks).
SLACK_HEADER_MAX = 150
SLACK_SECTION_MAX = 3000
SLACK_FIELD_MAX = 2000
SLACK_BUTTON_TEXT_MAX = 75
SLACK_MAX_BLOCKS = 50
# Teams drops messages over about 28 KB: keep each text well under it.
TEAMS_TEXT_MAX = 3000
MAX_URL_FILE_BYTES = 4096
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
    """The playbook's own words (the step's `message` param)."""
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
    sent_at: datetime | None = None

    @classmethod
    def of_step(cls, ctx: StepContext, *, public_url: str | None, note: str = "") -> Self:
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
            sent_at=datetime.now(UTC),
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
            state += " (approved)"
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


def run_page_url(public_url: str | None, run_id: int) -> str | None:
    """The run page people open (`/ui/runs/<id>`, with the Approve button while the run waits)."""
    return f"{public_url.rstrip('/')}/ui/runs/{run_id}" if public_url else None


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


def escape_mrkdwn(text: str) -> str:
    """Slack's own escaping: `&`, `<`, `>` are the only control characters of links and mentions
    (`<https://x|click>`, `<!channel>`, `<@U123>`); escaped, they show as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_step(step: StepLine) -> str:
    mark = _STEP_MARK.get(step.status, "•")
    status = "this message" if step.current else step.status
    line = f"{mark} {step.index + 1}. *{escape_mrkdwn(step.name)}* `{escape_mrkdwn(step.action)}`: {status}"
    if step.error and not step.current:
        line += f"\n      {escape_mrkdwn(clip(step.error, 300))}"
    return line


def slack_blocks(msg: ChatMessage) -> dict[str, Any]:
    """The incoming webhook's body: Block Kit `blocks` and the `text` fallback (notifications, old clients)."""
    header = clip(f"{'✅ resolved: ' if msg.alert_status == 'resolved' else '🔥 '}{msg.title}", SLACK_HEADER_MAX)
    lines = [escape_mrkdwn(msg.doing)] + [_slack_step(step) for step in msg.steps]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
    ]
    if msg.summary or msg.note:
        about = "\n".join(f"{escape_mrkdwn(text)}" for text in (msg.summary, msg.note) if text)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": clip(about, SLACK_SECTION_MAX)}})
    blocks += [
        {"type": "section", "text": {"type": "mrkdwn", "text": clip("\n".join(lines), SLACK_SECTION_MAX)}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": clip(f"*Status*\n{escape_mrkdwn(msg.status)}", SLACK_FIELD_MAX)},
                {"type": "mrkdwn", "text": clip(f"*Playbook*\n{escape_mrkdwn(msg.playbook)}", SLACK_FIELD_MAX)},
            ],
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(escape_mrkdwn(msg.context), 2000)}]},
    ]
    if msg.run_url:
        buttons = [_slack_button(f"Open {msg.run_text}", msg.run_url, "open-run")]
        if msg.awaiting_approval:
            buttons.append(_slack_button("Approve", msg.run_url, "approve-run", style="primary"))
        blocks.append({"type": "actions", "elements": buttons})
    fallback = f"{msg.title}: {msg.status}. {msg.doing.rstrip(':')} ({msg.run_text})"
    if msg.run_url:
        fallback += f" {msg.run_url}"
    return {"text": clip(escape_mrkdwn(fallback), SLACK_SECTION_MAX), "blocks": blocks[:SLACK_MAX_BLOCKS]}


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


# --------------------------------------------------------------------------- Microsoft Teams

_TEAMS_MARKDOWN = re.compile(r"([\\`*_~\[\]])")


def escape_teams(text: str) -> str:
    """Adaptive Card TextBlocks render a Markdown subset: `[text](url)` links and emphasis. Their control
    characters get a backslash, so a label shows as typed and cannot dress a link as other text (a bare URL
    stays a visible URL; cards render no HTML and Teams mentions need the card's own `msteams` entities)."""
    return _TEAMS_MARKDOWN.sub(r"\\\1", text)


def teams_card(msg: ChatMessage) -> dict[str, Any]:
    """The webhook's body: a `message` with one Adaptive Card (1.4) attachment."""
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": clip(escape_teams(f"{'Resolved: ' if msg.alert_status == 'resolved' else ''}{msg.title}"), 300),
            "size": "Large",
            "weight": "Bolder",
            "wrap": True,
        }
    ]
    for text in (msg.summary, msg.note):
        if text:
            body.append({"type": "TextBlock", "text": clip(escape_teams(text), TEAMS_TEXT_MAX), "wrap": True})
    body.append({"type": "TextBlock", "text": escape_teams(msg.doing), "wrap": True})
    body.append(
        {
            "type": "FactSet",
            "facts": [
                {
                    "title": clip(escape_teams(f"{s.index + 1}. {s.name} ({s.action})"), 200),
                    "value": clip(
                        escape_teams("this message" if s.current else s.status + (f": {s.error}" if s.error else "")),
                        500,
                    ),
                }
                for s in msg.steps
            ],
        }
    )
    body.append({"type": "FactSet", "facts": [{"title": "Status", "value": escape_teams(msg.status)}]})
    body.append(
        {"type": "TextBlock", "text": escape_teams(msg.context), "isSubtle": True, "size": "Small", "wrap": True}
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


class UrlFileError(ActionError):
    """The url_file cannot be read or holds no http(s) URL (its contents are never shown: the URL is the secret)."""


def read_url_file(path: str) -> str:
    """The webhook URL in `path` (e.g. a mounted Kubernetes Secret): one http(s) URL, surrounding blanks ignored."""
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_URL_FILE_BYTES + 1)
    except OSError as exc:
        raise UrlFileError(f"cannot read url_file {path}: {exc.strerror}") from None
    try:
        url = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UrlFileError(f"url_file {path} is not UTF-8 text") from None
    if len(raw) > MAX_URL_FILE_BYTES or any(c.isspace() for c in url) or check_url(url):
        raise UrlFileError(f"url_file {path} must hold one absolute http:// or https:// URL")
    return url


def _check_timeout(value: float) -> str | None:
    return None if 0 < value <= 300 else "must be in (0, 300]"


class ChatWebhookAction(Action):
    """notify.slack and notify.teams: build the message (`render`), POST it once to the chat's webhook."""

    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    reports_run: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "url": Param(
                str, static=True, check=check_url, doc="the webhook URL, written in the playbook (or url_file)"
            ),
            "url_file": Param(
                str,
                static=True,
                secret=True,
                doc="file holding the webhook URL (a mounted Kubernetes Secret), read when the step runs",
            ),
            "message": Param(str, default="", doc="a line of your own under the alert's summary; may use templates"),
            "timeout": Param(float, default=10.0, check=_check_timeout, doc="seconds to wait for the answer"),
        }
    )

    session = SessionSlot()

    def __init__(self, *, public_url: str | None = None, session: requests.Session | None = None) -> None:
        self.public_url = public_url
        self.session = session

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        return cls(public_url=deps.settings.public_url)

    @abstractmethod
    def render(self, message: ChatMessage) -> dict[str, Any]:
        """The webhook's JSON body for `message`."""

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().validate(params)
        if bool(checked.get("url")) == bool(checked.get("url_file")):
            raise ParamsError(f"{self.name} needs exactly one of url (in the playbook) and url_file (a Secret's file)")
        return checked

    def message(self, params: Mapping[str, Any], ctx: StepContext) -> ChatMessage:
        return ChatMessage.of_step(ctx, public_url=self.public_url, note=params.get("message", ""))

    @staticmethod
    def _where(params: Mapping[str, Any]) -> str:
        """The URL as the history may show it: from url_file, only the file's name (the URL is a secret)."""
        return params["url"] if params.get("url") else f"the URL in {params['url_file']}"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would_post_to": self._where(params), "body": self.render(self.message(params, ctx))}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return self._post(params, ctx, self.message(params, ctx), idempotency_key(ctx))

    def announce(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """Post, to this step's webhook, that `ctx`'s run waits for approval (remediate.announce calls it once
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
        return {"posted_to": shown, "status_code": status}
