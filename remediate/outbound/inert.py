"""Alert data made inert text for each format people read: Slack mrkdwn, Teams markdown, Grafana's HTML.

Label and annotation values (and what is built from them: a target, a step's error) come from whoever
can reach AlertManager or export a metric. Placed in a chat message or an annotation they must show as
typed and do nothing else: no link, mention, formatting or line break that the playbook did not write.
Each function here takes such a value and returns it ready to be placed in its format; the playbook's
own text is never passed through them (it keeps its formatting). Called by the chat renderers
(remediate.actions.chat), the step-time message templates (remediate.actions.messages) and the Grafana
annotator (remediate.executor.grafana).

Pure: imports nothing of remediate.
"""

from __future__ import annotations

import html
import re

LINE_BREAK_MARK = "⏎"
"""What a line break inside a value becomes: the value stays on its line, and shows it had a break."""
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
# Other control characters, and the bidirectional overrides that reorder what is displayed.
_INVISIBLE = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ZWSP = "\u200b"
_URL_START = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}):(?=//)|\b(www)(?=\.)")


def one_line(text: str) -> str:
    """`text` on one line: line breaks shown as ⏎, tabs as spaces, other control characters dropped."""
    return _INVISIBLE.sub("", _LINE_BREAKS.sub(LINE_BREAK_MARK, text).replace("\t", " "))


def unlinked(text: str) -> str:
    """`text` with every `scheme://` and `www.` broken by a zero-width space: a chat client that turns
    bare URLs into links finds none, and a person still reads the address."""
    return _URL_START.sub(lambda m: (m.group(1) + ":" if m.group(1) else m.group(2)) + _ZWSP, text)


# Slack has no escape for its formatting characters: each becomes a look-alike Slack does not parse.
# An underscore between two letters or digits (job_name_7) never formats and is kept, so names stay
# copyable.
_SLACK_LOOKALIKE = {"*": "\u2217", "~": "\u223c", "`": "\u02cb", "_": "\u02cd"}
_SLACK_FORMATTING = re.compile(r"[*~`]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def slack(text: str) -> str:
    """A value as inert Slack mrkdwn: one line, no URL to auto-link, `& < >` as Slack's entities (no
    `<link|text>`, `<!here>`, `<@U…>`), `* _ ~ \\`` as look-alikes (no bold, italics, strike, code).
    Mrkdwn objects holding it are sent with `verbatim: true`: Slack then links no `#channel` or `@name`."""
    text = unlinked(one_line(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SLACK_FORMATTING.sub(lambda m: _SLACK_LOOKALIKE[m.group()], text)


_TEAMS_MARKDOWN = re.compile(r"([\\`*_~\[\]])")
_TEAMS_LIST_START = re.compile(r"^(\s*)([-+#]|\d+\.)")


def teams(text: str) -> str:
    """A value as inert Adaptive Card markdown: one line, no URL to auto-link, its markdown characters
    backslash-escaped (no `[text](url)`, emphasis or code), no list marker at its start. Cards render no
    HTML, and a Teams mention needs the card's own `msteams.entities`, which a value cannot add."""
    escaped = _TEAMS_MARKDOWN.sub(r"\\\1", unlinked(one_line(text)))
    return _TEAMS_LIST_START.sub(_escape_list_marker, escaped)


def _escape_list_marker(match: re.Match[str]) -> str:
    marker = match.group(2)
    return match.group(1) + (marker[:-1] + "\\." if marker.endswith(".") else "\\" + marker)


def html_text(text: str) -> str:
    """A value as inert HTML text (Grafana renders an annotation's text as HTML): one line, no URL to
    auto-link, `& < > " '` as entities."""
    return html.escape(unlinked(one_line(text)), quote=True)
