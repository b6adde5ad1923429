"""The doctor's HTTP: GET a JSON answer, or ask whether a URL answers at all. One requests session, a short
timeout, no retries (a check says what it saw), and nothing but GET and HEAD: a check never notifies anyone."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediate.errors import RemediateError
from remediate.outbound.urls import shown_url

DEFAULT_TIMEOUT = 5.0
_URL_IN_MESSAGE = re.compile(r"url: \S+")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


class ProbeError(RemediateError):
    """The request failed: not reached, an HTTP error status, or not JSON."""


@dataclass
class Probe:
    timeout: float = DEFAULT_TIMEOUT
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request (a Prometheus bearer token)."""

    def get_json(self, url: str, *, params: dict[str, str] | None = None) -> Any:
        response = self._send("GET", url, params)
        try:
            return response.json()
        except ValueError as exc:
            raise ProbeError(f"GET {url}: not JSON") from exc

    def status(self, url: str, headers: dict[str, str] | None = None) -> int:
        """The HTTP status a HEAD of `url` gets (any status: the server answered); ProbeError when not reached."""
        return int(self._send("HEAD", url, None, headers, any_status=True).status_code)

    def _send(
        self,
        method: str,
        url: str,
        params: dict[str, str] | None,
        headers: dict[str, str] | None = None,
        *,
        any_status: bool = False,
    ) -> Any:
        import requests  # here: `remediate --help` loads no requests

        try:
            response = requests.request(
                method,
                url,
                params=params,
                headers={**self.headers, **(headers or {})},
                timeout=self.timeout,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise ProbeError(f"{method} {shown_without_query(url)}: {reason_of(exc)}") from None
        if not any_status and response.status_code >= 400:
            raise ProbeError(
                f"{method} {shown_without_query(url)}: HTTP {response.status_code} {_short(response.text)}"
            )
        return response


def bearer(token_file: Path | None) -> dict[str, str]:
    """The Authorization header of a token file (empty without one); ProbeError when it cannot be read."""
    if token_file is None:
        return {}
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ProbeError(f"cannot read {token_file}: {exc.strerror}") from None
    return {"Authorization": f"Bearer {token}"} if token else {}


def reason_of(exc: Exception) -> str:
    """The words of the innermost OS error (`Connection refused`), else the exception's class and text: requests
    wraps a refused connection in three layers of reprs."""
    if match := _ERRNO.search(str(exc)):
        return match.group(1).strip()
    # urllib3 names the path it asked for (`Max retries exceeded with url: /services/T0/B0/KEY`): a chat
    # webhook's key. The path is in the message's URL already, as a reader may see it.
    return f"{type(exc).__name__}: {_short(_URL_IN_MESSAGE.sub('url: (hidden)', str(exc)))}"


def _short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def shown_without_query(url: str) -> str:
    """The URL as a reader may see it (remediate.outbound.urls.shown_url: a Slack or Teams webhook's path is its key,
    token-like query values hidden), without its query string."""
    return shown_url(url).split("?", 1)[0]
