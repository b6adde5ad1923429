"""Who is looking at a page: the login (a token checked once), the signed session cookie, CSRF tokens.

The cookie (Flask's, signed with itsdangerous) holds a random session id, a fingerprint of the credential
that logged in (an HMAC of its token under the signing key: never the token), the login time and a CSRF
token. Each request finds the credential again by that fingerprint among the configured tokens, so a
rotated or removed token ends its sessions at once and the roles are the credential's own now, whatever
its name; the age is checked against SESSION_HOURS whatever the browser does with the cookie's expiry, and
a session ended by its logout is refused through the store (`Store.ui_sessions.ended`), which every worker and
replica reads.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask, Request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from remediate.config.settings import OPERATOR, READ, Credential
from remediate.errors import ConfigError

SESSION_HOURS = 12
SESSION_COOKIE = "remediate_ui"
_KEY_LABEL = b"remediate ui session key v1"
MIN_SECRET_CHARS = 32


@dataclass(frozen=True)
class Viewer:
    """The person behind a page request: the principal recorded for what they do, and its roles now."""

    principal: str
    roles: frozenset[str]

    @property
    def operator(self) -> bool:
        return OPERATOR in self.roles


def secret_key(secret_file: Path | None, credentials: Iterable[Credential]) -> bytes:
    """The session cookies' signing key: the file's contents, or an HMAC of the configured tokens.

    Derived from the tokens, every worker and replica with the same tokens agrees without a shared
    secret to distribute, and changing (or revoking) any token ends every session. Without tokens
    (insecure_no_auth) the key is public, but then there is nothing a session guards."""
    if secret_file is not None:
        try:
            text = secret_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read ui_secret_file {secret_file}: {exc.strerror}") from exc
        if len(text) < MIN_SECRET_CHARS:
            raise ConfigError(f"ui_secret_file {secret_file}: at least {MIN_SECRET_CHARS} characters")
        return text.encode()
    material = "\n".join(sorted(f"{c.name}\0{c.token}\0{','.join(sorted(c.roles))}" for c in credentials))
    return hmac.new(material.encode(), _KEY_LABEL, hashlib.sha256).digest()


class UiSessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session, `Secure` whenever the page was asked for over https (or always, as set);
    only for the pages.

    A request outside the cookie's path (the API: a webhook per alert) gets Flask's null session: its
    browser sends no cookie there, and building the signer and reading and saving an empty session was
    a tenth of Flask's own work per webhook."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if not in_cookie_path(request.path, self.get_cookie_path(app)):
            return None  # Flask then uses make_null_session(): empty, and never saved
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        from flask import request

        return bool(app.config["SESSION_COOKIE_SECURE"]) or request.is_secure


def in_cookie_path(path: str, cookie_path: str) -> bool:
    """Whether a browser sends a cookie of `cookie_path` with a request for `path` (RFC 6265 5.1.4)."""
    prefix = cookie_path.rstrip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


def configure(app: Flask, key: bytes, *, always_secure: bool = False) -> None:
    """The pages' cookie session; `always_secure` (ui_cookie_secure: always) sets `Secure` on every cookie."""
    app.secret_key = key
    app.session_interface = UiSessionInterface()
    app.config.update(
        SESSION_COOKIE_SECURE=always_secure,
        SESSION_COOKIE_NAME=SESSION_COOKIE,
        SESSION_COOKIE_PATH="/ui",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=SESSION_HOURS * 3600,
        # The expiry counts from the login, not from the last page: the cookie is not re-issued per request.
        SESSION_REFRESH_EACH_REQUEST=False,
    )


def find_credential(credentials: Iterable[Credential], presented: str) -> Credential | None:
    """The credential of a pasted token; compared with every token (constant time each), like the API."""
    presented_bytes = presented.strip().encode()
    found = None
    for credential in credentials:
        if hmac.compare_digest(presented_bytes, credential.token.encode()):
            found = credential
    return found


def fingerprint(key: bytes, credential: Credential) -> str:
    """What the cookie keeps of the credential: an HMAC of its token under the signing key.

    Rotating the token changes it, so the sessions of a leaked token end with the rotation even where the
    key stays (`ui_secret_file`); without the key, the cookie's value says nothing about the token."""
    return hmac.new(key, b"credential\0" + credential.token.encode(), hashlib.sha256).hexdigest()


def log_in(session: MutableMapping[str, Any], credential: Credential, *, key: bytes, now: float) -> None:
    """A fresh session (nothing of the anonymous one survives: no session fixation of the CSRF token)."""
    session.clear()
    session.permanent = True  # type: ignore[attr-defined]
    session["sid"] = secrets.token_urlsafe(18)
    session["credential"] = fingerprint(key, credential)
    session["login_at"] = now
    session["csrf"] = secrets.token_urlsafe(32)


@dataclass(frozen=True)
class SessionId:
    """A logged-in session's own id and when it ends by itself (what a logout records as ended until then)."""

    sid: str
    expires_at: float


def session_id(session: Mapping[str, Any], *, now: float) -> SessionId | None:
    """The session's id while it is young enough to be accepted, else None (nothing left to end)."""
    sid, login_at = session.get("sid"), session.get("login_at")
    if not isinstance(sid, str) or not sid or not isinstance(login_at, int | float):
        return None
    if not 0 <= now - login_at <= SESSION_HOURS * 3600:
        return None
    return SessionId(sid, login_at + SESSION_HOURS * 3600)


def viewer(
    session: Mapping[str, Any], credentials: tuple[Credential, ...], request: Request, *, key: bytes, now: float
) -> Viewer | None:
    """The logged-in viewer, or None (not logged in, expired, or a credential rotated, removed or not allowed
    to read any more). Whether the session was logged out is the store's to say (the caller asks it)."""
    if not credentials:
        # insecure_no_auth: the API lets anyone do anything; the pages do the same, recorded by address.
        return Viewer(f"http:{request.remote_addr}", frozenset({READ, OPERATOR}))
    presented = session.get("credential")
    if session_id(session, now=now) is None or not isinstance(presented, str):
        return None
    found = None
    for credential in credentials:  # every one, in constant time each, as the API compares tokens
        if hmac.compare_digest(presented.encode(), fingerprint(key, credential).encode()):
            found = credential
    if found is None or not found.allows(READ):
        return None
    return Viewer(found.name, frozenset({READ} | ({OPERATOR} if found.allows(OPERATOR) else set())))


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, made on first use (the login form's is the anonymous session's)."""
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def csrf_ok(session: Mapping[str, Any], presented: str | None) -> bool:
    expected = session.get("csrf")
    return isinstance(expected, str) and bool(presented) and hmac.compare_digest(expected, presented or "")
