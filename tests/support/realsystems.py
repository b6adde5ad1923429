"""Run the real AlertManager and Prometheus next to a test, and fake their neighbours.

Integration tests import this module (it is a helper, not a test file) to check
remediate against the programs it plugs into instead of against our own idea
of them: payload shape, auth header, timestamps, retries and latency all come
from the real AlertManager 0.25 / Prometheus 2.42 that Debian bookworm ships.

What it offers:

- ``AlertManager``: one real AlertManager process with a single webhook
  receiver, plus ``fire``/``resolve`` to inject alerts through its v2 API.
- ``Prometheus``: one real Prometheus that scrapes given targets, evaluates
  given rule files and sends to a given AlertManager.
- ``MetricsEndpoint``: a scrape target whose gauges the test sets.
- ``WebhookRecorder``: a receiver that records what AlertManager POSTs and
  answers with a status the test can change while it runs.
- ``free_port``, ``parse_timestamp``: the small pieces the above are built
  from; ``wait_until`` (from tests/support/waiting.py, re-exported here).

Every bound on how long these programs may take is scaled by
``REMEDIATE_TEST_TIME_SCALE`` (tests/support/waiting.py).

Every process and server is a context manager and is stopped on exit even
when the test fails; an ``atexit`` hook kills anything still running should
the interpreter stop without unwinding (e.g. a ``KeyboardInterrupt`` during
start-up). Generated configs are checked with ``amtool check-config`` /
``promtool check config`` before a process starts, so a config mistake fails
loudly with the tool's own message instead of as a mysterious time-out.

Only the standard library, requests and PyYAML are used.
"""

from __future__ import annotations

import atexit
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self, cast
from urllib.parse import urlsplit

import requests
import yaml

from tests.support.processes import log_tail
from tests.support.waiting import scaled, wait_until

__all__ = [
    "AlertManager",
    "MetricsEndpoint",
    "Prometheus",
    "RecordedRequest",
    "ShippedAlertManager",
    "WebhookRecorder",
    "check_rules",
    "free_port",
    "parse_timestamp",
    "wait_until",
]

AMTOOL = "/usr/bin/amtool"
PROMTOOL = "/usr/bin/promtool"

# An alert posted with this end time stays firing for the whole test; without
# one AlertManager 0.25 resolves it by itself after ``resolve_timeout``.
FAR_FUTURE = datetime(2099, 1, 1, tzinfo=UTC)

# Bounds on an idle machine, scaled by REMEDIATE_TEST_TIME_SCALE (tests/support/waiting.py).
_READY_TIMEOUT = scaled(20.0)
_STOP_GRACE = scaled(5.0)
_HTTP_TIMEOUT = scaled(5.0)


# --------------------------------------------------------------------------
# Small pieces
# --------------------------------------------------------------------------


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    The kernel picks it (bind to port 0), so parallel tests do not collide on
    hard-coded ports. Another process may still grab it before ours binds; the
    process wrappers below retry with a fresh port when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_TIMESTAMP = re.compile(
    r"^(?P<base>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2})$"
)


def parse_timestamp(value: str) -> datetime:
    """Parse an AlertManager/Prometheus RFC 3339 time into an aware datetime.

    Go writes up to nine fractional digits (``05:40:14.652668659Z``), which
    ``datetime.fromisoformat`` refuses on Python 3.11; the digits beyond
    microseconds are dropped. ``0001-01-01T00:00:00Z`` (a firing alert's
    ``endsAt``) parses to ``datetime.min`` in UTC.
    """
    match = _TIMESTAMP.match(value)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    frac = (match["frac"] or "")[:6].ljust(6, "0")
    tz = "+00:00" if match["tz"] == "Z" else match["tz"]
    return datetime.fromisoformat(f"{match['base']}.{frac}{tz}")


def _format_timestamp(value: datetime) -> str:
    """Write ``value`` the way AlertManager's API expects (UTC, ``Z``).

    Naive datetimes are refused: guessing their zone would shift alerts by
    hours and make AlertManager reject or instantly resolve them.
    """
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (use datetime.now(UTC))")
    utc = value.astimezone(UTC)
    return utc.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(UTC)


def _check_with_tool(args: Sequence[str], what: str) -> None:
    """Run a checker (amtool/promtool) and fail with its output if it refuses."""
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=scaled(30), check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"{what} rejected (rc={result.returncode}): {' '.join(args)}\n{result.stdout}{result.stderr}"
        )


def check_rules(rule_files: Sequence[Path], *, promtool: str = PROMTOOL) -> None:
    """Fail loudly if ``promtool check rules`` rejects any of ``rule_files``."""
    if rule_files:
        _check_with_tool([promtool, "check", "rules", *map(str, rule_files)], "rule files")


# Processes that are running, so that atexit can kill leftovers. Context
# managers are the normal path; this only catches interpreter exits that skip
# them.
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for proc in leftovers:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=_STOP_GRACE)


class _ManagedProcess:
    """A server process on 127.0.0.1 with a log file and a readiness URL.

    Shared by ``AlertManager`` and ``Prometheus``: both listen on one HTTP
    port, answer ``GET /-/ready`` and log to stderr.
    """

    name = "process"

    def __init__(self, workdir: Path, binary: str) -> None:
        self.workdir = Path(workdir)
        self.binary = binary
        self.log_path = self.workdir / f"{self.name}.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # Subclasses say how to run themselves.
    def _command(self, port: int) -> list[str]:
        raise NotImplementedError

    def _write_config(self) -> None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        """Base URL (``http://127.0.0.1:PORT``), valid once started."""
        if not self.port:
            raise RuntimeError(f"{self.name} is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the process has been started and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n)

    def start(self) -> Self:
        """Write the config, launch the process and wait until it is ready.

        A port taken between ``free_port()`` and the bind is retried with a
        new port; any other early exit raises with the log tail.
        """
        if self.running:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        for attempt in range(3):
            port = free_port()
            with self.log_path.open("ab") as log:
                log.write(f"--- starting {self.name} on port {port}\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    self._command(port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                )
            with _LIVE_LOCK:
                _LIVE.add(proc)
            self._proc, self.port = proc, port
            try:
                self._wait_ready()
            except _Died:
                self._forget()
                if attempt < 2 and "address already in use" in self.log_tail(10):
                    continue
                raise AssertionError(
                    f"{self.name} exited with rc={proc.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                ) from None
            except BaseException:
                self.stop()
                raise
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise _Died
            try:
                response = requests.get(f"{self.url}/-/ready", timeout=1)
                if response.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError(
            f"{self.name} not ready after {_READY_TIMEOUT:g} s; log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after 5 s)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_GRACE)
        self._forget()

    def _forget(self) -> None:
        if self._proc is not None:
            with _LIVE_LOCK:
                _LIVE.discard(self._proc)
        self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Died(Exception):
    """The process exited before it became ready."""


# --------------------------------------------------------------------------
# AlertManager
# --------------------------------------------------------------------------


class AlertManager(_ManagedProcess):
    """One real AlertManager with a single webhook receiver named "remediate".

    Gossip is switched off (``--cluster.listen-address=``): with it on, the
    first notification waits ~8 s for the cluster to settle and a second
    instance would clash on port 9094.

    For an HA pair give each instance a ``cluster_port`` (from
    ``free_port()``) and the other's ``127.0.0.1:PORT`` in ``cluster_peers``;
    ``extra_args`` are appended to the command line (e.g.
    ``--cluster.settle-timeout=1s``, ``--cluster.peer-timeout=100ms``).
    """

    name = "alertmanager"
    receiver = "remediate"

    def __init__(
        self,
        workdir: Path,
        webhook_url: str,
        *,
        token: str | None,
        group_wait: str = "1s",
        group_interval: str = "1s",
        repeat_interval: str = "1h",
        send_resolved: bool = True,
        group_by: list[str] | None = None,
        max_alerts: int = 0,
        cluster_port: int | None = None,
        cluster_peers: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        binary: str = "/usr/bin/prometheus-alertmanager",
        amtool: str = AMTOOL,
    ) -> None:
        super().__init__(workdir, binary)
        if cluster_peers and cluster_port is None:
            raise ValueError("cluster_peers needs a cluster_port (gossip is off without one)")
        self.webhook_url = webhook_url
        self.cluster_port = cluster_port
        self.cluster_peers = list(cluster_peers)
        self.extra_args = list(extra_args)
        self.token = token
        self.group_wait = group_wait
        self.group_interval = group_interval
        self.repeat_interval = repeat_interval
        self.send_resolved = send_resolved
        self.group_by = ["alertname"] if group_by is None else list(group_by)
        self.max_alerts = max_alerts
        """The receiver's max_alerts (0: every alert of a group; AlertManager counts the rest in truncatedAlerts)."""
        self.amtool = amtool
        self.config_path = self.workdir / "alertmanager.yml"
        # startsAt of each alert we fired, so resolve() names the same occurrence.
        self._starts: dict[frozenset[tuple[str, str]], datetime] = {}

    def config(self) -> dict[str, Any]:
        """The configuration as a dict (what ``alertmanager.yml`` will hold)."""
        webhook: dict[str, Any] = {
            "url": self.webhook_url,
            "send_resolved": self.send_resolved,
        }
        if self.max_alerts:
            webhook["max_alerts"] = self.max_alerts
        if self.token is not None:
            webhook["http_config"] = {"authorization": {"type": "Bearer", "credentials": self.token}}
        return {
            "global": {"resolve_timeout": "5m"},
            "route": {
                "receiver": self.receiver,
                "group_by": self.group_by,
                "group_wait": self.group_wait,
                "group_interval": self.group_interval,
                "repeat_interval": self.repeat_interval,
            },
            "receivers": [{"name": self.receiver, "webhook_configs": [webhook]}],
        }

    def _write_config(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        _check_with_tool([self.amtool, "check-config", str(self.config_path)], "alertmanager.yml")

    def _command(self, port: int) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Otherwise externalURL names the host ("http://vm:PORT"), which
            # changes from machine to machine and is not reachable from tests.
            f"--web.external-url=http://127.0.0.1:{port}/",
            *self._cluster_args(),
            *self.extra_args,
        ]

    def _cluster_args(self) -> list[str]:
        if self.cluster_port is None:
            return ["--cluster.listen-address="]
        address = f"127.0.0.1:{self.cluster_port}"
        return [
            f"--cluster.listen-address={address}",
            f"--cluster.advertise-address={address}",
            *(f"--cluster.peer={peer}" for peer in self.cluster_peers),
        ]

    def fire(
        self,
        labels: dict[str, str],
        annotations: dict[str, str] | None = None,
        starts_at: datetime | None = None,
        *,
        ends_at: datetime | None = FAR_FUTURE,
        generator_url: str = "",
    ) -> None:
        """Post one firing alert through ``POST /api/v2/alerts``.

        ``ends_at`` defaults to 2099 so the alert stays firing however long
        the test runs; pass ``None`` to omit it, as a bare ``amtool alert
        add`` does, and AlertManager then resolves it after
        ``resolve_timeout`` (5m) by itself. Either way the webhook shows a
        firing alert's ``endsAt`` as ``0001-01-01T00:00:00Z``.
        """
        starts = starts_at or _now()
        self._starts[frozenset(labels.items())] = starts
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": annotations or {},
            "startsAt": _format_timestamp(starts),
        }
        if ends_at is not None:
            alert["endsAt"] = _format_timestamp(ends_at)
        if generator_url:
            alert["generatorURL"] = generator_url
        self._post_alerts([alert])

    def resolve(
        self,
        labels: dict[str, str],
        starts_at: datetime | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Post the same alert with ``endsAt`` = now, so AlertManager resolves it.

        ``starts_at`` defaults to the one used by ``fire`` for these labels
        (AlertManager rejects ``endsAt`` before ``startsAt``). With
        ``send_resolved`` a "resolved" notification follows after
        ``group_interval``.
        """
        now = _now()
        starts = starts_at or self._starts.get(frozenset(labels.items()), now)
        alert = {
            "labels": labels,
            "annotations": annotations or {},
            "startsAt": _format_timestamp(starts),
            "endsAt": _format_timestamp(max(now, starts)),
        }
        self._post_alerts([alert])

    def _post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        response = requests.post(f"{self.url}/api/v2/alerts", json=alerts, timeout=_HTTP_TIMEOUT)
        if response.status_code != 200:
            raise AssertionError(f"AlertManager refused alerts ({response.status_code}): {response.text}")

    def cluster_members(self) -> int:
        """The peers of its gossip cluster it sees now, itself included (0 while it does not answer)."""
        try:
            status = requests.get(f"{self.url}/api/v2/status", timeout=scaled(2)).json()
        except requests.RequestException:
            return 0
        return len(status.get("cluster", {}).get("peers") or [])

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts AlertManager holds (``GET /api/v2/alerts``); resolved ones drop out."""
        response = requests.get(f"{self.url}/api/v2/alerts", timeout=_HTTP_TIMEOUT)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result


class ShippedAlertManager(AlertManager):
    """The real AlertManager with the repository's alertmanager/alertmanager.yml (its routes as shipped), only
    its receivers pointed at ``webhook_url`` with ``token``."""

    shipped = Path(__file__).resolve().parents[2] / "alertmanager" / "alertmanager.yml"

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load(self.shipped.read_text())
        for receiver in config["receivers"]:
            for webhook in receiver.get("webhook_configs", []):
                webhook["url"] = self.webhook_url
                webhook["http_config"] = {"authorization": {"type": "Bearer", "credentials": self.token}}
        return config


# --------------------------------------------------------------------------
# Prometheus
# --------------------------------------------------------------------------


class Prometheus(_ManagedProcess):
    """One real Prometheus scraping ``scrape_targets`` and alerting to one AlertManager."""

    name = "prometheus"

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_targets: list[str],
        rule_files: list[Path],
        alertmanager_url: str,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        binary: str = "/usr/bin/prometheus",
        promtool: str = PROMTOOL,
    ) -> None:
        super().__init__(workdir, binary)
        self.scrape_targets = list(scrape_targets)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.alertmanager_url = alertmanager_url.rstrip("/")
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.promtool = promtool
        self.config_path = self.workdir / "prometheus.yml"

    def config(self) -> dict[str, Any]:
        """The configuration as a dict (what ``prometheus.yml`` will hold)."""
        am = urlsplit(self.alertmanager_url)
        alertmanager: dict[str, Any] = {
            "scheme": am.scheme or "http",
            "static_configs": [{"targets": [am.netloc]}],
        }
        if am.path:
            alertmanager["path_prefix"] = am.path
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(p) for p in self.rule_files],
            "alerting": {"alertmanagers": [alertmanager]},
            "scrape_configs": [
                {
                    "job_name": "test",
                    "static_configs": [{"targets": self.scrape_targets}],
                }
            ],
        }

    def _write_config(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        # "check config" also checks every rule file the config names.
        _check_with_tool([self.promtool, "check", "config", str(self.config_path)], "prometheus.yml")

    def _command(self, port: int) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Makes each alert's generatorURL point here, not at the host name.
            f"--web.external-url=http://127.0.0.1:{port}/",
        ]

    def _api(self, path: str, **params: str) -> Any:
        response = requests.get(f"{self.url}{path}", params=params, timeout=_HTTP_TIMEOUT)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} failed: {body}")
        return body["data"]

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets (``/api/v1/targets``)."""
        data = self._api("/api/v1/targets", state="active")
        result: list[dict[str, Any]] = data["activeTargets"]
        return result

    def alertmanagers(self) -> list[str]:
        """URLs of the AlertManagers Prometheus currently sends to."""
        data = self._api("/api/v1/alertmanagers")
        return [am["url"] for am in data["activeAlertmanagers"]]

    def wait_until_scraping(self, timeout: float = 30) -> None:
        """Block until every target is up and the AlertManager is discovered.

        Prometheus needs a few seconds after ``/-/ready`` before it has
        scraped once and found its AlertManager; alerts evaluated before then
        are never sent, so tests that start measuring earlier see noise.
        """
        expected = set(self.scrape_targets)
        am_netloc = urlsplit(self.alertmanager_url).netloc

        def ready() -> str:
            targets = self.targets()
            up = {t["labels"].get("instance") for t in targets if t["health"] == "up"}
            if not expected <= up:
                return ""
            if not any(am_netloc in url for url in self.alertmanagers()):
                return ""
            return "ok"

        try:
            wait_until(ready, timeout, interval=0.2, message="Prometheus not scraping")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\ntargets: {self.targets()}\nalertmanagers: {self.alertmanagers()}\nlog:\n{self.log_tail()}"
            ) from None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query (``/api/v1/query``); returns the ``result`` list."""
        data = self._api("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts as Prometheus' rule evaluation sees them (pending and firing)."""
        data = self._api("/api/v1/alerts")
        result: list[dict[str, Any]] = data["alerts"]
        return result


# --------------------------------------------------------------------------
# In-process HTTP servers
# --------------------------------------------------------------------------


class _QuietHandler(BaseHTTPRequestHandler):
    """Keeps ``http.server``'s per-request stderr lines out of test output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _OwnedServer(ThreadingHTTPServer):
    """Lets a request handler reach the object that owns its server."""

    daemon_threads = True  # a hung client must not block close()

    def __init__(self, handler: type[BaseHTTPRequestHandler], owner: Any) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.owner = owner


class _BackgroundServer:
    """A ThreadingHTTPServer on 127.0.0.1:<free port> served by a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _OwnedServer(handler, self)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class MetricsEndpoint(_BackgroundServer):
    """A scrape target serving gauges the test sets, in Prometheus text format.

    Stands in for dcgm-exporter / node_exporter so a test controls exactly
    when a rule's condition becomes true.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        super().__init__(_MetricsHandler)

    @property
    def target(self) -> str:
        """``host:port`` as a Prometheus static target."""
        return f"127.0.0.1:{self.port}"

    def set(self, name: str, value: float, labels: dict[str, str] | None = None) -> None:
        """Set gauge ``name{labels}`` to ``value`` (creating it if needed)."""
        key = tuple(sorted((labels or {}).items()))
        with self._lock:
            self._gauges.setdefault(name, {})[key] = float(value)

    def remove(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Stop exporting one series (Prometheus then marks it stale)."""
        key = tuple(sorted((labels or {}).items()))
        with self._lock:
            series = self._gauges.get(name, {})
            series.pop(key, None)
            if not series:
                self._gauges.pop(name, None)

    def render(self) -> str:
        """The exposition text served on ``/metrics``."""
        lines: list[str] = []
        with self._lock:
            for name, series in sorted(self._gauges.items()):
                lines.append(f"# TYPE {name} gauge")
                for key, value in sorted(series.items()):
                    label_text = ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in key)
                    selector = f"{{{label_text}}}" if label_text else ""
                    lines.append(f"{name}{selector} {value!r}")
        return "\n".join(lines) + "\n"


class _MetricsHandler(_QuietHandler):
    def do_GET(self) -> None:
        endpoint = cast(MetricsEndpoint, cast(_OwnedServer, self.server).owner)
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = endpoint.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the WebhookRecorder received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    raw: bytes
    json: Any  # None when the body is not JSON
    received_at: float  # time.monotonic(), to measure latency against
    received_wall: datetime  # when it arrived, UTC
    answered: int = 200  # the status the recorder replied with

    def header(self, name: str) -> str | None:
        """Header value by case-insensitive name."""
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None


class WebhookRecorder(_BackgroundServer):
    """An HTTP receiver that records every request and answers ``status``.

    Point AlertManager at ``url`` to see exactly what it sends. Change
    ``status`` (e.g. to 500 or 400) or ``delay`` (seconds) while a test runs
    to watch AlertManager's retry behaviour.
    """

    def __init__(self, status: int = 200, path: str = "/webhook") -> None:
        self.status = status
        self.delay = 0.0
        self.drop = False
        """Close the connection after reading (and recording) the request, without answering."""
        self.gate: threading.Event | None = None
        """While an Event: each request, once recorded, waits for it to be set before its answer (a step that
        posts here is held in its request until the test sets it)."""
        self.path = path
        # Re-entrant: wait_for() runs the caller's predicate under the lock,
        # and a predicate may well look at .requests.
        self._lock = threading.RLock()
        self._requests: list[RecordedRequest] = []
        self._arrived = threading.Condition(self._lock)
        super().__init__(_RecorderHandler)

    @property
    def url(self) -> str:
        """Full URL to give AlertManager as the webhook."""
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of all requests recorded so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear(self) -> None:
        """Forget what was recorded so far."""
        with self._lock:
            self._requests.clear()

    def wait_for(
        self,
        predicate: Callable[[RecordedRequest], bool] = lambda r: True,
        timeout: float = 10.0,
        *,
        after: int = 0,
    ) -> RecordedRequest:
        """Return the first request (from index ``after`` on) matching ``predicate``.

        Waits on a condition variable rather than sleeping, so latency
        measured around it is not inflated by a polling interval.
        """
        limit = scaled(timeout)
        deadline = time.monotonic() + limit
        with self._arrived:
            while True:
                for request in self._requests[after:]:
                    if predicate(request):
                        return request
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [r.json for r in self._requests[after:]]
                    raise AssertionError(f"no matching request within {limit:g} s; saw {len(seen)}: {seen!r}")
                self._arrived.wait(remaining)

    def _record(self, request: RecordedRequest) -> None:
        with self._arrived:
            self._requests.append(request)
            self._arrived.notify_all()


class _RecorderHandler(_QuietHandler):
    def _handle(self) -> None:
        recorder = cast(WebhookRecorder, cast(_OwnedServer, self.server).owner)
        received_at, received_wall = time.monotonic(), _now()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        status = recorder.status
        recorder._record(
            RecordedRequest(
                method=self.command,
                path=self.path,
                headers=dict(self.headers.items()),
                raw=raw,
                json=body,
                received_at=received_at,
                received_wall=received_wall,
                answered=status,
            )
        )
        if recorder.drop:
            self.close_connection = True
            return
        if recorder.gate is not None:
            recorder.gate.wait(scaled(60))
        if recorder.delay:
            time.sleep(recorder.delay)
        reply = b'{"status":"recorded"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_POST = _handle
    do_PUT = _handle
    do_GET = _handle
