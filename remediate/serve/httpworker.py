"""The gunicorn worker of `remediate serve`: slow or idle clients hold no thread.

gunicorn's own workers read a request with a blocking socket and no deadline: the sync worker
gives each connection the worker's only thread, so two idle TCP connections stop the server; the
gthread worker (27.x) parks a new connection in its selector only after 5 s without a byte, and
once one byte arrived a thread reads the rest with no timeout, so a client that sends a header a
byte at a time holds a thread for ever (8 such clients stop the agent).

`BufferingWorker` is the gthread worker with two changes:

- the request is read in the worker's event loop, not in a thread: a new (or kept-alive)
  connection waits in the selector, non-blocking, until its head and a body of up to
  `BUFFER_BODY_BYTES` have arrived, and only a complete request goes to a thread (with the bytes
  already read). Idle and slow connections cost a file descriptor and their buffer, never a thread;
- every connection has one deadline for its whole request (`request_timeout`, head and body):
  past it the event loop closes a connection still being buffered, and in a thread (a body over
  `BUFFER_BODY_BYTES`, a chunked body, `Expect: 100-continue`) each read waits only until the
  deadline, then the request ends as if the client had gone away.

This is what a buffering front (nginx's `client_header_timeout`/`client_body_timeout`) gives, in
the worker itself, so the pod needs no second container.

Why gthread's private classes, pinned (GUNICORN_CHECKED), and not gunicorn's public custom-worker API: a
subclass of `gunicorn.workers.base.Worker` (what the `worker_class` setting documents) gets only the
process around a worker: its signals, heartbeat (`notify`), `wsgi` app and listening `sockets`. Everything
between a socket and the WSGI app (the event loop, keep-alive, the thread pool, HTTP/1.1 parsing with
gunicorn's limits, building the WSGI environ, writing the response, TLS, graceful stop, `max_requests`) it
would have to do again, and gunicorn's own parser and response writer (`gunicorn.http`) are no more public
than gthread. What is taken from gthread instead, and checked against GUNICORN_CHECKED's release:

- `ThreadWorker`, overridden: `accept(listener)` (the connection is buffered, not handed to a thread),
  `on_client_socket_readable(conn, client)` (a kept-alive connection is buffered again), `handle(conn)` (the
  buffered bytes go back to the parser, the deadline is set) and `handle_exit` (its SIGTERM handler);
- `ThreadWorker`, used: `poller` (its selector), `pending_conns` (the deque `murder_pending()` closes past
  each `conn.timeout`), `keepalived_conns`, `nr_conns` (its count against `worker_connections`) and
  `enqueue_req(conn)` (hands a connection to the thread pool);
- `TConn(cfg, sock, client, server)`: its `sock`, `client`, `timeout`, `parser`, `initialized` and
  `data_ready` attributes, `init()` and `close()`;
- `gunicorn.http.get_parser(cfg, sock, client)` and its parser's `unreader.unread(bytes)`, and
  `gunicorn.sock.ssl_context(cfg)` (the context the documented `ssl_context` hook is given).
"""

from __future__ import annotations

import logging
import re
import selectors
import socket
import ssl
import threading
import time
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gunicorn_sock
from gunicorn.workers.gthread import TConn, ThreadWorker

GUNICORN_CHECKED = (27, 0)
"""The gunicorn minor release whose undocumented internals remediate/serve was checked against. pyproject.toml
allows only it, and tests/unit/test_dependency_pins.py fails when the installed gunicorn is another. Before
moving it, read the new minor's source against each seam:

- gunicorn/workers/gthread.py and gunicorn/http/: this module (its docstring lists what it overrides and uses);
- gunicorn/arbiter.py: serve/launcher.py's arbiter (`manage_workers`, `reap_workers`, `stop` overridden; `pid`,
  `LISTENERS`, `cfg`, `app`, `log` read), serve/reload.py (`handle_hup`, `start`), serve/lifetime.py (`spawn_worker`:
  the child's SystemExit raised inside it);
- gunicorn/util.py: serve/proctitle.py replaces `util._setproctitle` (the master's and each worker's title).

What launcher.py builds its application on (gunicorn's custom-application base class), its `logger_class`
(`gunicorn.glogging.Logger`) and the server hooks (`post_fork`, `child_exit`) are gunicorn's documented API."""

log = logging.getLogger("remediate.http")

BUFFER_BODY_BYTES = 256 * 1024
"""Bodies up to this size are read whole in the event loop; larger ones in a thread, within the deadline.

An AlertManager notification of a few alerts is a few KiB; this bounds the memory of slow
connections at this much each (gunicorn's `worker_connections`, 1000, connections at most)."""

HEAD_BYTES = 64 * 1024
"""A head not complete within this many bytes goes to a thread, whose parser rejects it (gunicorn's limits)."""

TOLD_TO_STOP = threading.Event()
"""Set in an HTTP worker once its master told it to stop (SIGTERM): after a reload, the master has the new
set and has forked the workers that serve with it (POST /-/reload answers then)."""

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,20})[ \t]*(?=\r\n|$)")
_HANDS_OVER = re.compile(rb"\r\n(?:transfer-encoding|expect|upgrade):")


class _Deadline:
    """Reads that end at `deadline` (time.monotonic()); a read past it returns b"" (EOF)."""

    deadline: float | None = None
    send_timeout: float = 10.0
    timed_out: bool = False

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if self.deadline is None:
            return super().recv(bufsize, flags)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = True
            return b""
        super().settimeout(remaining)
        try:
            return super().recv(bufsize, flags)
        except TimeoutError:
            self.timed_out = True
            return b""

    def sendall(self, data: Any, flags: int = 0) -> None:
        # The read deadline may be nearly spent; a response gets its own bound (a client that never reads).
        super().settimeout(self.send_timeout)
        super().sendall(data, flags)


class DeadlineSocket(_Deadline, socket.socket):
    """A plain client socket whose reads end at its deadline."""


class DeadlineTLSSocket(_Deadline, ssl.SSLSocket):
    """A TLS client socket whose reads end at its deadline (the SSLContext's `sslsocket_class`)."""


def request_complete(buffered: bytes | bytearray) -> bool:
    """Whether a thread can take the request over: all of it is here, or the rest must be read in a thread."""
    end = buffered.find(b"\r\n\r\n")
    if end < 0:
        return len(buffered) > HEAD_BYTES
    head = bytes(buffered[:end]).lower()
    if _HANDS_OVER.search(head):
        return True
    match = _CONTENT_LENGTH.search(head)
    if match is None:
        return True
    length = int(match.group(1))
    return length > BUFFER_BODY_BYTES or len(buffered) - (end + 4) >= length


class BufferingWorker(ThreadWorker):  # type: ignore[misc]
    """gthread worker that hands a thread only complete requests, and bounds each request by a deadline."""

    request_timeout: float = 10.0
    """Seconds a client may take to send one request, head and body (set by `worker_class`)."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        TOLD_TO_STOP.set()
        super().handle_exit(sig, frame)

    def accept(self, listener: socket.socket) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if isinstance(exc, BlockingIOError | ConnectionAbortedError):
                return
            raise
        self.nr_conns += 1
        sock: Any
        if self.cfg.is_ssl:  # the handshake happens in the event loop too (_on_bytes), not in a thread
            client.setblocking(False)
            sock = self._tls_context().wrap_socket(
                client, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=True
            )
            sock.handshaken = False
        else:
            sock = DeadlineSocket(client.family, client.type, client.proto, fileno=client.detach())
        sock.send_timeout = self.request_timeout
        conn = TConn(self.cfg, sock, address, listener.getsockname())
        conn.buffered = bytearray()
        self._buffer(conn)

    def _tls_context(self) -> ssl.SSLContext:
        """gunicorn's SSLContext of certfile/keyfile (made once per worker), making DeadlineTLSSockets."""
        context = getattr(self, "_tls", None)
        if context is None:
            context = self._tls = gunicorn_sock.ssl_context(self.cfg)
            context.sslsocket_class = DeadlineTLSSocket
        return context

    def on_client_socket_readable(self, conn: TConn, client: socket.socket) -> None:
        # A kept-alive connection sends its next request: buffer it like a new one.
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        conn.buffered = bytearray()
        self._buffer(conn)

    def _buffer(self, conn: TConn) -> None:
        conn.sock.setblocking(False)
        conn.sock.deadline = time.monotonic() + self.request_timeout
        conn.sock.timed_out = False
        # pending_conns is the gthread worker's deque of connections waiting for data, closed by
        # murder_pending() once `conn.timeout` passes; every entry gets the same delay, so it stays sorted.
        conn.timeout = conn.sock.deadline
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_bytes, conn))

    def _on_bytes(self, conn: TConn, client: socket.socket) -> None:
        try:
            tls = isinstance(client, ssl.SSLSocket)
            data = self._tls_bytes(client) if tls else socket.socket.recv(client, 65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:  # a reset, or a handshake that failed (plain HTTP on the HTTPS port: nothing to answer)
            data = b""
        if data:
            conn.buffered += data
            if not request_complete(conn.buffered):
                return
        self.poller.unregister(client)
        self.pending_conns.remove(conn)
        if not data:  # the client went away before its request was complete
            self.nr_conns -= 1
            conn.close()
            return
        conn.data_ready = True
        self.enqueue_req(conn)

    @staticmethod
    def _tls_bytes(client: ssl.SSLSocket) -> bytes:
        """What a non-blocking TLS connection has decrypted so far, once its handshake is done (SSLWant*Error
        until there is something)."""
        if not getattr(client, "handshaken", True):
            client.do_handshake()
            client.handshaken = True  # type: ignore[attr-defined]
        data = ssl.SSLSocket.recv(client, 65536)
        while data and client.pending():  # decrypted bytes the selector will not announce again
            data += ssl.SSLSocket.recv(client, client.pending())
        return data

    def handle(self, conn: TConn) -> Any:
        conn.data_ready = True  # the event loop has waited already; never wait again in a thread
        if isinstance(conn.sock, ssl.SSLSocket) and conn.parser is None:
            # Wrapped and handshaken in accept/_on_bytes: TConn.init would wrap it a second time.
            conn.initialized = True
            conn.sock.setblocking(True)
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.init()
        buffered = getattr(conn, "buffered", None)
        if buffered:
            conn.parser.unreader.unread(bytes(buffered))
            conn.buffered = bytearray()
        if conn.sock.deadline is None:  # read ahead by the previous request's body drain
            conn.sock.deadline = time.monotonic() + self.request_timeout
        try:
            return super().handle(conn)
        finally:
            if conn.sock.timed_out:
                log.info(
                    "closed the connection of %s: no complete request within %gs", conn.client, self.request_timeout
                )
            conn.sock.deadline = None


def worker_class(request_timeout: float) -> type[BufferingWorker]:
    """The worker class to give gunicorn (`worker_class`), with this request deadline."""
    return type("RemediateWorker", (BufferingWorker,), {"request_timeout": float(request_timeout)})
