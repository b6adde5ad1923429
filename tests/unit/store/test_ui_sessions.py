"""remediate.store.ui_sessions: the web pages' sessions ended by logout and the login throttle's counts."""

from __future__ import annotations

import sqlalchemy as sa

from remediate.store import LoginThrottle, Store
from remediate.store import schema as t
from tests.support.stores import EVERY_DATABASE
from tests.unit.store.support import T0

pytestmark = EVERY_DATABASE

THROTTLE = LoginThrottle(allowed=3, window=60.0)


def rows(store: Store, table: sa.Table) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_an_ended_session_is_kept_until_it_would_have_expired_then_forgotten(store: Store) -> None:
    store.ui_sessions.end("first", expires_at=T0 + 100, now=T0)
    store.ui_sessions.end("first", expires_at=T0 + 100, now=T0 + 1)  # a second logout of the same cookie
    assert store.ui_sessions.ended("first") and not store.ui_sessions.ended("other")

    store.ui_sessions.end("second", expires_at=T0 + 500, now=T0 + 101)

    assert not store.ui_sessions.ended("first")  # expired: the cookie is refused for its age anyway
    assert store.ui_sessions.ended("second")
    assert rows(store, t.ui_sessions_ended) == 1


def test_failed_logins_throttle_a_client_for_the_rest_of_its_window(store: Store) -> None:
    for n in range(3):
        assert store.ui_sessions.login_retry_after("10.0.0.1", throttle=THROTTLE, now=T0 + n) is None
        store.ui_sessions.record_login_failure("10.0.0.1", throttle=THROTTLE, now=T0 + n)

    assert store.ui_sessions.login_retry_after("10.0.0.1", throttle=THROTTLE, now=T0 + 10) == 50.0
    assert store.ui_sessions.login_retry_after("10.0.0.2", throttle=THROTTLE, now=T0 + 10) is None  # per client
    assert store.ui_sessions.login_retry_after("10.0.0.1", throttle=THROTTLE, now=T0 + 60) is None  # the window is over

    store.ui_sessions.record_login_failure("10.0.0.2", throttle=THROTTLE, now=T0 + 61)  # a new window; the old rows go
    store.ui_sessions.record_login_failure("10.0.0.1", throttle=THROTTLE, now=T0 + 61)
    assert store.ui_sessions.login_retry_after("10.0.0.1", throttle=THROTTLE, now=T0 + 62) is None
    assert rows(store, t.ui_login_failures) == 2
