"""Who sent a request: its bearer token among the configured credentials, and whether that credential's
roles allow the route (`requires`). POST /v1/agent-credential is the one route outside this (agents.py)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import Any

from flask import g, request

from remediate.config.settings import WEBHOOK, Credential
from remediate.logs.audit import audit_event
from remediate.server.answers import error
from remediate.services import Services


class Unauthenticated(Exception):
    """No token, or one the server does not know (401); `reason` says which (no_token, unknown_token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def principal(services: Services) -> Credential | None:
    """The credential of the request's bearer token; None when authentication is off."""
    if not services.credentials:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise Unauthenticated("no_token")
    presented_bytes = presented.strip().encode()
    found = None
    # Compare with every token (constant time each) so the answer's timing does not say which matched.
    for credential in services.credentials:
        if hmac.compare_digest(presented_bytes, credential.token.encode()):
            found = credential
    if found is None:
        raise Unauthenticated("unknown_token")
    return found


def requires(services: Services, need: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """401 for a missing or unknown token, 403 for a known token without the `need` role; `g.principal`
    names who sent an allowed request. Refusals of the webhook are counted (they are AlertManager's)."""
    counted = need == WEBHOOK

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                credential = principal(services)
            except Unauthenticated as exc:
                _refused(exc.reason, need, None)
                if counted:
                    services.metrics.rejected.labels("401").inc()
                response, status = error(401, "unauthorized", "missing or unknown bearer token")
                response.headers["WWW-Authenticate"] = 'Bearer realm="remediate"'
                return response, status
            if credential is not None and not credential.allows(need):
                _refused("wrong_role", need, credential.name)
                if counted:
                    services.metrics.rejected.labels("403").inc()
                roles = ", ".join(sorted(credential.roles))
                return error(
                    403,
                    "forbidden",
                    f"the token of {credential.name!r} ({roles}) may not do this: it needs the {need} role",
                    principal=credential.name,
                )
            g.principal = credential.name if credential is not None else f"http:{request.remote_addr}"
            return view(*args, **kwargs)

        wrapper.__name__ = view.__name__
        return wrapper

    return decorate


def _refused(reason: str, need: str, principal: str | None) -> None:
    route = request.url_rule.rule if request.url_rule is not None else request.path
    audit_event(
        "auth_refused", level=logging.WARNING, reason=reason, method=request.method, route=route, role_needed=need,
        principal=principal, remote_addr=request.remote_addr,
    )  # fmt: skip
