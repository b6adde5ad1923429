"""URLs that remediate stores and shows (the history, plans, settings): absolute http(s) URLs without credentials.

Shared by the notify.* actions' `url` params and the named sinks of the settings (`sinks`, remediate.config):
a URL holding a credential belongs in a file read when the step runs (`url_file`, e.g. a mounted Secret).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit


def check_url(url: str) -> str | None:
    """None when `url` is an absolute http(s) URL, else what is wrong (a Param check)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http:// or https:// URL"
    return None


# Query parameter names that carry credentials (api_key, access_token, X-Amz-Signature, sig, password, ...),
# as whole words of the name (`signal`, `zipcode` are not).
_CREDENTIAL_PARAM = re.compile(
    r"(?:^|[^a-z])(?:api_?key|keys?|token|secret|passw\w*|pwd|sig|signature|auth\w*|credentials?|session\w*|code)"
    r"(?:$|[^a-z])",
    re.I,
)
# A value that looks like a key: 20 or more letters and digits (`+ = _` included) without a separator
# a word, a path or a host name would have ('-', '.', '/', ' '), holding both letters and digits. UUIDs and
# dash-separated names pass; `sk_live_51H...`, hex keys, base64 tokens and JWT parts do not.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+=_]{20,}")


def looks_like_token(value: str) -> bool:
    """True when `value` holds a run that looks like a key or token (see _TOKEN_RUN)."""
    return any(any(c.isdigit() for c in run) and any(c.isalpha() for c in run) for run in _TOKEN_RUN.findall(value))


def check_stored_url(url: str) -> str | None:
    """check_url, and no credentials in a URL the history stores and shows: no `user:password@`, no
    query parameter named like a credential or holding a token-like value (a Param check)."""
    problem = check_url(url)
    if problem:
        return problem
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return "holds credentials (user:password@), which the history would store and show: use url_file"
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_PARAM.search(name) or looks_like_token(value):
            return (
                f"query parameter {name!r} looks like a credential, which the history would store and show: "
                "put the URL in url_file (a file such as a mounted Secret, read only when the step runs)"
            )
    return None
