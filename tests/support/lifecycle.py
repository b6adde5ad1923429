"""What happens to a running `remediate serve` over its life, done for real: its processes found by their
titles and signalled, its port checked, its SQLite file locked by another process, webhook traffic sent from
a thread and every answer kept (tests/e2e/test_serve_lifecycle.py, tests/e2e/test_lifecycle_soak.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

import requests

from tests.support.processes import child_pids
from tests.support.server import RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

HTTP_TITLE = "remediate: http"
EXECUTOR_TITLE = "remediate: executor"

SOAK_PLAYBOOK = """\
name: soak-log
match: {alertname: SoakLog}
target: node
steps:
  - {name: log, action: log, with: {message: "soak {{ labels.Hostname }}"}}
"""


def soak_playbooks(directory: Path) -> Path:
    """One playbook with one `log` step for the `SoakLog` alerts the traffic sends."""
    write_playbook(directory, "soak", SOAK_PLAYBOOK)
    return directory


def title(pid: int) -> str:
    """What ps shows for the process (setproctitle rewrites it); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def children_titled(server: RemediateServer, wanted: str) -> list[int]:
    """The pids of the master's children whose title is `wanted` (HTTP_TITLE, EXECUTOR_TITLE)."""
    return sorted(pid for pid in child_pids(server.pid) if title(pid) == wanted)


def http_workers(server: RemediateServer, count: int | None = None, *, not_in: Collection[int] = ()) -> list[int]:
    """The master's HTTP workers, once there are `count` (default: the server's `workers`) none of `not_in`."""
    count = server.workers if count is None else count

    def found() -> list[int] | None:
        pids = children_titled(server, HTTP_TITLE)
        return pids if len(pids) == count and not set(pids).intersection(not_in) else None

    pids: list[int] = wait_until(found, 30, interval=0.05, message=f"{count} HTTP workers (none of {not_in})")
    return pids


def executor_pid(server: RemediateServer, *, not_in: Collection[int] = ()) -> int:
    """The master's executor process (once it is not one of `not_in`)."""

    def found() -> int | None:
        pids = [pid for pid in children_titled(server, EXECUTOR_TITLE) if pid not in not_in]
        return pids[0] if len(pids) == 1 else None

    pid: int = wait_until(found, 90, interval=0.05, message=f"an executor process (none of {not_in})")
    return pid


def replace_worker(server: RemediateServer, sig: signal.Signals) -> int:
    """Send `sig` to one HTTP worker; return its pid once the master has forked its replacement."""
    victim = http_workers(server)[0]
    os.kill(victim, sig)
    wait_until(lambda: victim not in children_titled(server, HTTP_TITLE), 30, interval=0.05,
               message=f"HTTP worker {victim} still there after {sig.name}")  # fmt: skip
    http_workers(server, not_in={victim})
    return victim


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port` (a new server could bind it)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_LOCKER = """\
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


@contextlib.contextmanager
def sqlite_locked(path: Path) -> Iterator[None]:
    """Another process holds SQLite's exclusive lock on `path` (a backup tool, a stuck writer) until the block
    ends: no write of the server can commit meanwhile."""
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert locker.stdout is not None
        assert locker.stdout.readline().strip() == "locked", "the locker did not get the lock"
        yield
    finally:
        for pipe in (locker.stdin, locker.stdout):
            with contextlib.suppress(OSError):
                assert pipe is not None
                pipe.close()
        locker.wait(timeout=scaled(10))


class _Background:
    """A thread running the subclass's `_loop` until `stop()` (which sets `_stop` and joins it)."""

    thread_name: ClassVar[str]
    _stop: threading.Event
    _thread: threading.Thread | None

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=scaled(60))

    def _loop(self) -> None:
        raise NotImplementedError


@dataclass
class Traffic(_Background):
    """Webhooks of distinct `SoakLog` alerts POSTed one after the other from a thread until `stop()`; each answer
    counted by its status ("cut": a connection cut under the request, "refused", or the exception's name)."""

    thread_name: ClassVar[str] = "soak-traffic"
    server: RemediateServer
    pause: float = 0.05
    answers: Counter[str] = field(default_factory=Counter)
    acknowledged: list[str] = field(default_factory=list)
    """The hosts of the alerts answered 200: each must have exactly one run."""
    bad: list[str] = field(default_factory=list)
    """What was answered neither 200 nor 503, with the body: the test's failure message."""
    cut: list[str] = field(default_factory=list)
    """Requests whose connection was cut before an answer (then sent again): only a SIGKILLed worker's."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _sent: int = 0
    began: float = field(default_factory=time.monotonic)

    def sent(self) -> int:
        return self._sent

    def _loop(self) -> None:
        session = requests.Session()  # kept-alive connections, as AlertManager's
        while not self._stop.is_set():
            self._sent += 1
            host = f"soak-{self._sent}"
            self._send(session, host, notification("SoakLog", {"Hostname": host}, fingerprint=fingerprint(host)))
            time.sleep(self.pause)

    def _send(self, session: requests.Session, host: str, payload: dict[str, object]) -> None:
        """POST once; a connection cut under the request (its worker SIGKILLed) is sent again, as AlertManager
        does: what the first try stored, the second finds (one run)."""
        for _attempt in range(5):
            at = f"{host} at {time.monotonic() - self.began:.1f}s"
            try:
                answer = session.post(self.server.webhook_url, json=payload, headers=self.server.auth,
                                      timeout=scaled(30))  # fmt: skip
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                # ChunkedEncodingError: the answer's head came and its body was cut (the worker SIGKILLed
                # between the two): AlertManager sends such a notification again, as one cut before its answer.
                if "refused" in str(exc).lower():
                    self.answers["refused"] += 1
                    self.bad.append(f"{at}: connection refused: {exc}")
                    return
                self.answers["cut"] += 1
                self.cut.append(f"{at}: {exc}")
                continue
            except requests.RequestException as exc:
                self.answers[type(exc).__name__] += 1
                self.bad.append(f"{at}: {type(exc).__name__} {exc}")
                return
            self.answers[str(answer.status_code)] += 1
            if answer.status_code == 200:
                self.acknowledged.append(host)
            elif answer.status_code != 503:
                self.bad.append(f"{at}: {answer.status_code} {answer.text[:300]}")
            return
        self.bad.append(f"{host}: cut 5 times")


def runs_by_target(server: RemediateServer, alertname: str) -> Counter[str]:
    """How many runs /history holds for each target of `alertname`'s alerts, every page of it."""
    found: Counter[str] = Counter()
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"alertname": alertname, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = server.get("/history", **params)
        for entry in page["entries"]:
            if entry["run_id"] is not None:
                found[entry["target"]] += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def counters(server: RemediateServer) -> dict[str, float]:
    """The /metrics samples of every counter (`*_total`), by name and labels: none may ever go down."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = requests.get(f"{server.url}/metrics", timeout=scaled(10))
    assert answer.status_code == 200, f"/metrics -> {answer.status_code}: {answer.text[:500]}"
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text):
        if family.type != "counter":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                samples[f"{sample.name}{sorted(sample.labels.items())}"] = sample.value
    return samples


def fingerprint(host: str) -> str:
    """AlertManager's fingerprint of the alert of `host` (16 hex digits, one per alert)."""
    return hashlib.sha256(host.encode()).hexdigest()[:16]


def slow_webhook(server: RemediateServer, payload: dict[str, object], over: float) -> int:
    """POST `payload` to /webhook as a slow client does: the head at once, the body a piece at a time over `over`
    seconds; the answer's status."""
    body = json.dumps(payload).encode()
    head = (
        f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    pieces = 10
    size = -(-len(body) // pieces)
    with socket.create_connection(("127.0.0.1", server.port), timeout=scaled(30)) as sock:
        sock.sendall(head.encode())
        for start in range(0, len(body), size):
            time.sleep(over / pieces)
            sock.sendall(body[start : start + size])
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


@dataclass
class MetricsWatch(_Background):
    """/metrics scraped from a thread every `every` s until `stop()`: each answer must be 200 and no counter may go
    below what it was (a reset is what a lost multiprocess dir looks like)."""

    thread_name: ClassVar[str] = "soak-metrics"
    server: RemediateServer
    every: float = 0.5
    scrapes: int = 0
    problems: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)
    """Scrapes whose connection was cut before an answer: only a SIGKILLed worker's."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _loop(self) -> None:
        highest: dict[str, float] = {}
        while not self._stop.wait(self.every):
            try:
                now = counters(self.server)
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                # The worker answering it was SIGKILLed, before its answer or in the middle of its body (an
                # IncompleteRead: the answer runs to some 50 KB since every known counter starts at 0): the next
                # one counts. The test bounds these by the kills.
                if "refused" not in str(exc).lower():
                    self.cut.append(f"scrape {self.scrapes + 1}: {exc}"[:500])
                    continue
                self.problems.append(f"scrape {self.scrapes + 1}: {exc}"[:500])
                continue
            except (AssertionError, requests.RequestException) as exc:
                self.problems.append(f"scrape {self.scrapes + 1}: {exc}"[:500])
                continue
            self.scrapes += 1
            for name, value in now.items():
                if value < highest.get(name, 0.0):
                    self.problems.append(f"scrape {self.scrapes}: {name} went from {highest[name]} to {value}")
                highest[name] = max(value, highest.get(name, 0.0))
