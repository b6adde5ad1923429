"""`notify.webhook`: POST a JSON summary of the run's alert to a URL written in the playbook.

The URL is a static parameter: the playbook loader refuses a templated one, so an
alert label can never choose where we send data. Redirects are never followed (the
body would go to a URL the playbook did not name): a 3xx fails, naming its Location.

A POST is not idempotent: only an error that proves the request was never sent
(connection refused, name not resolved, connect time-out) is retryable (the executor
retries it per the step's `retries`). Once the request may have reached the receiver
(no answer in time, connection dropped after sending, a 5xx or 429 answer), the step
fails with AmbiguousActionError (`maybe_applied`) and is not sent again. Each POST
carries an `Idempotency-Key` header, the same for every attempt of one step of one run
(`remediate-run-<run id>-step-<index>`), so a receiver can drop a repeat; other 4xx
answers fail at once.

Credentials (Authorization, API keys) never go into `headers`, which the history
stores and shows: they live in `headers_file`, a file (e.g. a mounted Kubernetes
Secret) read only when the step executes; only its path is stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import yaml

from remediate.actions.base import Action, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError, AmbiguousActionError, RetryableActionError
from remediate.lazyhttp import SessionSlot

if TYPE_CHECKING:
    import requests


def check_url(url: str) -> str | None:
    """None when `url` is an absolute http(s) URL, else what is wrong (a Param check)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http:// or https:// URL"
    return None


def request_not_sent(exc: requests.RequestException) -> bool:
    """True when `exc` proves the request never left: no connection was made (refused, DNS, connect time-out).

    Anything else (read time-out, connection reset or closed after sending) may come after the receiver
    got the request.
    """
    import requests  # loaded already: `exc` is one of its errors
    import urllib3.exceptions

    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError):
        return False
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError)


def idempotency_key(ctx: StepContext) -> str:
    """The same for every attempt of one step of one run: a receiver may drop what it has seen."""
    return f"remediate-run-{ctx.run_id}-step-{ctx.step_index}"


# Header names that carry credentials: refused in `headers` (stored and shown), allowed in `headers_file`.
_CREDENTIAL_HEADER = re.compile(r"authorization|cookie|token|secret|password|passwd|api[-_]?key|signature|auth", re.I)
MAX_HEADERS_FILE_BYTES = 64 * 1024


def _check_headers(headers: dict) -> str | None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        return "must map header names to string values"
    secret = sorted(name for name in headers if _CREDENTIAL_HEADER.search(name))
    if secret:
        return (
            f"{', '.join(secret)} would be stored and shown in the history: put credentials in headers_file "
            "(a file such as a mounted Secret, read only when the step runs)"
        )
    return None


class HeadersFileError(ActionError):
    """The headers_file cannot be read or is not a mapping of header names to strings (contents never shown)."""


def read_headers_file(path: str) -> dict[str, str]:
    """The headers in `path`: a YAML/JSON mapping `Name: value`. Errors name the file, never its contents."""
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_HEADERS_FILE_BYTES + 1)
    except OSError as exc:
        raise HeadersFileError(f"cannot read headers_file {path}: {exc.strerror}") from None
    if len(raw) > MAX_HEADERS_FILE_BYTES:
        raise HeadersFileError(f"headers_file {path} is over {MAX_HEADERS_FILE_BYTES} bytes")
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        raise HeadersFileError(f"headers_file {path} is not a YAML mapping of header names to values") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise HeadersFileError(f"headers_file {path} must map header names to string values (Authorization: ...)")
    if any(not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k) or "\r" in v or "\n" in v for k, v in data.items()):
        raise HeadersFileError(f"headers_file {path} holds a header name or value HTTP does not allow")
    return data


class NotifyWebhookAction(Action):
    name: ClassVar[str] = "notify.webhook"
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    description: ClassVar[str] = (
        "POST a JSON summary of the alert and run to a webhook (with an Idempotency-Key header; retried only "
        "when nothing was sent)."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "url": Param(str, required=True, static=True, check=check_url, doc="where to POST"),
            "message": Param(str, default="", doc="free text added to the summary; may use templates"),
            "headers": Param(
                dict, static=True, check=_check_headers, doc="extra HTTP headers, stored and shown: no credentials"
            ),
            "headers_file": Param(
                str,
                static=True,
                secret=True,
                doc="file of secret headers (YAML `Authorization: Bearer ...`), e.g. a mounted Kubernetes Secret",
            ),
            "timeout": Param(float, default=10.0, check=lambda v: None if 0 < v <= 300 else "must be in (0, 300]"),
        }
    )

    session = SessionSlot()

    def __init__(self, session: requests.Session | None = None) -> None:
        self.session = session

    def summary(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        alert = ctx.alert
        return {
            "source": "remediate",
            "run_id": ctx.run_id,
            "playbook": ctx.playbook,
            "target": ctx.target,
            "message": params.get("message", ""),
            "alert": {
                "alertname": alert.alertname,
                "status": alert.status,
                "fingerprint": alert.fingerprint,
                "startsAt": alert.starts_at_text,
                "labels": dict(alert.labels),
                "annotations": dict(alert.annotations),
            },
        }

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plan: dict[str, Any] = {"would_post_to": params["url"], "body": self.summary(params, ctx)}
        if params.get("headers_file"):
            plan["headers_from"] = params["headers_file"]
        return plan

    def _headers(self, params: Mapping[str, Any]) -> dict[str, str]:
        headers = dict(params.get("headers") or {})
        if params.get("headers_file"):
            secret = read_headers_file(params["headers_file"])
            twice = sorted({k.lower() for k in headers} & {k.lower() for k in secret})
            if twice:
                raise ActionError(f"header {twice[0]} is in both headers and headers_file: keep one")
            headers.update(secret)
        return headers

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        url = params["url"]
        timeout = min(params["timeout"], max(ctx.remaining(), 0.1))
        headers = {"Idempotency-Key": idempotency_key(ctx), **self._headers(params)}
        status = post_json(self.session, url, self.summary(params, ctx), headers=headers, timeout=timeout)
        return {"posted_to": url, "status_code": status}


def post_json(
    session: requests.Session, url: str, body: Any, *, headers: Mapping[str, str], timeout: float, shown_url: str = ""
) -> int:
    """POST `body` as JSON to `url` once, never following a redirect; the answer's status code (2xx).

    Raises RetryableActionError when nothing was sent, AmbiguousActionError when the receiver may have got it
    (no answer in time, connection dropped after sending, 5xx, 429), ActionError otherwise (4xx, 3xx).
    `shown_url` replaces the URL in errors where the URL itself is a secret (a chat webhook's).
    """
    import requests  # here, not at the top: see remediate.lazyhttp

    shown = shown_url or url
    try:
        # Never follow a redirect: it would send the body (and the secret headers) to another URL.
        response = session.post(url, json=body, headers=dict(headers), timeout=timeout, allow_redirects=False)
    except requests.RequestException as exc:
        # requests names the URL in its messages: leave it out where it is a secret.
        detail = exc.__class__.__name__ if shown_url else f"{exc.__class__.__name__}: {exc}"
        if request_not_sent(exc):
            raise RetryableActionError(f"POST {shown} failed: {detail}") from exc
        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            raise AmbiguousActionError(
                f"POST {shown} failed after sending: {detail}; the receiver may have got it, so it is not sent again"
            ) from exc
        raise ActionError(f"POST {shown} failed: {detail if shown_url else exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise AmbiguousActionError(
            f"POST {shown} answered {response.status_code}: {response.text[:200]}; the receiver got it "
            "and may have acted on it, so it is not sent again"
        )
    if response.status_code >= 400:
        raise ActionError(f"POST {shown} answered {response.status_code}: {response.text[:200]}")
    if 300 <= response.status_code < 400:
        location = response.headers.get("Location", "(no Location)")[:300]
        raise ActionError(
            f"POST {shown} answered {response.status_code} redirecting to {location}: not followed; "
            "put the final URL in the playbook"
        )
    return response.status_code
