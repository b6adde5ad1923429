"""`notify.webhook`: POST a JSON summary of the run's alert to a URL written in the playbook.

The URL is a static parameter: the playbook loader refuses a templated one, so an
alert label can never choose where we send data. Connection errors, timeouts, 429
and 5xx answers are retryable (the executor retries them with tenacity per the
step's `retries`); other 4xx answers fail at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import requests

from remediate.actions.base import Action, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError, RetryableActionError


def _check_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http:// or https:// URL"
    return None


def _check_headers(headers: dict) -> str | None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        return "must map header names to string values"
    return None


class NotifyWebhookAction(Action):
    name: ClassVar[str] = "notify.webhook"
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    description: ClassVar[str] = "POST a JSON summary of the alert and run to a webhook."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "url": Param(str, required=True, static=True, check=_check_url, doc="where to POST"),
            "message": Param(str, default="", doc="free text added to the summary; may use templates"),
            "headers": Param(dict, static=True, check=_check_headers, doc="extra HTTP headers"),
            "timeout": Param(float, default=10.0, check=lambda v: None if 0 < v <= 300 else "must be in (0, 300]"),
        }
    )

    def __init__(self, session: requests.Session | None = None) -> None:
        self._session = session or requests.Session()

    def summary(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        alert = ctx.alert
        return {
            "source": "remediate",
            "run_id": ctx.run_id,
            "playbook": ctx.playbook,
            "target": ctx.target,
            "message": params.get("message", ""),
            "alert": {
                "alertname": alert.get("alertname"),
                "status": alert.get("status"),
                "fingerprint": alert.get("fingerprint"),
                "startsAt": alert.get("startsAt"),
                "labels": dict(alert.get("labels") or {}),
                "annotations": dict(alert.get("annotations") or {}),
            },
        }

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {"would_post_to": params["url"], "body": self.summary(params, ctx)}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        url = params["url"]
        timeout = min(params["timeout"], max(ctx.remaining(), 0.1))
        try:
            response = self._session.post(
                url, json=self.summary(params, ctx), headers=params.get("headers") or {}, timeout=timeout
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise RetryableActionError(f"POST {url} failed: {exc.__class__.__name__}: {exc}") from exc
        except requests.RequestException as exc:
            raise ActionError(f"POST {url} failed: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise RetryableActionError(f"POST {url} answered {response.status_code}: {response.text[:200]}")
        if response.status_code >= 400:
            raise ActionError(f"POST {url} answered {response.status_code}: {response.text[:200]}")
        return {"posted_to": url, "status_code": response.status_code}
