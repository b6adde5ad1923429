"""A chat step's message as a person would see it, from the body its plan recorded (the JSON that is
POSTed): Slack's Block Kit blocks, Teams' Adaptive Card, or notify.webhook's summary, read back into a
title, lines of text, facts and buttons. The run page shows this instead of ~80 lines of JSON (which
stays behind a <details>).

Text comes out as segments (plain, bold, code) that the template escapes: the preview reads the markup
only the playbook's own words may carry (label values are inert in each format: remediate.outbound.inert), and
never turns it into HTML of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CHAT_ACTIONS = frozenset({"notify", "notify.slack", "notify.teams", "notify.webhook"})
_SLACK_MARKUP = re.compile(r"\*([^*\n]+)\*|`([^`\n]+)`|<([^<>|\n]+)\|([^<>\n]+)>|<([^<>|\n]+)>")
_TEAMS_ESCAPE = re.compile(r"\\([\\`*_~\[\]\-+#.])")


@dataclass(frozen=True)
class Segment:
    text: str
    style: str = ""
    """"" (plain), "bold" or "code"."""


Line = tuple[Segment, ...]


@dataclass(frozen=True)
class ChatPreview:
    kind: str
    """Slack, Teams or webhook (JSON)."""
    to: str
    """Where it goes (`would_post_to`, or the sink's name)."""
    title: str = ""
    lines: list[Line] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    buttons: list[tuple[str, str]] = field(default_factory=list)
    """(label, URL) of each button."""
    footer: str = ""


def _unescape_slack(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def slack_line(text: str) -> Line:
    """One line of mrkdwn as segments: *bold*, `code`, <url|label> as its label, entities as characters."""
    segments: list[Segment] = []
    at = 0
    for found in _SLACK_MARKUP.finditer(text):
        if found.start() > at:
            segments.append(Segment(_unescape_slack(text[at : found.start()])))
        bold, code, _url, label, bare = found.groups()
        if bold is not None:
            segments.append(Segment(_unescape_slack(bold), "bold"))
        elif code is not None:
            segments.append(Segment(_unescape_slack(code), "code"))
        else:
            segments.append(Segment(_unescape_slack(label if label is not None else bare)))
        at = found.end()
    if at < len(text):
        segments.append(Segment(_unescape_slack(text[at:])))
    return tuple(segments)


def _slack(body: Mapping[str, Any], to: str) -> ChatPreview:
    title, footer = "", ""
    lines: list[Line] = []
    facts: list[tuple[str, str]] = []
    buttons: list[tuple[str, str]] = []
    for block in body.get("blocks") or []:
        kind = block.get("type")
        if kind == "header":
            title = str(block.get("text", {}).get("text", ""))
        elif kind == "section" and block.get("text"):
            lines.extend(slack_line(line) for line in str(block["text"].get("text", "")).split("\n"))
        elif kind == "section":
            for item in block.get("fields") or []:
                name, _, value = _unescape_slack(str(item.get("text", ""))).partition("\n")
                facts.append((name.strip("*"), value))
        elif kind == "context":
            footer = " · ".join(_unescape_slack(str(e.get("text", ""))) for e in block.get("elements") or [])
        elif kind == "actions":
            buttons += [
                (str(e.get("text", {}).get("text", "")), str(e.get("url", ""))) for e in block.get("elements") or []
            ]
    return ChatPreview("Slack", to, title, lines, facts, buttons, footer)


def _teams_text(text: str) -> Line:
    return (Segment(_TEAMS_ESCAPE.sub(r"\1", text)),)


def _teams(body: Mapping[str, Any], to: str) -> ChatPreview:
    card = (body.get("attachments") or [{}])[0].get("content") or {}
    title, footer = "", ""
    lines: list[Line] = []
    facts: list[tuple[str, str]] = []
    for item in card.get("body") or []:
        if item.get("type") == "TextBlock":
            text = str(item.get("text", ""))
            if item.get("weight") == "Bolder" and not title:
                title = _TEAMS_ESCAPE.sub(r"\1", text)
            elif item.get("isSubtle"):
                footer = _TEAMS_ESCAPE.sub(r"\1", text)
            else:
                lines.append(_teams_text(text))
        elif item.get("type") == "FactSet":
            for fact in item.get("facts") or []:
                facts.append((_TEAMS_ESCAPE.sub(r"\1", str(fact.get("title", ""))),
                              _TEAMS_ESCAPE.sub(r"\1", str(fact.get("value", "")))))  # fmt: skip
    buttons = [(str(a.get("title", "")), str(a.get("url", ""))) for a in card.get("actions") or []]
    return ChatPreview("Teams", to, title, lines, facts, buttons, footer)


def _status(status: Any, error: Any) -> str:
    return f"{status}: {error}" if error else str(status)


def _webhook(body: Mapping[str, Any], to: str) -> ChatPreview:
    alert = body.get("alert") or {}
    title = (
        f"{alert.get('alertname', '')} on {body.get('target')}" if body.get("target") else alert.get("alertname", "")
    )
    lines = [(Segment(str(body["message"])),)] if body.get("message") else []
    facts = [
        (f"{s.get('number')}. {s.get('name')} ({s.get('action')})", _status(s.get("status"), s.get("error")))
        for s in body.get("steps") or []
    ]
    facts += [("alert", str(alert.get("status", ""))), ("playbook", str(body.get("playbook", "")))]
    buttons = [("run page", str(body["run_url"]))] if body.get("run_url") else []
    return ChatPreview("webhook (JSON)", to, str(title), lines, facts, buttons, f"run {body.get('run_id')}")


def chat_preview(action: str, plan: Any) -> ChatPreview | None:
    """The message of a chat step (its recorded plan's body), or None: not a chat step, or no body (a sink
    that is not configured, a plan from before the body was recorded)."""
    if action not in CHAT_ACTIONS or not isinstance(plan, Mapping) or not isinstance(plan.get("body"), Mapping):
        return None
    body = plan["body"]
    to = str(plan.get("would_post_to") or "")
    if plan.get("sink"):
        to = f"sink {plan['sink']} ({to})" if to else f"sink {plan['sink']}"
    if isinstance(body.get("blocks"), list):
        return _slack(body, to)
    if body.get("type") == "message" and isinstance(body.get("attachments"), list):
        return _teams(body, to)
    if body.get("source") == "remediate":
        return _webhook(body, to)
    return None
