"""What a reader of a run sees of its steps (GET /runs/<id>, the run page, `remediate show`): params, plans,
results and errors with any secret a URL or a header carries hidden.

The checks at load (remediate.outbound.urls) keep secrets out of what is stored, but a history outlives them: a
run stored before a check existed (a Slack webhook URL written in a playbook, a token in a URL's path), or a
URL quoted in an error, is still shown. So every URL in a step's values is shown through `urlcheck.shown_url`
and every header of a `headers` mapping whose name or value looks like a credential as `***`.
"""

from __future__ import annotations

import re
from typing import Any

from remediate.outbound.urls import HIDDEN, secret_header, shown_url

_URL = re.compile(r"https?://[^\s\"'<>`]+", re.I)


def shown_text(text: str) -> str:
    """`text` with each http(s) URL in it shown as `shown_url` shows it."""
    return _URL.sub(lambda found: shown_url(found.group()), text) if "://" in text else text


def shown_value(value: Any, *, key: str = "") -> Any:
    """A JSON value of a step (params, plan, result) with the secrets of its URLs and headers hidden."""
    if isinstance(value, str):
        return shown_text(value)
    if isinstance(value, dict):
        if key.lower() == "headers":
            return {
                name: HIDDEN if isinstance(v, str) and secret_header(str(name), v) else shown_value(v)
                for name, v in value.items()
            }
        return {name: shown_value(v, key=str(name)) for name, v in value.items()}
    if isinstance(value, list):
        return [shown_value(v) for v in value]
    return value
