"""Kubernetes API errors, translated at the boundary into remediate's own tree.

    ActionError
    ├── KubeError                  the API refused (4xx other than below); carries the API's message
    │   ├── KubeConfigError        no usable cluster configuration (not in a cluster, no kubeconfig)
    │   ├── KubeNotFound           404
    │   ├── KubeConflict           409 (stale resourceVersion, or AlreadyExists)
    │   └── KubeTooManyRequests    429 (an eviction a PodDisruptionBudget blocks, or API throttling)
    └── RetryableActionError
        └── KubeUnavailable        5xx, timeouts, connection refused/reset: trying again may succeed

`translate` is the one place where the official client's exceptions (ApiException,
urllib3 errors, socket errors) become these; every call of `remediate.kube.client`
goes through it, so actions never see a third-party exception. The original is
chained (`raise ... from`), and the message names the request and the API's own
words, e.g. `PATCH nodes/gpu-7: 422 Invalid: spec.taints[0].effect: Unsupported value`.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any

from remediate.errors import ActionError, RetryableActionError


@dataclass(frozen=True)
class ApiStatus:
    """What a `Status` body said: code, reason (NotFound, Conflict, TooManyRequests, ...), message, causes."""

    code: int
    reason: str = ""
    message: str = ""
    causes: tuple[dict[str, Any], ...] = field(default_factory=tuple)


class KubeError(ActionError):
    """The Kubernetes API refused the request."""

    def __init__(self, message: str | None = None, *, status: ApiStatus | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def code(self) -> int | None:
        return self.status.code if self.status else None


class KubeConfigError(KubeError):
    """No usable Kubernetes configuration: not running in a cluster, and no kubeconfig found."""


class KubeNotFound(KubeError):
    """The object does not exist (404)."""


class KubeConflict(KubeError):
    """The object changed since it was read, or already exists (409)."""


class KubeGone(KubeError):
    """The API server no longer has what was asked for (410 Gone): an expired list continue token or watch
    resourceVersion; only a fresh list resumes."""


class KubeTooManyRequests(KubeError):
    """The API asks to try later (429): a PodDisruptionBudget blocks an eviction (a `DisruptionBudget` cause),
    or throttling."""


class KubeUnavailable(RetryableActionError):
    """The Kubernetes API did not answer, or answered with a server error (5xx); trying again may succeed."""


def parse_status(code: int, body: str | bytes | None) -> ApiStatus:
    """The `Status` object of an error answer; tolerant of bodies that are not one (proxies, load balancers)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    reason, message, causes = "", "", ()
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        reason = str(data.get("reason") or "")
        message = str(data.get("message") or "")
        details = data.get("details")
        if isinstance(details, dict) and isinstance(details.get("causes"), list):
            causes = tuple(c for c in details["causes"] if isinstance(c, dict))
    elif text:
        message = text.strip()[:300]
    return ApiStatus(code, reason, message, causes)


def error_for_status(what: str, status: ApiStatus) -> ActionError:
    """The remediate error for an HTTP error status of the API (`what`: e.g. `PATCH nodes/gpu-7`)."""
    words = status.message or status.reason or "no message"
    head = f"{what}: {status.code}{' ' + status.reason if status.reason else ''}"
    text = f"{head}: {words}"
    if status.code >= 500:
        return KubeUnavailable(text)
    kind: type[KubeError] = {
        404: KubeNotFound,
        409: KubeConflict,
        410: KubeGone,
        429: KubeTooManyRequests,
    }.get(status.code, KubeError)
    return kind(text, status=status)


def translate(exc: BaseException, what: str) -> ActionError:
    """Map an exception raised by the official client (or below it) to remediate's errors."""
    if isinstance(exc, ActionError):
        return exc
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        if exc.status in (None, 0):
            return KubeUnavailable(f"{what}: {exc.reason or exc}")
        return error_for_status(what, parse_status(int(exc.status), exc.body))
    if isinstance(exc, urllib3.exceptions.HTTPError | socket.timeout | TimeoutError | ConnectionError | OSError):
        return KubeUnavailable(f"{what}: the API did not answer: {_short(exc)}")
    if isinstance(exc, ValueError):
        # The client could not read the answer into its model (pydantic ValidationError is a ValueError).
        return KubeError(f"{what}: unexpected answer from the API: {_short(exc)}")
    return KubeError(f"{what}: {exc.__class__.__name__}: {_short(exc)}")


def _short(exc: BaseException, width: int = 300) -> str:
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return text if len(text) <= width else text[: width - 1] + "…"
