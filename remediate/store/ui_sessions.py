"""The web pages' server-side state: sessions ended by their logout, and the login throttle's counts.

Both live in the database because a page request may reach any gunicorn worker of any replica: a
logout in one must end the session in all, and failed logins must be counted wherever they land.
Called by remediate.server.ui.views through `Store.ui_sessions`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from remediate.store import schema as t
from remediate.store.database import Transactions


@dataclass(frozen=True)
class LoginThrottle:
    """At most `allowed` failed logins per client address in a window of `window` seconds; then every wrong
    token from it answers 429 until the window is over. A right token always logs in (the page checks the
    token first): behind a proxy every user shares one address, and a guesser must not lock them out."""

    allowed: int = 10
    window: float = 60.0


_ENDED = sa.select(t.ui_sessions_ended.c.sid).where(t.ui_sessions_ended.c.sid == sa.bindparam("p_sid"))
# Portable upserts (SQLite >= 3.24 and PostgreSQL): two workers ending the same session, or counting the
# same client's failures at once, must neither fail nor lose a count.
_END = sa.text("INSERT INTO ui_sessions_ended (sid, expires_at) VALUES (:p_sid, :p_until) ON CONFLICT (sid) DO NOTHING")
_FAIL = sa.text(
    "INSERT INTO ui_login_failures (client, since, failures) VALUES (:p_client, :p_now, 1) "
    "ON CONFLICT (client) DO UPDATE SET failures = ui_login_failures.failures + 1"
)
_FAILURES = sa.select(t.ui_login_failures.c.since, t.ui_login_failures.c.failures).where(
    t.ui_login_failures.c.client == sa.bindparam("p_client")
)


@dataclass
class UiSessions:
    """The sessions ended by logout and the failed logins of a store (`Store.ui_sessions`)."""

    tx: Transactions

    def end(self, sid: str, *, expires_at: float, now: float) -> None:
        """A page session's logout, refused by every worker and replica from now on until it would have expired;
        the ones that have expired since are forgotten."""
        with self.tx.write() as conn:
            conn.execute(sa.delete(t.ui_sessions_ended).where(t.ui_sessions_ended.c.expires_at < now))
            conn.execute(_END, {"p_sid": sid[:64], "p_until": expires_at})

    def ended(self, sid: str) -> bool:
        with self.tx.read() as conn:
            return conn.execute(_ENDED, {"p_sid": sid[:64]}).first() is not None

    def record_login_failure(self, client: str, *, throttle: LoginThrottle, now: float) -> None:
        """Count one failed login of `client` in its current window (a new window once the last one is over)."""
        with self.tx.write() as conn:
            conn.execute(sa.delete(t.ui_login_failures).where(t.ui_login_failures.c.since <= now - throttle.window))
            conn.execute(_FAIL, {"p_client": client[:64], "p_now": now})

    def login_retry_after(self, client: str, *, throttle: LoginThrottle, now: float) -> float | None:
        """Seconds until `client` may try to log in again (the throttle's window), or None when it may now."""
        with self.tx.read() as conn:
            row = conn.execute(_FAILURES, {"p_client": client[:64]}).first()
        if row is None or row.failures < throttle.allowed or row.since + throttle.window <= now:
            return None
        return float(row.since + throttle.window - now)
