"""`GET /runbooks`: the runbooks of remediate's self-alerts (docs/runbooks.md, packaged as ui/docs/runbooks.md by
scripts/sync-generated) as one HTML page, each section's id the anchor GitHub gives its heading. The chart points
every self-alert's `runbook_url` here (public_url + /runbooks#<alert>): a link on-call can open, where the
shipped rule file's link names the project's repository.

Static documentation, no data of the store: it needs no login (a page that needs one would lose the #anchor
through the login redirect). The Markdown is the subset the file uses: headings, paragraphs, a table,
`code` and **bold**; everything is escaped first.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from flask import Blueprint, Response
from markupsafe import escape

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_RULE_ROW = re.compile(r"^\|[\s|:-]+\|$")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, spaces to dashes, other punctuation dropped."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def _inline(text: str) -> str:
    html = str(escape(text))
    html = _CODE.sub(r"<code>\1</code>", html)
    return _BOLD.sub(r"<strong>\1</strong>", html)


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _block(lines: list[str]) -> str:
    first = lines[0]
    if first.startswith("#"):
        level = len(first) - len(first.lstrip("#"))
        title = first[level:].strip()
        return f'<h{level} id="{anchor(title)}">{_inline(title)}</h{level}>'
    if first.startswith("|"):
        head, *rows = [line for line in lines if not _RULE_ROW.match(line.strip())]
        out = ["<table><thead><tr>", *(f"<th>{_inline(c)}</th>" for c in _cells(head)), "</tr></thead><tbody>"]
        for row in rows:
            out += ["<tr>", *(f"<td>{_inline(c)}</td>" for c in _cells(row)), "</tr>"]
        return "".join([*out, "</tbody></table>"])
    return f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>"


def render(markdown: str) -> str:
    blocks: list[list[str]] = [[]]
    for line in markdown.splitlines():
        if not line.strip():
            blocks.append([])
        elif line.startswith("#"):  # a heading is a block of its own, blank line or not
            blocks += [[line], []]
        else:
            blocks[-1].append(line)
    body = "\n".join(_block(b) for b in blocks if b)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>remediate runbooks</title></head><body>\n{body}\n</body></html>\n"
    )


@cache
def page() -> str:
    return render(resources.files("remediate.server.ui").joinpath("docs/runbooks.md").read_text(encoding="utf-8"))


def create_blueprint() -> Blueprint:
    runbooks = Blueprint("runbooks", __name__)

    @runbooks.get("/runbooks")
    def index() -> Response:
        response = Response(page(), mimetype="text/html")
        response.headers["Content-Security-Policy"] = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return runbooks
