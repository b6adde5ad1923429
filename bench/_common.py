"""Shared helpers of the benchmark scripts: start servers on 127.0.0.1, drive wrk, build payloads.

Not a test module and not part of the package: the scripts in bench/ import it as `_common`
(Python puts the script's directory first on sys.path).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
TOKEN = "bench-token-0123456789abcdef"
STARTS_AT = "2026-11-21T05:40:14.652668659Z"
TARGETS = 500

# One playbook with one `log` step, matching every alert of the benchmarks.
PLAYBOOK = """\
name: bench-log
description: Benchmark playbook; one log step per alert.
match:
  alertname: [GpuXidError, GPUTemperatureHigh, BenchAlert]
  labels: ['severity=~"critical|warning"']
mode: enforce
target: node
cooldown: 0s
steps:
  - action: log
    with:
      message: "{{ labels.alertname }} on {{ labels.Hostname }}: {{ annotations.summary | default('') }}"
"""


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty sequence."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-pct * len(ordered) // 100))))
    return ordered[rank - 1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"


def alert(fingerprint: str, host: str, *, alertname: str = "GpuXidError", gpu: int = 3) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {
            "alertname": alertname,
            "Hostname": host,
            "gpu": str(gpu),
            "namespace": "ml",
            "pod": "trainer-0",
            "severity": "critical",
        },
        "annotations": {"runbook": "restart-pod", "summary": f"GPU {gpu} Xid error"},
        "startsAt": STARTS_AT,
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
        "fingerprint": fingerprint,
    }


def notification(alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """An AlertManager v4 notification in the shape AlertManager 0.25+ sends."""
    common = alerts[0]["labels"] if len(alerts) == 1 else {"alertname": alerts[0]["labels"]["alertname"]}
    return {
        "receiver": "remediate",
        "status": "firing",
        "alerts": alerts,
        "groupLabels": {"alertname": alerts[0]["labels"]["alertname"]},
        "commonLabels": common,
        "commonAnnotations": alerts[0]["annotations"] if len(alerts) == 1 else {},
        "externalURL": "http://alertmanager.example:9093",
        "version": "4",
        "groupKey": '{}:{alertname="GpuXidError"}',
        "truncatedAlerts": 0,
    }


# ---------------------------------------------------------------------------------------------- servers


class Server:
    """A server process on 127.0.0.1, its output in a log file; stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], port: int, ready_path: str, log: Path):
        # cwd: the log's directory (a scratch directory), so that `python -m remediate` imports the
        # installed package (or $PYTHONPATH), never a checkout that happens to be the cwd.
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log
        self.database_url: str | None = None  # where the server stores (the durable ceiling)
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            argv, env=dict(env), stdout=self._log, stderr=subprocess.STDOUT, cwd=log.parent, start_new_session=True
        )
        self._wait_ready(ready_path)

    def _wait_ready(self, path: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log_path}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + path, timeout=1).status_code == 200:
                    time.sleep(0.3)  # let every worker finish booting (executors start after the app loads)
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        self._log.close()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the server: its master and its worker processes."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                pid, ppid = int(stat.parent.name), int(fields[1])
                if self.process.pid in (pid, ppid):
                    total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def notify_playbook(url: str) -> str:
    """PLAYBOOK with one `notify.webhook` step to `url` (a local sink) in place of its `log` step."""
    head = PLAYBOOK.split("steps:")[0].replace("name: bench-log", "name: bench-notify")
    return head + f"steps:\n  - action: notify.webhook\n    with:\n      url: {url}\n"


def remediate_server(
    workdir: Path,
    *,
    db: Path,
    workers: int = 2,
    executor_threads: int = 2,
    poll_interval: str | None = None,
    playbook: str = PLAYBOOK,
    extra_env: Mapping[str, str] | None = None,
    database_url: str | None = None,
) -> Server:
    """`remediate serve` (gunicorn, sync workers) on a free port, with a fresh playbook directory.

    The store: `database_url` when given (e.g. a PostgreSQL database), else the SQLite file `db`."""
    playbooks = workdir / "playbooks"
    playbooks.mkdir(exist_ok=True)
    (playbooks / "bench.yaml").write_text(playbook)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(
        {
            "REMEDIATE_BIND": f"127.0.0.1:{port}",
            "REMEDIATE_WORKERS": str(workers),
            "REMEDIATE_THREADS": "1",
            "REMEDIATE_EXECUTOR_THREADS": str(executor_threads),
            "REMEDIATE_TOKEN": TOKEN,
            # One token posts and reads (bench/history.py): the old token's roles, set explicitly.
            "REMEDIATE_TOKEN_ROLES": "webhook,operator",
            "REMEDIATE_PLAYBOOKS": str(playbooks),
            "REMEDIATE_DATABASE_URL": database_url or f"sqlite:///{db}",
        }
    )
    if poll_interval is not None:
        env["REMEDIATE_POLL_INTERVAL"] = poll_interval
    env.update(extra_env or {})
    argv = [sys.executable, "-m", "remediate", "serve"]
    return Server("remediate", argv, env, port, "/readyz", workdir / f"remediate-{port}.log")


def ceiling_server(
    workdir: Path, *, workers: int = 2, app: str = "ceiling_app:app", env: Mapping[str, str] | None = None
) -> Server:
    """bench/ceiling_app.py (or another app of bench/) under gunicorn with the same worker settings as
    `remediate serve`."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--workers",
        str(workers),
        "--worker-class",
        "sync",
        "--bind",
        f"127.0.0.1:{port}",
        "--chdir",
        str(BENCH_DIR),
        "--log-level",
        "warning",
        app,
    ]
    name = app.split(":")[0]
    return Server(name, argv, {**os.environ, **(env or {})}, port, "/healthz", workdir / f"{name}-{port}.log")


CEILING_TABLE = "ceiling_alerts"


def durable_ceiling_server(workdir: Path, database_url: str, *, workers: int = 2) -> Server:
    """bench/durable_ceiling_app.py under the same gunicorn settings, storing into a new table of
    `database_url` (sqlite:///PATH or a PostgreSQL URL: `Databases.new`)."""
    if database_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"CREATE TABLE {CEILING_TABLE} (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            conn.commit()
    else:
        import psycopg

        with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {CEILING_TABLE} (id bigserial PRIMARY KEY, body text NOT NULL)")
    env = {"BENCH_CEILING_DATABASE_URL": database_url}
    server = ceiling_server(workdir, workers=workers, app="durable_ceiling_app:app", env=env)
    server.database_url = database_url
    return server


def ceiling_rows(server: Server) -> int:
    """Rows the durable ceiling has stored so far."""
    with contextlib.closing(Database(server.database_url)) as db:
        return db.scalar(f"SELECT count(*) FROM {CEILING_TABLE}")  # noqa: S608 - fixed name


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class Database:
    """Read-only queries on a benchmark's database, SQLite (a path or sqlite:/// URL) or PostgreSQL (a URL)."""

    def __init__(self, target: Path | str) -> None:
        url = target if isinstance(target, str) else f"sqlite:///{target}"
        self.sqlite = url.startswith("sqlite:///")
        if self.sqlite:
            self._conn: Any = db_connect(Path(url.removeprefix("sqlite:///")))
        else:
            import psycopg

            self._conn = psycopg.connect(libpq_url(url), autocommit=True)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """`sql` with `?` placeholders (turned into `%s` on PostgreSQL)."""
        if not self.sqlite:
            sql = sql.replace("?", "%s")
        return [tuple(row) for row in self._conn.execute(sql, tuple(params)).fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.rows(sql, params)[0][0]

    def close(self) -> None:
        self._conn.close()


# ---------------------------------------------------------------------------------------------- memory


def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(found)


def process_memory(pid: int) -> dict[str, Any]:
    """A process's name (its title), VmRSS and PSS in MiB (PSS: each page shared by n processes counts 1/n)."""
    proc = Path(f"/proc/{pid}")
    rss_kb = pss_kb = 0
    for line in (proc / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    with contextlib.suppress(OSError):
        for line in (proc / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss_kb = int(line.split()[1])
    title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    return {"pid": pid, "title": title, "rss_mib": rss_kb / 1024, "pss_mib": pss_kb / 1024}


@contextlib.contextmanager
def workspace(keep: bool = False) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="remediate-bench-"))
    try:
        yield path
    finally:
        if keep:
            print(f"(kept {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


def db_connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=30)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def wait_for_runs_done(db: Path | str, timeout: float) -> tuple[bool, float]:
    """Wait until no run is queued or running and no run is being added; (drained?, seconds waited).

    `db`: the SQLite file, or a database URL. "No run being added": requests still in flight when a load
    generator stops commit a little later.
    """
    started = time.monotonic()
    last_total = -1
    with contextlib.closing(Database(db)) as conn:
        while time.monotonic() - started < timeout:
            pending, total = conn.rows(
                "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')), count(*) FROM runs"
            )[0]
            if pending == 0 and total == last_total:
                return True, time.monotonic() - started
            last_total = total
            time.sleep(0.2)
    return False, time.monotonic() - started


# ---------------------------------------------------------------------------------------------- wrk

_WRK_LUA = r"""
-- POST one-alert AlertManager notifications, each with a distinct fingerprint.
local next_id = 0
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

function init(args)
  prefix = args[1]
  headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. args[2]}
  n = 0
end

function request()
  n = n + 1
  local fp = string.format("%s%02x%010x", prefix, tid, n)
  local host = string.format("node-%03d", (n * 7 + tid) % @TARGETS@)
  return wrk.format("POST", "/webhook", headers, @BODY@)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "status_errors": %d, "timeouts": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
"""


def _lua_string(text: str) -> str:
    return "[==[" + text + "]==]"


def wrk_script(path: Path) -> Path:
    """Write the wrk Lua script: the notification body is `notification([alert(...)])` with fp/host spliced in."""
    body = json.dumps(notification([alert("@FP@", "@HOST@")]), separators=(", ", ": "))
    pieces = re.split(r"(@FP@|@HOST@)", body)
    lua_parts = [{"@FP@": "fp", "@HOST@": "host"}.get(p, _lua_string(p)) for p in pieces if p]
    script = _WRK_LUA.replace("@BODY@", " .. ".join(lua_parts)).replace("@TARGETS@", str(TARGETS))
    path.write_text(script)
    return path


def body_size() -> int:
    return len(json.dumps(notification([alert("0" * 16, "node-000")]), separators=(", ", ": ")).encode())


def run_wrk(
    url: str, script: Path, *, prefix: str, duration: int, threads: int = 2, connections: int = 16
) -> dict[str, Any]:
    argv = [
        "wrk",
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={duration}s",
        "--timeout=10s",
        "--latency",
        f"--script={script}",
        url + "/webhook",
        "--",
        prefix,
        TOKEN,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=duration + 60).stdout
    match = re.search(r"^WRK_JSON (.*)$", out, re.MULTILINE)
    if not match:
        raise RuntimeError(f"no summary in wrk output:\n{out}")
    result = json.loads(match.group(1))
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["non_2xx"] = int(non2xx.group(1)) if non2xx else 0
    return result


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


# ---------------------------------------------------------------------------------------------- databases


class Databases:
    """Where a benchmark's servers store: fresh SQLite files, or fresh databases on one PostgreSQL server.

    `spec`: None or "sqlite" (files in the scratch directory); "postgresql" (a throwaway PostgreSQL 15 started
    here and removed afterwards); or a postgresql:// URL of a server whose role may CREATE DATABASE (each
    server gets its own database `bench_<pid>_<n>`, dropped afterwards)."""

    def __init__(self, spec: str | None) -> None:
        self.kind = "sqlite" if spec in (None, "", "sqlite") else "postgresql"
        self._cluster: Any = None
        self._server_url = ""
        self._made: list[str] = []
        self._count = 0
        if spec == "postgresql":
            if str(REPO) not in sys.path:
                sys.path.insert(0, str(REPO))
            from tests.support.postgres import PostgresCluster  # the repository root is on sys.path only now

            self._cluster = PostgresCluster.start()
            self._server_url = self._cluster.url(driver="postgresql")
        elif self.kind == "postgresql":
            self._server_url = libpq_url(str(spec))

    def describe(self) -> str:
        if self.kind == "sqlite":
            return "SQLite (WAL, synchronous=NORMAL), a fresh file per server"
        if self._cluster is not None:
            return "PostgreSQL 15, throwaway cluster on this machine (fsync, synchronous_commit off as in the tests)"
        return f"PostgreSQL at {self._server_url.split('@')[-1]}"

    def new(self, work: Path, name: str) -> str:
        """A fresh, empty database's URL: remediate's form (postgresql+psycopg://) for PostgreSQL."""
        self._count += 1
        if self.kind == "sqlite":
            return f"sqlite:///{work / f'{name}-{self._count}.db'}"
        import psycopg

        db = f"bench_{os.getpid()}_{self._count}"
        with psycopg.connect(self._server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        self._made.append(db)
        import sqlalchemy as sa

        url = sa.make_url(self._server_url).set(drivername="postgresql+psycopg", database=db)
        return url.render_as_string(hide_password=False)

    def cpu_seconds(self) -> float:
        """CPU (user + system) of the throwaway PostgreSQL's processes so far; 0 for SQLite or a server elsewhere."""
        if self._cluster is None:
            return 0.0
        postmaster = int((self._cluster.datadir / "postmaster.pid").read_text().split()[0])
        return tree_cpu_seconds(postmaster)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
            return
        if self._made:
            import psycopg

            with psycopg.connect(self._server_url, autocommit=True) as conn:
                for db in self._made:
                    conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def __enter__(self) -> Databases:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def tree_cpu_seconds(root: int) -> float:
    """CPU (user + system) used so far by `root` and its descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in process_tree(root):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def tree_schedstat(root: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for a CPU) so far of `root`, its descendants and all their
    live threads, from /proc/<pid>/task/<tid>/schedstat (nanoseconds: fine enough for a few requests, where
    utime/stime count 10 ms ticks). The wait is what a loaded machine adds to a server's answer time. A thread
    that exits takes its figures with it: use it where threads live on (gunicorn's workers), not across an
    executor's steps."""
    run = wait = 0
    for pid in process_tree(root):
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = task.read_text().split()
                run, wait = run + int(fields[0]), wait + int(fields[1])
    return run / 1e9, wait / 1e9


# ---------------------------------------------------------------------------------------------- paced client


HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def paced_posts(
    url: str, bodies: Iterator[bytes] | Sequence[bytes], rate: float, *, until: Any = None, threads: int = 4
) -> dict[str, Any]:
    """POST each body to `url` at `rate` per second (the i-th at start + i/rate), from `threads` client threads so
    that a slow answer does not delay the next send. `until`: a callable; sending stops once it returns True.
    Returns the client-side latencies (ms), the non-200 count, what was sent and the achieved rate."""
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()
    latencies: list[float] = []
    failures = 0
    sent = 0
    lock = threading.Lock()

    def post(body: bytes) -> None:
        nonlocal failures
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        started = time.monotonic()
        try:
            ok = session.post(url, data=body, headers=HEADERS, timeout=30).status_code == 200
        except requests.RequestException:
            ok = False
        with lock:
            latencies.append((time.monotonic() - started) * 1000)
            failures += not ok

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for index, body in enumerate(bodies):
            if until is not None and until():
                break
            delay = start + index / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(post, body)
            sent += 1
        sending = time.monotonic() - start
    return {"sent": sent, "failures": failures, "achieved_rate": sent / max(sending, 1e-9), "client_ms": latencies}


def first_step_latencies(db: Path | str, fingerprint_prefix: str) -> dict[str, Any]:
    """For the runs of the alerts whose fingerprint starts with `fingerprint_prefix`: (run claimed) - (notification
    received_at) and (first attempt of step 0 started) - (received_at), in ms; `not_started`: runs whose first step
    has not started yet, as (now - received_at) ms (a lower bound of their latency)."""
    with contextlib.closing(Database(db)) as conn:
        rows = conn.rows(
            """
            SELECT min(n.received_at), min(r.started_at), coalesce(min(a.started_at), min(s.started_at))
            FROM runs r
            JOIN alerts al ON al.id = r.alert_id
            JOIN notifications n ON n.id = al.notification_id
            JOIN steps s ON s.run_id = r.id AND s.idx = 0
            LEFT JOIN attempts a ON a.step_id = s.id
            WHERE al.fingerprint LIKE ?
            GROUP BY r.id
            """,
            (fingerprint_prefix + "%",),
        )
    now = time.time()
    return {
        "runs": len(rows),
        "to_claim_ms": [(claimed - received) * 1000 for received, claimed, _ in rows if claimed is not None],
        "to_first_step_ms": [(first - received) * 1000 for received, _, first in rows if first is not None],
        "not_started_ms": [(now - received) * 1000 for received, _, first in rows if first is None],
    }


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count); nan for none."""
    if not values:
        return float("nan")
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def timed_post(url: str, body: bytes, timeout: float = 300) -> tuple[int, float, dict[str, Any]]:
    """POST one notification; (HTTP status, seconds until the answer, the answer's JSON or {})."""
    started = time.perf_counter()
    response = requests.post(url + "/webhook", data=body, headers=HEADERS, timeout=timeout)
    elapsed = time.perf_counter() - started
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    return response.status_code, elapsed, answer if isinstance(answer, dict) else {}


def warm_up(server: Server, posts: int = 8) -> None:
    """A few one-alert notifications (fingerprints `warm...`), so that no figure pays a worker's first request
    (its database connection, lazy imports, the first compile of a statement)."""
    # A new connection each time (no Session): keep-alive would send them all to one worker.
    for index in range(posts):
        fingerprint = f"warm{os.getpid():x}{index:04x}{time.time_ns() % 10**12:012x}"
        body = json.dumps(notification([alert(fingerprint, "node-000")]))
        requests.post(server.url + "/webhook", data=body, headers=HEADERS, timeout=30)


def big_body(count: int, prefix: str) -> bytes:
    """One notification of `count` alerts, fingerprints `prefix` + a counter, spread over TARGETS nodes and 8 GPUs."""
    alerts = [alert(f"{prefix}{i:010x}", f"node-{i % TARGETS:03d}", gpu=i % 8) for i in range(count)]
    return json.dumps(notification(alerts)).encode()


def notification_runs(db: Path | str, notification_id: Any) -> dict[str, Any]:
    """Rows stored for one notification: alerts, decisions, runs; runs not finished; the last run's finished_at."""
    with contextlib.closing(Database(db)) as conn:
        alerts, decisions = (
            conn.scalar(f"SELECT count(*) FROM {table} WHERE notification_id = ?", (notification_id,))  # noqa: S608
            for table in ("alerts", "decisions")
        )
        runs, pending, last = conn.rows(
            "SELECT count(*), count(*) FILTER (WHERE runs.status IN ('queued', 'running')), max(runs.finished_at)"
            " FROM runs JOIN alerts ON alerts.id = runs.alert_id WHERE alerts.notification_id = ?",
            (notification_id,),
        )[0]
    return {"alerts": alerts, "decisions": decisions, "runs": runs, "pending": pending, "last_finished": last}
