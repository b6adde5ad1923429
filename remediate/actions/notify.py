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

Credentials never go into what the history stores and shows (`url`, `headers`): a URL
with a user:password@ or a credential-like query parameter (`?api_key=`, `?token=`, a
long token-like value) is refused at load, as are credential-like header names and
token-like header values (`check_stored_url`, `_check_headers`). They live in files read
only when the step executes (e.g. a mounted Kubernetes Secret): `url_file` for the URL,
`headers_file` for headers; only the paths are stored.

The `message` is rendered when the step runs (remediate.actions.messages): it can say what
the earlier steps did, and the body carries each step's outcome and the run's link.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import yaml

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.messages import render_message, run_page_url
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError, AmbiguousActionError, ParamsError, RetryableActionError
from remediate.outbound.lazyhttp import SessionSlot
from remediate.outbound.urls import CREDENTIAL_HEADER, check_stored_url, check_url, secret_header

if TYPE_CHECKING:
    import requests


class UrlFileError(ActionError):
    """The url_file cannot be read or holds no http(s) URL (its contents are never shown: the URL is the secret)."""


MAX_URL_FILE_BYTES = 4096


def read_url_file(path: str) -> str:
    """The webhook URL in `path` (e.g. a mounted Kubernetes Secret): one http(s) URL, surrounding blanks ignored."""
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_URL_FILE_BYTES + 1)
    except OSError as exc:
        raise UrlFileError(f"cannot read url_file {path}: {exc.strerror}") from None
    try:
        url = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UrlFileError(f"url_file {path} is not UTF-8 text") from None
    if len(raw) > MAX_URL_FILE_BYTES or any(c.isspace() for c in url) or check_url(url):
        raise UrlFileError(f"url_file {path} must hold one absolute http:// or https:// URL")
    return url


def check_one_url(name: str, params: Mapping[str, Any]) -> None:
    """An action posting to `url` or `url_file`: exactly one of them (ParamsError)."""
    if bool(params.get("url")) == bool(params.get("url_file")):
        raise ParamsError(f"{name} needs exactly one of url (in the playbook) and url_file (a Secret's file)")


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


MAX_HEADERS_FILE_BYTES = 64 * 1024


def _check_headers(headers: dict) -> str | None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        return "must map header names to string values"
    secret = sorted(name for name in headers if CREDENTIAL_HEADER.search(name))
    if not secret:
        # An innocent name does not make a key harmless (`X-Team: sk_live_51H...`, `X-Id: Bearer ...`).
        secret = sorted(name for name, value in headers.items() if secret_header(name, value))
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


def stored_or_file(
    name: str, kind: type, *, check: Callable[[Any], str | None], doc: str, file_doc: str
) -> dict[str, Param]:
    """A param written in the playbook (stored and shown: no credentials) and its `<name>_file` twin, the
    path of a file (a mounted Kubernetes Secret) read only when the step runs."""
    return {
        name: Param(kind, static=True, check=check, doc=doc),
        f"{name}_file": Param(str, static=True, secret=True, doc=file_doc),
    }


TIMEOUT = Param(
    float,
    default=10.0,
    check=lambda v: None if 0 < v <= 300 else "must be in (0, 300]",
    doc="seconds to wait for the answer",
)


class PostingAction(Action):
    """What notify.webhook, notify.slack and notify.teams share: a POST to a URL (`url` or `url_file`,
    exactly one) over one HTTP session, about a run whose page is under `public_url`."""

    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    reports_run: ClassVar[bool] = True

    session = SessionSlot()
    settings_section: ClassVar[str] = "notify"

    def __init__(self, session: requests.Session | None = None, *, public_url: str | None = None) -> None:
        self.session = session
        self.public_url = public_url

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        return cls(public_url=deps.settings.public_url)

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        checked = super().validate(params)
        check_one_url(self.name, checked)
        return checked


class NotifyWebhookAction(PostingAction):
    name: ClassVar[str] = "notify.webhook"
    description: ClassVar[str] = (
        "POST a JSON summary of the alert and run (each step's outcome, the run's link) to a webhook (with an "
        "Idempotency-Key header; retried only when nothing was sent)."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            **stored_or_file(
                "url",
                str,
                check=check_stored_url,
                doc="where to POST (or url_file); no credentials in it",
                file_doc="file holding the URL (a mounted Kubernetes Secret), read when the step runs: for a URL "
                "that carries a credential",
            ),
            "message": Param(
                str,
                default="",
                late=True,
                doc="free text added to the summary; a template rendered when the step runs, which may read the "
                "earlier steps' outcomes (`steps`, `step.<name>`, `run.outcome`) and `run.link`",
            ),
            **stored_or_file(
                "headers",
                dict,
                check=_check_headers,
                doc="extra HTTP headers, stored and shown: no credentials",
                file_doc="file of secret headers (YAML `Authorization: Bearer ...`), e.g. a mounted Kubernetes Secret",
            ),
            "timeout": TIMEOUT,
        }
    )

    def summary(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """The JSON body: the message (rendered now, values as they are: JSON is data to the receiver),
        each step's outcome as the store has it when this step starts, the run's link, the alert."""
        alert = ctx.alert
        message, error = render_message(params.get("message", ""), ctx, public_url=self.public_url)
        body: dict[str, Any] = {
            "source": "remediate",
            "run_id": ctx.run_id,
            "run_url": run_page_url(self.public_url, ctx.run_id),
            "playbook": ctx.playbook,
            "target": ctx.target,
            "message": message,
            "steps": [
                {"number": s.index + 1, "name": s.name, "action": s.action, "status": s.status, "error": s.error}
                for s in ctx.steps
                if s.index != ctx.step_index
            ],
            "alert": {
                "alertname": alert.alertname,
                "status": alert.status,
                "fingerprint": alert.fingerprint,
                "startsAt": alert.starts_at_text,
                "labels": dict(alert.labels),
                "annotations": dict(alert.annotations),
            },
        }
        if error:
            body["message_error"] = error
        return body

    @staticmethod
    def _where(params: Mapping[str, Any]) -> str:
        """The URL as the history may show it: from url_file, only the file's name (the URL is a secret)."""
        return params["url"] if params.get("url") else f"the URL in {params['url_file']}"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plan: dict[str, Any] = {"would_post_to": self._where(params), "body": self.summary(params, ctx)}
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
        url = params.get("url") or read_url_file(params["url_file"])
        shown = self._where(params)
        timeout = min(params["timeout"], max(ctx.remaining(), 0.1))
        headers = {"Idempotency-Key": idempotency_key(ctx), **self._headers(params)}
        body = self.summary(params, ctx)
        status = post_json(
            self.session, url, body, headers=headers, timeout=timeout, shown_url="" if params.get("url") else shown
        )
        # The message as sent: the step's params keep its template, rendered only now (actions.messages).
        result: dict[str, Any] = {"posted_to": shown, "status_code": status, "message": body["message"]}
        if "message_error" in body:
            result["message_error"] = body["message_error"]
        return result


def post_json(
    session: requests.Session, url: str, body: Any, *, headers: Mapping[str, str], timeout: float, shown_url: str = ""
) -> int:
    """POST `body` as JSON to `url` once, never following a redirect; the answer's status code (2xx).

    Raises RetryableActionError when nothing was sent, AmbiguousActionError when the receiver may have got it
    (no answer in time, connection dropped after sending, 5xx, 429), ActionError otherwise (4xx, 3xx).
    `shown_url` replaces the URL in errors where the URL itself is a secret (a chat webhook's).
    """
    import requests  # here, not at the top: see remediate.outbound.lazyhttp

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
