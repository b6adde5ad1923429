"""A stand-in for a Kubernetes Service in front of several `remediate serve` replicas.

AlertManager is configured with one webhook URL, the Service's; the Service spreads requests over
the ready pods. `ServiceProxy` does the same on 127.0.0.1: each request goes to the next backend in
turn (so the two copies an AlertManager HA pair sends of one notification land on different
replicas, the case exactly-once must survive), and a backend that refuses the connection (a replica
killed, whose endpoint a real Service drops once its readiness fails) is skipped for the next one.
It records which backend answered each request.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import requests

from tests.support.waiting import scaled

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class ServiceProxy:
    """Round-robin HTTP forwarding to `backends` (base URLs); `served` lists (path, backend, status)."""

    def __init__(self, backends: Sequence[str], *, timeout: float = scaled(15.0)) -> None:
        self.backends = list(backends)
        self.timeout = timeout
        self.served: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._turn = itertools.count()
        handler = type("Handler", (_ProxyHandler,), {"proxy": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="service-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """Send the request to the next backend that takes the connection; 503 when none does."""
        with self._lock:
            start = next(self._turn)
        for offset in range(len(self.backends)):
            backend = self.backends[(start + offset) % len(self.backends)]
            try:
                response = requests.request(
                    method, backend + path, headers=headers, data=body, timeout=self.timeout, allow_redirects=False
                )
            except requests.ConnectionError:
                continue  # no endpoint there any more: the next ready one takes it
            with self._lock:
                self.served.append((path, backend, response.status_code))
            kept = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
            return response.status_code, kept, response.content
        return 503, {"Content-Type": "text/plain"}, b"no ready endpoint\n"

    def backends_that_answered(self, path: str = "/webhook") -> set[str]:
        with self._lock:
            return {backend for p, backend, status in self.served if p == path and status < 500}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    proxy: ServiceProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        status, answer_headers, content = self.proxy.forward(self.command, self.path, headers, body)
        self.send_response(status)
        for key, value in answer_headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_POST = _relay
