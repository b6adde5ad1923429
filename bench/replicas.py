"""Several replicas on PostgreSQL: alerts handled per second and CPU per alert; the duplicate storm.

    .venv/bin/python bench/replicas.py            # ~2 min
    .venv/bin/python bench/replicas.py --quick    # smoke run, < 1 min

Starts its own throwaway PostgreSQL 15 (tests/support/postgres.py: initdb in a temp dir; durability off,
as for the tests: say so when comparing with SQLite, which runs with synchronous=NORMAL).

1. Fully handled one-step alerts per second, three cases measured in the same run: SQLite with one
   replica; PostgreSQL with one replica; PostgreSQL with two replicas (two `remediate serve`, one database).
   One wrk per replica, at the same time, posts distinct one-alert notifications for --duration s; the figure
   is runs finished / (load + drain) seconds, so an alert counts only once its step has run. CPU per alert:
   every remediate process (all replicas: HTTP workers and executors), and PostgreSQL's own processes.
2. The duplicate storm: the same --storm alerts (notifications of 10 alerts) POSTed to two replicas at once,
   every notification to both (4 client threads per replica): time until every run is finished, answers
   other than 200 (target 0), runs stored (target: one per alert).

Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common as c
import requests
import sqlalchemy as sa

sys.path.insert(0, str(c.REPO))
from tests.support.postgres import PostgresCluster  # the repository root is on sys.path only now


def _pg_cpu_seconds(cluster: PostgresCluster) -> float:
    """CPU (user + system) of the cluster's postmaster and every backend it forked."""
    postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid, ppid = int(stat.parent.name), int(fields[1])
            if postmaster in (pid, ppid):
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _runs(url: str) -> tuple[int, int]:
    """(runs not finished yet, runs in all)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT count(*) FILTER (WHERE status IN ('queued', 'running')), count(*) FROM runs")
            ).one()
        return int(row[0]), int(row[1])
    finally:
        engine.dispose()


def _wait_drained(url: str, timeout: float) -> tuple[bool, int]:
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        pending, total = _runs(url)
        if pending == 0 and total == last:
            return True, total
        last = total
        time.sleep(0.2)
    return False, _runs(url)[1]


@contextlib.contextmanager
def _replicas(work: Path, url: str, count: int, args: argparse.Namespace) -> Iterator[list[c.Server]]:
    servers: list[c.Server] = []
    try:
        for index in range(count):
            replica = work / f"replica-{index}"
            replica.mkdir(parents=True)
            servers.append(
                c.remediate_server(
                    replica,
                    db=work / "unused.db",
                    workers=args.workers,
                    executor_threads=args.executor_threads,
                    extra_env={"REMEDIATE_DATABASE_URL": url},
                )
            )
        yield servers
    finally:
        for server in servers:
            server.stop()


def handled(args: argparse.Namespace, work: Path, name: str, url: str, replicas: int, cluster: PostgresCluster | None):
    script = c.wrk_script(work / f"{name}.lua")
    with _replicas(work / name, url, replicas, args) as servers:
        cpu = sum(s.cpu_seconds() for s in servers)
        pg_cpu = _pg_cpu_seconds(cluster) if cluster else 0.0
        started = time.monotonic()

        def load(index: int) -> dict[str, Any]:
            prefix = f"{name[:1]}{index}"
            return c.run_wrk(
                servers[index].url, script, prefix=prefix, duration=args.duration, threads=1,
                connections=args.connections,
            )  # fmt: skip

        with ThreadPoolExecutor(len(servers)) as pool:
            loads = list(pool.map(load, range(len(servers))))
        drained, runs = _wait_drained(url, args.drain_timeout)
        seconds = time.monotonic() - started
        cpu = sum(s.cpu_seconds() for s in servers) - cpu
        pg_cpu = (_pg_cpu_seconds(cluster) - pg_cpu) if cluster else 0.0
    non_2xx = sum(load["non_2xx"] for load in loads)
    requests_sent = sum(load["requests"] for load in loads)
    return {
        "case": name,
        "replicas": replicas,
        "requests": requests_sent,
        "non_2xx": non_2xx,
        "runs": runs,
        "drained": drained,
        "alerts_per_s": runs / seconds,
        "cpu_ms": cpu * 1000 / max(1, runs),
        "pg_cpu_ms": pg_cpu * 1000 / max(1, runs),
    }


def storm(args: argparse.Namespace, work: Path, url: str) -> dict[str, Any]:
    alerts = [c.alert(f"storm{n:08x}", f"node-{n % c.TARGETS:03d}") for n in range(args.storm)]
    bodies = [json.dumps(c.notification(alerts[i : i + 10])).encode() for i in range(0, len(alerts), 10)]
    headers = {"Authorization": f"Bearer {c.TOKEN}", "Content-Type": "application/json"}
    with _replicas(work / "storm", url, 2, args) as servers:
        sessions = [requests.Session() for _ in range(8)]

        def post(job: tuple[int, c.Server, bytes]) -> int:
            index, server, body = job
            return sessions[index % len(sessions)].post(server.url + "/webhook", data=body, headers=headers).status_code

        # Every notification to both replicas, interleaved, as an AlertManager HA pair delivers them.
        jobs = [(i, server, body) for i, body in enumerate(bodies) for server in servers]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            codes = Counter(pool.map(post, jobs))
        answered = time.monotonic() - started
        drained, runs = _wait_drained(url, args.drain_timeout)
        seconds = time.monotonic() - started
    return {
        "alerts": args.storm,
        "requests": len(jobs),
        "codes": dict(codes),
        "non_200": sum(n for code, n in codes.items() if code != 200),
        "runs": runs,
        "drained": drained,
        "answered_s": answered,
        "drained_s": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s of load per case and a 300-alert storm")
    parser.add_argument("--duration", type=int, default=10, help="seconds of wrk load per case [10]")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections per replica [8]")
    parser.add_argument("--workers", type=int, default=2, help="HTTP workers per replica [2]")
    parser.add_argument("--executor-threads", type=int, default=2, help="executor threads per replica [2]")
    parser.add_argument("--storm", type=int, default=1000, help="alerts of the duplicate storm [1000]")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.storm = 3, 300
    if not c.have_wrk():
        print("needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2

    print(c.machine_line())
    print(
        f"settings: {args.workers} HTTP workers + 1 executor process ({args.executor_threads} threads) per replica; "
        f"wrk 1 thread, {args.connections} connections per replica, {args.duration} s; one-step `log` playbook"
    )
    cluster = PostgresCluster.start()
    try:
        with c.workspace(args.keep) as work:
            results = [
                handled(args, work, "sqlite-1", f"sqlite:///{work / 'bench.db'}", 1, None),
                handled(args, work, "postgresql-1", cluster.database(), 1, cluster),
                handled(args, work, "postgresql-2", cluster.database(), 2, cluster),
            ]
            print()
            print("fully handled one-step alerts        alerts/s   remediate CPU/alert   PostgreSQL CPU/alert", end="")
            print("   non-2xx")
            for r in results:
                flag = "" if r["drained"] else "  (backlog not drained!)"
                print(
                    f"  {r['case']:<14} {r['replicas']} replica(s)   {r['alerts_per_s']:8.1f}   "
                    f"{r['cpu_ms']:14.2f} ms   {r['pg_cpu_ms']:17.2f} ms   {r['non_2xx']:7d}{flag}"
                )
            base, pg1, pg2 = (r["alerts_per_s"] for r in results)
            print(f"  ratio PostgreSQL/SQLite (1 replica): {pg1 / base:.2f}; 2 replicas/1 replica on PostgreSQL: "
                  f"{pg2 / pg1:.2f}")  # fmt: skip
            s = storm(args, work, cluster.database())
            print()
            print(f"duplicate storm: the same {s['alerts']} alerts to 2 replicas at once ({s['requests']} requests)")
            print(f"  answers: {s['codes']}; non-200: {s['non_200']} (target 0)")
            print(f"  runs: {s['runs']} (target {s['alerts']}); all answered in {s['answered_s']:.1f} s, "
                  f"every run finished {s['drained_s']:.1f} s after the first request"
                  + ("" if s["drained"] else " (NOT drained)"))  # fmt: skip
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
