"""A database URL as it may be printed or logged (the start-up block, errors, `db copy`'s report).

A PostgreSQL URL may carry a secret in two places: its `user:password@` part, and its query, where libpq
takes any connection parameter (`?password=...`, `?sslpassword=...`, the passphrase of the client key).
Both are shown as `***`; `passfile`, `sslkey` and the like are paths, not secrets, and are kept.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})
"""libpq connection parameters whose value is a secret (https://www.postgresql.org/docs/current/libpq-connect.html)."""

HIDDEN = "***"
# Where a string does not even parse as a URL: its userinfo's password and any secret query value.
_USERINFO = re.compile(r"(://[^/?#@:]*:)[^/?#@]*@")
_QUERY = re.compile(r"([?&](?:" + "|".join(sorted(SECRET_QUERY_KEYS)) + r")=)[^&#]*", re.IGNORECASE)


def shown_url(url: str | sa.URL) -> str:
    """The URL with its password and its secret query parameters hidden."""
    try:
        parsed = url if isinstance(url, sa.URL) else sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return hide_in_text(str(url))
    return hide_in_text(parsed.render_as_string(hide_password=True))


def hide_in_text(text: str) -> str:
    """`text` (an error that quotes a URL, a string that is not one) with what looks like its secrets hidden."""
    return _QUERY.sub(lambda m: m.group(1) + HIDDEN, _USERINFO.sub(lambda m: m.group(1) + HIDDEN + "@", text))
