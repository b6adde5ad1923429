"""The pages' session key, credential check and CSRF comparison (remediate.server.ui.session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask, request, session
from flask.sessions import SecureCookieSession

from remediate.config.settings import OPERATOR, READ, WEBHOOK, Credential
from remediate.errors import ConfigError
from remediate.server.ui.session import (
    SESSION_HOURS,
    UiSessionInterface,
    configure,
    csrf_ok,
    find_credential,
    in_cookie_path,
    log_in,
    secret_key,
    session_id,
    viewer,
)

OPERATOR_C = Credential("alice", "alice-token-0123456789", frozenset({OPERATOR}))
READ_C = Credential("auditor", "auditor-token-0123456789", frozenset({READ}))
HOOK_C = Credential("webhook", "webhook-token-0123456789", frozenset({WEBHOOK}))


def test_the_derived_key_is_the_same_for_the_same_tokens_in_any_order_and_changes_with_any_token() -> None:
    key = secret_key(None, [OPERATOR_C, READ_C, HOOK_C])
    assert key == secret_key(None, [HOOK_C, READ_C, OPERATOR_C])
    assert len(key) == 32
    changed = Credential("auditor", "auditor-token-9999999999", frozenset({READ}))
    assert secret_key(None, [OPERATOR_C, changed, HOOK_C]) != key
    assert secret_key(None, [OPERATOR_C, HOOK_C]) != key
    assert OPERATOR_C.token.encode() not in key


def test_a_secret_file_wins_and_must_be_long_enough(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 40 + "\n")
    assert secret_key(secret, [OPERATOR_C]) == b"s" * 40
    secret.write_text("short")
    with pytest.raises(ConfigError, match="at least 32"):
        secret_key(secret, [OPERATOR_C])
    with pytest.raises(ConfigError, match="cannot read ui_secret_file"):
        secret_key(tmp_path / "absent", [OPERATOR_C])


def test_a_pasted_token_finds_its_credential_with_surrounding_whitespace() -> None:
    credentials = [OPERATOR_C, READ_C, HOOK_C]
    assert find_credential(credentials, " auditor-token-0123456789\n") == READ_C
    assert find_credential(credentials, "auditor-token-012345678") is None
    assert find_credential(credentials, "") is None


def test_csrf_needs_the_sessions_own_token() -> None:
    assert csrf_ok({"csrf": "abc"}, "abc")
    assert not csrf_ok({"csrf": "abc"}, "abd")
    assert not csrf_ok({"csrf": "abc"}, None)
    assert not csrf_ok({}, "")
    assert not csrf_ok({}, "abc")


def test_the_cookie_path_covers_the_pages_only() -> None:
    assert in_cookie_path("/ui", "/ui")
    assert in_cookie_path("/ui/runs/4", "/ui")
    assert in_cookie_path("/ui/", "/ui/")
    assert not in_cookie_path("/uix", "/ui")
    assert not in_cookie_path("/webhook", "/ui")
    assert in_cookie_path("/webhook", "/")


def test_only_the_pages_open_a_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's requests (a webhook per alert) skip the signed cookie; the pages keep theirs."""
    app = Flask("t")
    configure(app, b"k" * 32)
    opened: list[str] = []
    real = UiSessionInterface.get_signing_serializer

    def counting(self: UiSessionInterface, flask_app: Flask) -> object:
        opened.append(request.path)
        return real(self, flask_app)

    monkeypatch.setattr(UiSessionInterface, "get_signing_serializer", counting)

    @app.post("/webhook")
    def webhook() -> str:
        assert not session and session.get("principal") is None  # readable, empty
        return "ok"

    @app.get("/ui/login")
    def login() -> str:
        session["csrf"] = "abc"
        return "page"

    client = app.test_client()
    client.set_cookie("remediate_ui", "forged", path="/")
    response = client.post("/webhook")
    assert response.status_code == 200 and "Set-Cookie" not in response.headers
    assert opened == []
    response = client.get("/ui/login")
    assert response.status_code == 200 and "remediate_ui=" in response.headers["Set-Cookie"]
    assert "/ui/login" in opened


def test_a_session_is_its_credential_by_fingerprint_never_by_name() -> None:
    """The cookie names no principal; the roles are those of the token that logged in."""
    key = b"k" * 32
    twin = Credential("alice", "a-read-only-twin-0123456789", frozenset({READ}))
    session = SecureCookieSession()
    log_in(session, twin, key=key, now=1000.0)
    assert twin.token not in str(session) and "alice" not in str(session)
    request = Flask("t").test_request_context("/ui/").request

    seen = viewer(session, (OPERATOR_C, twin), request, key=key, now=1001.0)

    assert seen is not None and seen.principal == "alice" and not seen.operator
    rotated = Credential("alice", "a-read-only-twin-9876543210", frozenset({READ}))
    assert viewer(session, (OPERATOR_C, rotated), request, key=key, now=1001.0) is None
    assert viewer(session, (OPERATOR_C, twin), request, key=b"x" * 32, now=1001.0) is None


def test_a_session_id_is_there_until_the_session_expires() -> None:
    session = SecureCookieSession()
    log_in(session, READ_C, key=b"k" * 32, now=1000.0)
    current = session_id(session, now=1000.0 + SESSION_HOURS * 3600)
    assert current is not None and current.expires_at == 1000.0 + SESSION_HOURS * 3600
    assert session_id(session, now=1001.0 + SESSION_HOURS * 3600) is None
    assert session_id({}, now=1000.0) is None
