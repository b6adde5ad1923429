"""Fixtures for the end-to-end tests: the real ``remediate serve`` (gunicorn, 2 workers) as a subprocess.

``RemediateServer`` starts ``remediate serve`` on a free port with a
playbook directory and a SQLite file of the test's own, exactly as a user does: the installed console script,
and only settings a user would set (each one documented), waits for ``/readyz``,
and stops it with SIGTERM (SIGKILL after a grace period) — or kills the whole
gunicorn process group at once with ``kill()``, as a crash would. It can be
started again on the same port and database, and it logs to a file whose tail
is attached to the report of a failing test (together with the logs of the
AlertManagers and Prometheus the test started through the fixtures here). ``NodeAgent`` is the real
``remediate agent`` of one node (simulated GPUs, a scratch disk), a subprocess in the same way.

Everything the tests assert is read back the way an operator would: ``GET
/history`` and ``GET /runs/<id>`` with the bearer token, ``/metrics``, and the
``remediate history --json`` CLI on the database.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from remediate.gpu.simulator import SimulatedBackend
from tests.support.processes import REMEDIATE, log_tail, run_remediate
from tests.support.realsystems import AlertManager, WebhookRecorder, free_port
from tests.support.waiting import scaled, wait_until

TOKEN = "e2e-bearer-token"
# Bounds on an idle machine. READY_TIMEOUT, STOP_GRACE and _HTTP_TIMEOUT are scaled here; WAIT is a
# `timeout` for the waiting helpers (wait_until, wait_for_run, ...), which scale it themselves.
READY_TIMEOUT = scaled(30.0)
STOP_GRACE = scaled(20.0)
WAIT = 20.0  # generous deadline for anything a test waits for; things normally take ~1 s
POLL = 0.1
_HTTP_TIMEOUT = scaled(5.0)

# Process groups of servers still running, killed should the interpreter exit without unwinding.
_LIVE_GROUPS: set[int] = set()


@atexit.register
def _kill_leftover_servers() -> None:
    for pgid in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


class HasLogTail(Protocol):
    def log_tail(self, n: int = 40) -> str: ...


class RemediateServer:
    """``remediate serve`` under gunicorn, as a subprocess in its own process group."""

    def __init__(
        self,
        workdir: Path,
        playbooks: Path,
        *,
        token: str = TOKEN,
        workers: int = 2,
        executor_threads: int | None = None,
        env: dict[str, str] | None = None,
        database_url: str | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.playbooks = Path(playbooks)
        self.token = token
        self.workers = workers
        self.executor_threads = executor_threads
        self.extra_env = dict(env or {})
        self.db_path = self.workdir / "r.db"
        self.database_url = database_url or f"sqlite:///{self.db_path}"
        """The test's own SQLite file, or a shared database (replicas on one PostgreSQL: `pg_url`)."""
        self.log_path = self.workdir / "remediate.log"
        self.port = free_port()
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/webhook"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The gunicorn master's pid (also its process group id)."""
        assert self._proc is not None, "server not started"
        return self._proc.pid

    def command(self, executor_threads: int | None) -> list[str]:
        command = [
            str(REMEDIATE),
            "serve",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--playbooks",
            str(self.playbooks),
            "--database-url",
            self.database_url,
            "--workers",
            str(self.workers),
        ]
        if executor_threads is not None:
            command += ["--executor-threads", str(executor_threads)]
        return command

    def _env(self) -> dict[str, str]:
        # Nothing from the caller's REMEDIATE_* settings (a config file, a token) may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        # The server makes its own temporary dirs (the metrics' multiprocess files, its private dir), as it does
        # for a user: nothing from outside (a PROMETHEUS_MULTIPROC_DIR hid a reload that deleted them).
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.update(
            {
                "REMEDIATE_TOKEN": self.token,
                # One token for AlertManager and the tests' operator calls: the documented compatible set-up.
                "REMEDIATE_TOKEN_ROLES": "webhook,operator",
                "PYTHONUNBUFFERED": "1",  # as the image sets it (Dockerfile)
                "REMEDIATE_POLL_INTERVAL": "0.05",
            }
        )
        if not {"REMEDIATE_AGENTS", "REMEDIATE_AGENT_SELECTOR"} & self.extra_env.keys():
            # A single host runs node steps only for itself: this test server plays node-a (the GPU and
            # disk tests' alerts) and 127.0.0.1 (the training jobs' `instance` label).
            env.update({"REMEDIATE_NODE_NAME": "node-a", "REMEDIATE_NODE_ALIASES": "127.0.0.1"})
        env.update(self.extra_env)
        return env

    def start(self, *, executor_threads: int | None = None) -> Self:
        """Start on this server's port and database; wait until ``/readyz`` answers 200.

        ``executor_threads`` overrides the constructor's value for this start only.
        """
        if self.running:
            raise RuntimeError("already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        threads = self.executor_threads if executor_threads is None else executor_threads
        command = self.command(threads)
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self._env(),
                start_new_session=True,  # its own process group: kill() takes the workers too
            )
        _LIVE_GROUPS.add(self._proc.pid)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AssertionError(
                    f"remediate serve exited with rc={self._proc.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if requests.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError(f"remediate serve not ready after {READY_TIMEOUT:g} s; log:\n{self.log_tail()}")

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM to the gunicorn master (graceful), then SIGKILL to the group after ``grace`` s."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._killpg()
                proc.wait(timeout=scaled(5))
        self._killpg()  # a worker the master left behind
        self._forget()

    def kill(self) -> None:
        """SIGKILL the master and every worker at once: a crash, no shutdown hooks run."""
        proc = self._proc
        if proc is None:
            return
        self._killpg()
        proc.wait(timeout=scaled(5))
        self._forget()

    def restart(self, *, executor_threads: int | None = None) -> Self:
        self.stop()
        return self.start(executor_threads=executor_threads)

    def _killpg(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    def _forget(self) -> None:
        if self._proc is not None:
            _LIVE_GROUPS.discard(self._proc.pid)
        self._proc = None

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP API

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str, **params: Any) -> Any:
        response = requests.get(f"{self.url}{path}", params=params, headers=self.auth, timeout=_HTTP_TIMEOUT)
        assert response.status_code == 200, f"GET {path} -> {response.status_code}: {response.text}"
        return response.json()

    def history(self, **filters: Any) -> list[dict[str, Any]]:
        """``GET /history`` entries (decisions, newest first), all of them up to 1000."""
        page = self.get("/history", limit=1000, **filters)
        assert page["next_cursor"] is None, "more than 1000 history entries in a test"
        entries: list[dict[str, Any]] = page["entries"]
        return entries

    def runs(self, **filters: Any) -> list[dict[str, Any]]:
        """The history entries that created a run, oldest first."""
        return [e for e in reversed(self.history(**filters)) if e["run_id"] is not None]

    def run(self, run_id: int) -> dict[str, Any]:
        """``GET /runs/<id>``."""
        detail: dict[str, Any] = self.get(f"/runs/{run_id}")
        return detail

    def post_webhook(
        self, payload: dict[str, Any], token: str | None = None, *, timeout: float = _HTTP_TIMEOUT
    ) -> requests.Response:
        """POST to /webhook; ``timeout`` is a scaled bound unless the test passes the one it asserts."""
        return requests.post(
            self.webhook_url,
            json=payload,
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=timeout,
        )

    def wait_for_run(
        self,
        predicate: Callable[[dict[str, Any]], bool] = lambda entry: True,
        *,
        status: str | None = None,
        timeout: float = WAIT,
        **filters: Any,
    ) -> dict[str, Any]:
        """Poll ``/history`` until an entry with a run matches; return it (oldest match first).

        ``status`` is the run's status (``succeeded``, ``failed``, ...), checked on the entry.
        """

        def find() -> dict[str, Any] | None:
            for entry in self.runs(**filters):
                if (status is None or entry["status"] == status) and predicate(entry):
                    return entry
            return None

        found = wait_until(
            find, timeout, interval=POLL, message=f"no run matching {filters} status={status} in /history"
        )
        return found

    def wait_for_run_status(self, run_id: int, *statuses: str, timeout: float = WAIT) -> dict[str, Any]:
        """Poll ``GET /runs/<id>`` until the run's status is one of ``statuses``."""
        detail: dict[str, Any] = wait_until(
            lambda: (d := self.run(run_id))["status"] in statuses and d,
            timeout,
            interval=POLL,
            message=f"run {run_id} never reached {statuses}",
        )
        return detail

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the ``/metrics`` samples called ``name`` whose labels include ``labels``."""
        return scrape_metric(f"{self.url}/metrics", name, **labels)

    def cli_history(self, **filters: str) -> list[dict[str, Any]]:
        """``remediate history --json`` on the database (the CLI, not the server)."""
        args = ["history", "--json", "--limit", "1000", "--database-url", self.database_url]
        for key, value in filters.items():
            args += [f"--{key}", value]
        result = run_remediate(*args, timeout=30)
        assert result.returncode == 0, f"remediate history failed: {result.stdout}{result.stderr}"
        entries: list[dict[str, Any]] = json.loads(result.stdout)["entries"]
        return entries


AGENT_TOKEN = "e2e-agent-token-4242"
OLD = time.time() - 3 * 86400
"""The age of the scratch files a NodeAgent starts with: old enough for its cleanup policy (min_age 1d)."""


class NodeAgent:
    """``remediate agent`` for one "node", as a subprocess with its own GPUs, scratch disk and state."""

    def __init__(
        self, workdir: Path, node: str, *, own_credential: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.node = node
        self.own_credential = own_credential
        self.extra_env = dict(env or {})
        """More of the agent's environment (e.g. REMEDIATE_TRAINING_CONTROL_ROOT)."""
        self.port = free_port()
        self.log_path = workdir / "agent.log"
        workdir.mkdir(parents=True)
        self.gpus = SimulatedBackend(SimulatedBackend.write_example(workdir / "gpus.yaml", count=4))
        self.scratch = workdir / "scratch"
        self.scratch.mkdir()
        for index in range(3):
            path = self.scratch / f"old-{index}.tmp"
            path.write_bytes(b"x" * 1000)
            os.utime(path, (OLD, OLD))
        (self.scratch / "keep.lock").write_text("never deleted: excluded")
        self.policies = workdir / "policies.yaml"
        policy = {
            "name": "scratch",
            "mountpoint": "/scratch",
            "roots": [str(self.scratch)],
            "patterns": ["*.tmp"],
            "exclude": ["*.lock"],
            "min_age": "1d",
        }
        self.policies.write_text(yaml.safe_dump({"policies": [policy]}))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> NodeAgent:
        command = [
            str(REMEDIATE),
            "agent",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--node-name",
            self.node,
            "--gpu-backend",
            "simulated",
            "--gpu-simulator-file",
            str(self.gpus.path),
            "--policies-file",
            str(self.policies),
            "--state-file",
            str(self.workdir / "state" / "agent.db"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
        env.update(PYTHONUNBUFFERED="1", **self.extra_env)
        if self.own_credential:
            credential = self.workdir / "node-credential"
            credential.write_text(agent_credential(self.node))
            env.update(REMEDIATE_AGENT_NODE_TOKEN_FILE=str(credential))
        else:
            env.update(REMEDIATE_AGENT_TOKEN=AGENT_TOKEN)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, env=env, start_new_session=True
            )

        def ready() -> bool:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AssertionError(f"agent {self.node} exited rc={self._proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.url}/readyz", timeout=1).status_code == 200
            return False

        wait_until(ready, 30, interval=0.05, message=f"agent {self.node} not ready")
        return self

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=scaled(15))
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=scaled(5))
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the agent: a node that crashes or loses power, its calls in flight cut, nothing answered."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=scaled(5))
        self._proc = None

    @property
    def pid(self) -> int:
        """The agent's pid: its one process (what kubelet signals: the container's main process)."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n)

    def limits(self) -> dict[int, int]:
        return {g.index: g.power_limit_mw for g in self.gpus.devices()}

    def scratch_files(self) -> list[str]:
        return sorted(p.name for p in self.scratch.iterdir())


def agent_credential(node: str) -> str:
    """`remediate agent-credential NODE` as an operator runs it, with the master token in the environment."""
    done = run_remediate("agent-credential", node, env={"REMEDIATE_AGENT_TOKEN": AGENT_TOKEN})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def scrape_metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` at a Prometheus ``/metrics`` URL whose labels include ``labels``."""
    response = requests.get(url, timeout=_HTTP_TIMEOUT)
    response.raise_for_status()
    total = 0.0
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def notification(
    alertname: str,
    labels: dict[str, str],
    *,
    status: str = "firing",
    starts_at: str = "2026-11-21T05:40:14.652668659Z",
    fingerprint: str = "0123456789abcdef",
) -> dict[str, Any]:
    """An AlertManager v4 notification with one alert, shaped like what 0.25 sends."""
    all_labels = {"alertname": alertname, **labels}
    ends_at = "0001-01-01T00:00:00Z" if status == "firing" else datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {
        "receiver": "remediate",
        "status": status,
        "alerts": [
            {
                "status": status,
                "labels": all_labels,
                "annotations": {"summary": f"{alertname} test"},
                "startsAt": starts_at,
                "endsAt": ends_at,
                "generatorURL": "http://127.0.0.1:9090/graph",
                "fingerprint": fingerprint,
            }
        ],
        "groupLabels": {"alertname": alertname},
        "commonLabels": all_labels,
        "commonAnnotations": {"summary": f"{alertname} test"},
        "externalURL": "http://127.0.0.1:9093",
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{alertname}"}}',
        "truncatedAlerts": 0,
    }


def write_playbook(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def notify_and_log_playbooks(directory: Path, prefix: str, url: str) -> None:
    """Two one-step playbooks: `<prefix>Notify` alerts post to `url` (notify.webhook, no retry), `<prefix>Log`
    alerts write a log line."""
    notify = f"""\
name: {prefix.lower()}-notify
match: {{alertname: {prefix}Notify}}
target: node
steps:
  - {{name: notify, action: notify.webhook, with: {{url: "{url}", message: "{{{{ labels.Hostname }}}}"}}, retries: 0}}
"""
    log = f"""\
name: {prefix.lower()}-log
match: {{alertname: {prefix}Log}}
target: node
steps:
  - {{name: log, action: log, with: {{message: "remediated {{{{ labels.Hostname }}}}"}}}}
"""
    write_playbook(directory, "notify", notify)
    write_playbook(directory, "log", log)


# ---------------------------------------------------------------------- log tails of failing tests

_LOG_SOURCES = pytest.StashKey[list[tuple[str, HasLogTail]]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for name, source in item.stash.get(_LOG_SOURCES, []):
            report.sections.append((f"log tail: {name}", source.log_tail(60)))
    return report


@pytest.fixture
def watch_log(request: pytest.FixtureRequest) -> Callable[[str, HasLogTail], None]:
    """Register something with a ``log_tail()`` whose tail a failing test's report should show."""

    def register(name: str, source: HasLogTail) -> None:
        request.node.stash.setdefault(_LOG_SOURCES, []).append((name, source))

    return register


# ---------------------------------------------------------------------- fixtures


@pytest.fixture
def playbooks_dir(tmp_path: Path) -> Path:
    path = tmp_path / "playbooks"
    path.mkdir()
    return path


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    """Where ``notify.webhook`` steps post (its URL is written into the test's playbooks)."""
    with WebhookRecorder() as rec:
        yield rec


@pytest.fixture
def start_server(
    tmp_path: Path, playbooks_dir: Path, watch_log: Callable[[str, HasLogTail], None]
) -> Iterator[Callable[..., RemediateServer]]:
    """Factory: ``start_server(**kwargs)`` -> a started RemediateServer; all are stopped afterwards."""
    servers: list[RemediateServer] = []

    def start(*, playbooks: Path | None = None, name: str = "remediate", **kwargs: Any) -> RemediateServer:
        server = RemediateServer(tmp_path / name, playbooks or playbooks_dir, **kwargs)
        servers.append(server)
        watch_log(name, server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_agent(tmp_path: Path, watch_log: Callable[[str, HasLogTail], None]) -> Iterator[Callable[..., NodeAgent]]:
    """Factory: ``start_agent(node, **NodeAgent kwargs)`` -> the started agent of `node` (its own GPUs and state
    under tmp_path/<node>, its log tail in a failing test's report); all are stopped afterwards."""
    agents: list[NodeAgent] = []

    def start(node: str, **kwargs: Any) -> NodeAgent:
        agent = NodeAgent(tmp_path / node, node, **kwargs)
        agents.append(agent)
        watch_log(f"agent {node}", agent)
        return agent.start()

    yield start
    for agent in agents:
        agent.stop()


@pytest.fixture
def start_alertmanager(
    tmp_path: Path, watch_log: Callable[[str, HasLogTail], None]
) -> Iterator[Callable[..., AlertManager]]:
    """Factory: ``start_alertmanager(webhook_url, name=..., token=TOKEN, **kwargs)`` -> a started AlertManager."""
    managers: list[AlertManager] = []

    def start(
        webhook_url: str, *, name: str = "alertmanager", token: str | None = TOKEN, **kwargs: Any
    ) -> AlertManager:
        manager = AlertManager(tmp_path / name, webhook_url, token=token, **kwargs)
        managers.append(manager)
        watch_log(name, manager)
        return manager.start()

    yield start
    for manager in managers:
        manager.stop()
