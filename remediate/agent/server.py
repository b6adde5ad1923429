"""The HTTP face of the node agent, on the standard library's HTTP server. Only this module (and server/) knows HTTP.

Endpoints (on the /v1 routes: requests signed with this node's credential, remediate.agentwire.auth; the
answer to a request whose signature was accepted carries the agent's signature, X-Remediate-Answer):

- POST /v1/steps/plan, POST /v1/steps/execute: body {action, params, context: {run_id,
  step_index, playbook, target, alert, timeout}}. 200 {node, plan|result, seconds}; an error is
  {error, error_class: retryable|permanent, message}: 400 not a step request, 401 missing, wrong,
  stale or replayed signature, 403 signed for another node than the step's target,
  415 not JSON, 421 a step for another node, 422 unknown/not-a-node action or invalid
  params, 500 the action failed (permanent), 503 the action failed and may succeed later
  (also: the agent is stopping and starts no new step, or its state file is busy).
- POST /v1/steps/cancel: body {run_id, step_index, target}, signed like a step. The server's
  executor is stopping while it waits for that step: the agent sets the step's `stopping` event
  (a training step withdraws a command the job has not taken) and the step's own request answers
  as usual. 200 {node, running: N} (0: that step is not running here).
- GET /healthz (alive), GET /readyz (state file readable; names the node and its actions).
- Anything else: the same JSON error body (404, 405, 411, 413, ...).

Why no Flask or gunicorn: the agent serves these five routes to one caller, and those two (with werkzeug) were
a tenth of its memory on every node (its idle RSS target is <= 40 MB, docs/benchmarks.md). Each connection has a
thread of its own (at most MAX_CONNECTIONS) and one deadline for its whole request (`request_timeout`), so a
slow or idle client holds only its own thread, and only until then; `agent_threads` steps run at once. SIGTERM
tells the running steps to stop (a training step withdraws its command), closes the listener and waits
AGENT_GRACEFUL_TIMEOUT at most for the requests in flight.

The paths, the request parsing and the error answers are remediate.agentwire.protocol's, shared with the
server's AgentRunner.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from remediate.agent.service import AgentService, agent_verifier, check_agent_settings
from remediate.agentwire.auth import ANSWER_HEADER, SCHEME, AgentAuthError, NotThisNode, SignedRequest
from remediate.agentwire.protocol import (
    CANCEL_PATH,
    EXECUTE,
    HEALTH_PATH,
    PERMANENT,
    PLAN,
    READY_PATH,
    RETRYABLE,
    STEP_PATHS,
    AgentRequestError,
    CancelRequest,
    ErrorAnswer,
    StepRequest,
    WrongNodeError,
    error_answer,
)
from remediate.config.settings import GpuSettings, Settings
from remediate.config.values import secret_from
from remediate.errors import ConfigError, RemediateError, StoreUnavailable
from remediate.logs.setup import configure_logging

if TYPE_CHECKING:
    from remediate.agent.gpu_degradations import DegradationTracker, Scan
    from remediate.agent.gpu_faults import FaultWatcher
    from remediate.gpu import GpuBackend

log = logging.getLogger("remediate.agent")

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_CONNECTIONS = 1000
"""Connections served at once (a thread each); more are closed at once."""
AGENT_GRACEFUL_TIMEOUT = 30.0
"""Seconds a stopping agent waits for the requests in flight (their steps were told to stop)."""

_ROUTES = {
    STEP_PATHS[PLAN]: "POST",
    STEP_PATHS[EXECUTE]: "POST",
    CANCEL_PATH: "POST",
    HEALTH_PATH: "GET",
    READY_PATH: "GET",
}


class _Refused(Exception):
    """A request answered with an error before its step ran."""

    def __init__(self, answer: ErrorAnswer, headers: dict[str, str] | None = None) -> None:
        super().__init__(answer.message)
        self.answer = answer
        self.headers = headers or {}


class _ClientGone(Exception):
    """The client did not send its whole request within its deadline: its connection is closed unanswered."""


def _refusal(status: int, name: str, error_class: str, message: str) -> _Refused:
    return _Refused(ErrorAnswer(status, name, error_class, message))


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, each bounded by its request's deadline: a client that sends a byte at a time holds
    its thread until the deadline, not for ever (TimeoutError then)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = 0.0  # set by each request (handle_one_request)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no complete request within request_timeout")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class AgentHTTPServer(ThreadingHTTPServer):
    """The agent's routes on `address`: a thread per connection, `agent_threads` steps at once."""

    daemon_threads = True  # a step still running after the graceful wait is cut, as a killed worker's was

    def __init__(self, settings: Settings, service: AgentService, address: tuple[str, int] | None = None) -> None:
        self.service = service
        self.request_timeout = settings.server.request_timeout
        seen = service.store.seen() if service.store is not None else None
        self.verifier = agent_verifier(settings, service.node_name, service.names, seen=seen)
        if self.verifier is None:
            log.warning("AGENT AUTHENTICATION IS OFF (--insecure-no-auth)")
        self.steps = threading.BoundedSemaphore(max(1, settings.agent.threads))
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._in_flight = 0
        self._idle = threading.Condition()
        host, port = address or _parse_bind(settings.agent.bind)
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        super().__init__((host, port), _AgentHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            log.warning("closed a connection from %s: %d connections open", client_address[0], MAX_CONNECTIONS)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("connection from %s ended", client_address[0], exc_info=log.isEnabledFor(logging.DEBUG))

    def answering(self, run: Callable[[], None]) -> None:
        """Run one request's answer, counted as in flight (what a graceful stop waits for)."""
        with self._idle:
            self._in_flight += 1
        try:
            run()
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> int:
        """Wait up to `timeout` s for the requests in flight; how many are still running."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout)
            return self._in_flight


class _AgentHandler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    protocol_version = "HTTP/1.1"  # kept-alive connections: the server's AgentRunner reuses its own
    server_version, sys_version = "remediate-agent", ""
    disable_nagle_algorithm = True  # the head and the body go out in two writes: no wait for the client's ACK
    error_message_format = ""  # send_error's body is replaced by the agent's JSON error (below)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # replaced: every read goes through the request's deadline
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        # One deadline for the whole request, head and body, starting as the agent waits for it.
        self._reader.deadline = time.monotonic() + self.server.request_timeout
        self._signed: SignedRequest | None = None
        self._path = ""
        super().handle_one_request()

    def do_GET(self) -> None:
        self.server.answering(self._answer)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET  # a method a route does not take: 405 (_route)

    def _answer(self) -> None:
        try:
            self._send(200, self._route())
        except _Refused as refused:
            self._send(refused.answer.status, refused.answer.body(), refused.headers)
        except _ClientGone as exc:
            log.info("closed the connection of %s: %s", self.client_address[0], exc)
            self.close_connection = True
        except Exception as exc:
            answer = error_answer(exc, self.server.service.node_name)
            self._send(answer.status, answer.body())

    def _route(self) -> dict[str, Any]:
        """The 200 answer of the request's route; _Refused (or the step's exception) otherwise."""
        path = self._path = self.path.partition("?")[0]
        if path not in _ROUTES:
            raise _refusal(404, "not_found", PERMANENT, f"no such path: {path[:200]}")
        if _ROUTES[path] != self.command:
            message = f"{path} takes {_ROUTES[path]}"
            raise _Refused(ErrorAnswer(405, "method_not_allowed", PERMANENT, message), {"Allow": _ROUTES[path]})
        service = self.server.service
        if path == HEALTH_PATH:
            return {"status": "ok", "node": service.node_name}
        if path == READY_PATH:
            try:
                return service.ready()
            except sqlite3.Error as exc:
                unreadable = f"agent state file: {exc.__class__.__name__}"
                raise _refusal(503, "state_unreadable", RETRYABLE, unreadable) from None
        if path == CANCEL_PATH:
            return self._cancel(self._body())
        return self._step(PLAN if path == STEP_PATHS[PLAN] else EXECUTE, self._body())

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise _refusal(411, "length_required", PERMANENT, "send the body with a Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read: the connection cannot carry another request
            raise _refusal(413, "request_entity_too_large", PERMANENT, f"at most {MAX_BODY_BYTES} bytes of JSON")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise _ClientGone(f"no complete request within {self.server.request_timeout:g}s") from None
        if len(body) < length:
            raise _ClientGone("the client went away before its body was complete")
        return body

    def _signed_for(self, kind: str, body: bytes, parse: Callable[[Any], Any]) -> tuple[str | None, Any]:
        """(the node the request is signed for, the parsed request): the credential, then the content type, then
        the body, as every POST of the agent checks them; _Refused otherwise."""
        verifier, service, caller = self.server.verifier, self.server.service, self.client_address[0]
        signed_for = None
        if verifier is not None:
            try:
                header = self.headers.get("Authorization", "")
                self._signed = verifier.verify_request(header, "POST", self._path, body)
            except (StoreUnavailable, sqlite3.Error) as exc:
                # The state file that keeps the signatures seen could not take this one (busy, replaced): nothing
                # runs unrecorded; the server may try again later.
                log.warning("refused %s from %s: the state file cannot record its signature: %s", kind, caller, exc)
                raise _refusal(503, "state_unavailable", RETRYABLE, f"agent state file: {exc}") from exc
            except NotThisNode as exc:
                log.warning("refused %s from %s: %s", kind, caller, exc)
                raise _Refused(error_answer(WrongNodeError(f"wrong agent: {exc}"), service.node_name)) from exc
            except AgentAuthError as exc:
                log.warning("refused %s from %s: %s", kind, caller, exc)
                raise _Refused(
                    ErrorAnswer(401, "unauthorized", PERMANENT, f"agent credential: {exc}"),
                    {"WWW-Authenticate": f'{SCHEME} realm="remediate-agent"'},
                ) from exc
            signed_for = self._signed.node
        if self.headers.get_content_type() != "application/json":
            raise _refusal(415, "unsupported_media_type", PERMANENT, "send Content-Type: application/json")
        try:
            return signed_for, parse(_json_or_none(body))
        except AgentRequestError as exc:
            raise _Refused(error_answer(exc, service.node_name)) from exc

    def _check_signed_for(self, signed_for: str | None, target: str, run_id: int, names: str) -> None:
        """403 unless the request names the node it is signed for (`names`: "its step targets", "names target")."""
        if signed_for is not None and target != signed_for:
            log.warning("refused run %s: signed for %s, target %s", run_id, signed_for, target)
            message = f"the request is signed for node {signed_for!r} but {names} {target!r}"
            raise _refusal(403, "wrong_credential", PERMANENT, message)

    def _step(self, kind: str, body: bytes) -> dict[str, Any]:
        signed_for, step = self._signed_for(kind, body, StepRequest.parse)
        # The audit line of every call: which run and step, what, with which params, from whom.
        log.info(
            "call %s run %s step %s playbook %s action %s target %s params %s from %s (signed for %s)",
            kind,
            step.run_id,
            step.step_index,
            step.playbook,
            step.action,
            step.target,
            json.dumps(step.params, sort_keys=True, default=str)[:2000],
            self.client_address[0],
            signed_for or "nobody: --insecure-no-auth",
        )
        self._check_signed_for(signed_for, step.target, step.run_id, "its step targets")
        try:
            with self.server.steps:
                return self.server.service.run(kind, step)
        except Exception as exc:
            if not isinstance(exc, RemediateError):
                log.exception("unexpected error in %s of %s", kind, step.action)
            raise

    def _cancel(self, body: bytes) -> dict[str, Any]:
        signed_for, cancel = self._signed_for("cancel", body, CancelRequest.parse)
        log.info(
            "call cancel run %s step %s target %s from %s (signed for %s)",
            cancel.run_id,
            cancel.step_index,
            cancel.target,
            self.client_address[0],
            signed_for or "nobody: --insecure-no-auth",
        )
        self._check_signed_for(signed_for, cancel.target, cancel.run_id, "names target")
        service = self.server.service
        return {"node": service.node_name, "running": service.stop_step(cancel)}

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.connection.settimeout(self.server.request_timeout)  # a client that never reads its answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        # Only the answer to a request that carried this node's valid signature is signed: the server refuses
        # any other, and a caller without the credential gets no signature made for a nonce it chose.
        if self._signed is not None and self.server.verifier is not None:
            self.send_header(ANSWER_HEADER, self.server.verifier.sign_answer(self._signed, self._path, status, data))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line or head, an unknown method) as the agent's JSON."""
        self.close_connection = True
        self._signed = None
        name = self.responses.get(code, ("error",))[0].lower().replace(" ", "_")
        self._send(code, ErrorAnswer(code, name, PERMANENT, message or explain or name).body())

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """No access log: every step call has its audit line (above)."""

    def log_message(self, format: str, *args: Any) -> None:
        # A kept-alive connection idle past request_timeout, a malformed request: answered or closed, not news.
        log.debug("%s: %s", self.address_string(), format % args)


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _parse_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    return host.strip("[]"), int(port)


class _Stop(BaseException):
    """SIGTERM: leave the accept loop (raised by the signal handler in the main thread). A BaseException, as
    KeyboardInterrupt is: the loop's `except Exception` around accepting a connection must not swallow it."""


def start_fault_watcher(settings: Settings, node: str) -> FaultWatcher | None:
    """The GPU fault watcher (remediate.agent.gpu_faults) when gpu_events_alertmanager_url is set; ConfigError when
    the backend cannot watch (no NVML): an operator who asked for it must not believe it runs."""
    gpu = settings.gpu
    if gpu.events_alertmanager_url is None:
        return None
    from remediate.agent.gpu_faults import (
        FaultAlerts,
        FaultWatcher,
    )  # only here: tenacity stays out of an agent without it
    from remediate.gpu import GpuError, capability, open_backend

    backend = open_backend(gpu.backend, simulator_file=gpu.simulator_file)
    try:
        watch = capability(backend, "open_events", doing="watch GPU faults")()
    except GpuError as exc:
        raise ConfigError(f"gpu_events_alertmanager_url is set but this node's GPUs cannot be watched: {exc}") from exc
    token = secret_from(None, gpu.events_token_file, "gpu_events_token")
    config = FaultAlerts(
        url=gpu.events_alertmanager_url, node=node, resolve_after=gpu.events_resolve_after, token=token
    )
    return FaultWatcher(watch, config, health=_health_poll(backend, gpu, node)).start()


def _health_poll(backend: GpuBackend, gpu: GpuSettings, node: str) -> tuple[Scan, DegradationTracker] | None:
    """The silent-degradation poll beside the fault watch (gpu_health_poll_interval; 0: off). A backend without
    health reads is a ConfigError, as one that cannot watch events is."""
    if gpu.health_poll_interval <= 0:
        return None
    from remediate.agent.gpu_degradations import DegradationPolicy, DegradationTracker
    from remediate.gpu import GpuError, capability

    try:
        scan = capability(backend, "health_scan", doing="read GPU health")
    except GpuError as exc:
        raise ConfigError(f"gpu_health_poll_interval is set but the GPUs' health cannot be read: {exc}") from exc
    policy = DegradationPolicy(poll_seconds=gpu.health_poll_interval, slowdown_polls=gpu.health_slowdown_polls)
    return scan, DegradationTracker(node=node, policy=policy)


def serve_agent(settings: Settings) -> None:
    """`remediate agent`: check everything that can fail (the CLI's one line, exit 2: token, an explicitly chosen
    GPU simulator, the state file, the address), then serve in this one process until SIGTERM."""
    configure_logging(settings.log.format, settings.log.level)  # alert data can never start a forged log line
    check_agent_settings(settings)  # before the state file is created
    if settings.gpu.backend == "simulated":
        from remediate.gpu import open_backend

        open_backend(settings.gpu.backend, simulator_file=settings.gpu.simulator_file)
    service = AgentService(settings)
    service.ready()
    try:
        server = AgentHTTPServer(settings, service)
    except (OSError, ValueError) as exc:  # a port in use, a host that does not resolve, no port
        raise ConfigError(f"cannot listen at agent_bind {settings.agent.bind!r}: {exc}") from exc
    watcher = start_fault_watcher(settings, service.node_name)
    if settings.auth.insecure_no_auth and not settings.agent.resolved_token():
        log.warning("!!! --insecure-no-auth: the agent runs node steps for ANYONE who reaches %s", settings.agent.bind)

    def stop(signum: int, _frame: Any) -> None:
        service.stop_all()  # refuse new steps, tell the running ones to stop
        if watcher is not None:
            watcher.stopping.set()  # the threads end within one wait; stop() below frees the event set
        raise _Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    # A closed terminal: there is nothing to reload, and SIGHUP's default would end the agent at once.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info(
        "agent for node %s listening at %s:%s (pid %s); node actions: %s; state %s",
        service.node_name,
        *server.server_address[:2],
        os.getpid(),
        ", ".join(sorted(service.actions)),
        settings.agent.state_file,
    )
    status = 0
    try:
        server.serve_forever(poll_interval=None)  # no wake-ups while idle: SIGTERM ends the loop
    except _Stop as exc:
        server.server_close()
        if watcher is not None:
            watcher.stop()
        left = server.wait_idle(AGENT_GRACEFUL_TIMEOUT)
        log.info("agent stopped (%s): %s", exc, f"{left} request(s) cut" if left else "no request in flight")
    except KeyboardInterrupt:  # a quick stop
        status = 1
    finally:
        logging.shutdown()
        # Steps still running after the graceful wait are cut: a normal exit would wait for their threads' work
        # on the state file.
        os._exit(status)
