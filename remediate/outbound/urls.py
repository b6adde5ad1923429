"""URLs that remediate stores and shows (the history, plans, settings): absolute http(s) URLs without credentials.

Shared by the notify.* actions' `url` params and the named sinks of the settings (`sinks`, remediate.config.settings):
a URL holding a credential belongs in a file read when the step runs (`url_file`, e.g. a mounted Secret). A
credential may sit in the userinfo, the query, or the path: a chat's incoming webhook (Slack, Teams,
Discord) is a URL whose path is the key, so such a URL is refused as a literal whatever it looks like, and a
path segment that looks like a token is refused anywhere. `shown_url` and `secret_header` are what readers
see of a URL or header stored before these checks (remediate.history.secrets).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit


def check_url(url: str) -> str | None:
    """None when `url` is an absolute http(s) URL, else what is wrong (a Param check)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  # a port that is not a number raises here, not when the step posts
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range"
        return f"must be an absolute http:// or https:// URL ({exc})"
    if parts.scheme not in ("http", "https") or not host:
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


# Hosts whose webhook URLs carry their secret in the path: anyone with the URL may post to the channel.
SECRET_PATH_HOSTS = {
    "hooks.slack.com": "a Slack incoming-webhook URL",
    "hooks.slack-gov.com": "a Slack incoming-webhook URL",
    "webhook.office.com": "a Microsoft Teams incoming-webhook URL",
    "outlook.office.com": "a Microsoft Teams incoming-webhook URL",
    "logic.azure.com": "a Teams Workflows (Power Automate) webhook URL",
    "environment.api.powerplatform.com": "a Teams Workflows (Power Automate) webhook URL",
    "discord.com": "a Discord webhook URL",
    "discordapp.com": "a Discord webhook URL",
}
HIDDEN = "***"

# Header names that carry credentials: refused in `headers` (stored and shown), allowed in `headers_file`.
CREDENTIAL_HEADER = re.compile(r"authorization|cookie|token|secret|password|passwd|api[-_]?key|signature|auth", re.I)
# A header value that starts with an HTTP auth scheme is a credential whatever the header's name.
AUTH_SCHEME = re.compile(r"\s*(bearer|basic|token|digest|apikey|negotiate)\s", re.I)


def secret_header(name: str, value: str) -> bool:
    """A header whose value is a credential: by its name, an auth scheme or a token-like value."""
    return bool(CREDENTIAL_HEADER.search(name) or AUTH_SCHEME.match(value) or looks_like_token(value))


def secret_path_host(host: str | None) -> str | None:
    """What kind of secret-in-the-path webhook `host` serves (SECRET_PATH_HOSTS); None for any other host."""
    host = (host or "").lower().rstrip(".")
    for known, kind in SECRET_PATH_HOSTS.items():
        if host == known or host.endswith("." + known):
            return kind
    return None


def shown_url(url: str) -> str:
    """`url` as a reader may see it: a password, credential-like or token-like query values and token-like
    path segments as `***`; the whole path of a chat webhook host (its path is the key)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return HIDDEN
    netloc = parts.netloc.rpartition("@")[2] if parts.password is not None or parts.username else parts.netloc
    if parts.username is not None:
        netloc = f"{parts.username}:{HIDDEN}@{netloc}" if parts.password is not None else f"{parts.username}@{netloc}"
    if secret_path_host(host):
        return urlunsplit((parts.scheme, netloc, "/" + HIDDEN if parts.path.strip("/") else parts.path, "", ""))
    path = "/".join(HIDDEN if looks_like_token(segment) else segment for segment in parts.path.split("/"))
    query = "&".join(_shown_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


def _shown_pair(pair: str) -> str:
    """One `name=value` of a query as written (its encoding kept), the value hidden when it is a credential."""
    [(name, value)] = parse_qsl(pair, keep_blank_values=True) or [("", "")]
    if _CREDENTIAL_PARAM.search(name) or looks_like_token(value):
        return pair.partition("=")[0] + "=" + HIDDEN
    return pair


def check_stored_url(url: str) -> str | None:
    """check_url, and no credentials in a URL the history stores and shows: no `user:password@`, no
    query parameter named like a credential or holding a token-like value (a Param check)."""
    problem = check_url(url)
    if problem:
        return problem
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return "holds credentials (user:password@), which the history would store and show: use url_file"
    kind = secret_path_host(parts.hostname)
    if kind:
        return (
            f"is {kind}, whose path is its secret (anyone with it may post), which the history would store and "
            "show to every reader: name a sink whose url_file holds it (sinks.<name>.url_file, with a "
            "`notify` step) or give url_file (a file such as a mounted Secret, read only when the step runs)"
        )
    if any(looks_like_token(segment) for segment in parts.path.split("/")):
        return (
            "its path holds what looks like a token, which the history would store and show: put the URL in "
            "url_file (a file such as a mounted Secret, read only when the step runs)"
        )
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_PARAM.search(name) or looks_like_token(value):
            return (
                f"query parameter {name!r} looks like a credential, which the history would store and show: "
                "put the URL in url_file (a file such as a mounted Secret, read only when the step runs)"
            )
    return None
