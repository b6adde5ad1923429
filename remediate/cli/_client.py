"""A small HTTP client of a running server, for the CLI's --server mode."""

from __future__ import annotations

from typing import Any

import requests

from remediate.errors import RemediateError

DOCTOR_TIMEOUT = 120.0
"""Seconds `remediate doctor --server` waits for GET /doctor (a Prometheus query per series, a HEAD per sink)."""


class ServerError(RemediateError):
    """The server refused the request; `status` is its HTTP status (the CLI's exit code follows it)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", self.timeout)
        response = self.session.request(method, self.base_url + path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = {"message": response.text[:200]}
        if response.status_code >= 400:
            message = body.get("message") if isinstance(body, dict) else None
            raise ServerError(f"{method} {path}: HTTP {response.status_code}: {message or body}", response.status_code)
        return body

    def history(self, filters: dict[str, Any]) -> dict[str, Any]:
        return self._call("GET", "/history", params=filters)

    def report(self, filters: dict[str, Any]) -> dict[str, Any]:
        return self._call("GET", "/report", params=filters)

    def run(self, run_id: int) -> dict[str, Any]:
        return self._call("GET", f"/runs/{run_id}")

    def approve(self, run_id: int, by: str) -> dict[str, Any]:
        return self._call("POST", f"/runs/{run_id}/approve", json={"by": by})

    def pause(self, reason: str, by: str, *, force: bool = False) -> dict[str, Any]:
        return self._call("POST", "/pause", json={"reason": reason, "by": by, "force": force})

    def resume(self, by: str) -> dict[str, Any]:
        return self._call("POST", "/resume", json={"by": by})

    def breaker_status(self) -> dict[str, Any]:
        return self._call("GET", "/breaker")

    def breaker_reset(self, by: str, reason: str) -> dict[str, Any]:
        return self._call("POST", "/breaker/reset", json={"by": by, "reason": reason})

    def ladders(self, filters: dict[str, Any]) -> dict[str, Any]:
        return self._call("GET", "/ladders", params=filters)

    def ladders_reset(self, target: str, playbook: str | None, reason: str, by: str) -> dict[str, Any]:
        body = {"target": target, "reason": reason, "by": by, **({"playbook": playbook} if playbook else {})}
        return self._call("POST", "/ladders/reset", json=body)

    def doctor(self) -> dict[str, Any]:
        """GET /doctor: the server runs every check (each request bounded by its own timeout), so wait longer."""
        return self._call("GET", "/doctor", timeout=max(self.timeout, DOCTOR_TIMEOUT))
