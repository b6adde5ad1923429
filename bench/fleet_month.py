"""A month of an 80,000-GPU fleet's alerts, in SQLite and PostgreSQL 15: size, retention, /history, the pages,
the report and `remediate replay` on it.

    .venv/bin/python bench/fleet_month.py                 # the month at the published rates, both databases (~5 min)
    .venv/bin/python bench/fleet_month.py --scale 10      # a month ten times as bad (or a fleet ten times as big)
    .venv/bin/python bench/fleet_month.py --database sqlite --queries 10   # quicker

The rates: Llama 3 405B's pre-training lost 419 jobs to unexpected interruptions in 54 days on 16,384 GPUs (Dubey
et al., "The Llama 3 Herd of Models", 2024, table 5), scaled to --gpus (80,000: 10,000 nodes of 8) and 30 days;
warnings (a GPU running hot, correctable ECC errors, a filling disk) ten times as often. Each fault's alert fires
for --firing minutes (60): AlertManager sends it firing, again every repeat_interval while it fires (30 min, the
shipped alertmanager/alertmanager.yml) and resolved, so a fault is 1 + 60/30 + 1 = 4 stored alerts; the first
makes a run (two finished steps each), the others are decisions without one (duplicates).

How the month is written: bench/history.py's generator (`history.build`: sqlite3 `executemany` into the schema
`Store.open` creates) with the fleet's days, nodes and mix, the steps of bench/report.py (`add_steps`), then
`remediate db copy` (`remediate.store.copy.copy_database`, the store's own writes) into a throwaway PostgreSQL 15
(tests/support/postgres.py). No second writer: the same rows in both databases.

Then, on each database: its size; `remediate serve` answering GET /history per query kind (bench/history.py's
kinds, the fleet's nodes) and the /ui/ pages of the same queries (bench/ui.py's timing) and /ui/runs/<id>;
`Store.history.report` (what `remediate report` runs) over 7 and 30 days; `remediate replay --since 31d` of a
changed playbook set (bench/replay.py's: every alertname matched, the XID one cordons) as a child process (wall,
its own CPU and peak RSS from wait4); last, retention pruning the whole month in the server's batches (200;
the pruner's 50 ms pause between batches left out and added up instead): wall, CPU of this process and of
PostgreSQL's. Every wall time is printed with the load average. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import _common as c
import history as bench_history
import replay as bench_replay
import report as bench_report
import requests
import ui as bench_ui

from remediate.store import ReportQuery, Store
from remediate.store.copy import copy_database
from remediate.store.retention import Pruner

LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16_384
WARNINGS_PER_INTERRUPTION = 10
GPUS_PER_NODE = 8
DAYS = 30
REPEAT_INTERVAL_MIN = 30  # alertmanager/alertmanager.yml: repeat_interval
HISTORY_TARGET_P99_MS = bench_history.TARGET_P99_MS
UI_TARGET_P99_MS = bench_ui.TARGET_MS
REPLAY_TARGET_S = 60.0


def fleet(gpus: int, scale: float, firing_min: int) -> dict[str, Any]:
    """The month's counts: faults at the published rates and the alerts AlertManager sends for them."""
    interruptions = round(LLAMA3_INTERRUPTIONS * gpus / LLAMA3_GPUS * DAYS / LLAMA3_DAYS * scale)
    warnings = interruptions * WARNINGS_PER_INTERRUPTION
    per_fault = 1 + firing_min // REPEAT_INTERVAL_MIN + 1  # firing, the re-sends while it fires, resolved
    # The first alert of a fault is judged as bench/history.py's are (a few are cooldowns, attempt caps,
    # unmatched); the re-sends and the resolved one are duplicates.
    no_run = [("duplicate", (per_fault - 1) / per_fault)] + [
        (name, share / per_fault) for name, share in bench_history.NO_RUN if name != "duplicate"
    ]
    return {
        "gpus": gpus,
        "nodes": gpus // GPUS_PER_NODE,
        "interruptions": interruptions,
        "warnings": warnings,
        "faults": interruptions + warnings,
        "alerts_per_fault": per_fault,
        "no_run": no_run,
    }


def build(path: Path, month: dict[str, Any]) -> dict[str, Any]:
    targets = [f"node-{i:05d}" for i in range(month["nodes"])]
    started = time.perf_counter()
    counts = bench_history.build(path, month["faults"], days=DAYS, targets=targets, no_run=month["no_run"])
    steps = bench_report.add_steps(path, 0.0)
    return {**counts, "steps": steps, "targets": targets, "seconds": time.perf_counter() - started}


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def sqlite_size(path: Path) -> str:
    total = sum(Path(f"{path}{suffix}").stat().st_size for suffix in ("", "-wal") if Path(f"{path}{suffix}").exists())
    with closing(sqlite3.connect(path)) as conn:
        tables = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE type='table')"
            " GROUP BY name ORDER BY 2 DESC LIMIT 4"
        ).fetchall()
    return f"{total / 2**20:.1f} MiB (largest: " + ", ".join(f"{n} {b / 2**20:.1f}" for n, b in tables) + ")"


def postgres_size(url: str) -> str:
    with closing(c.Database(url)) as db:
        total = db.scalar("SELECT pg_database_size(current_database())")
        tables = db.rows(
            "SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables ORDER BY 2 DESC LIMIT 4"
        )
        empty = db.scalar("SELECT pg_database_size('template1')")
    return (
        f"{total / 2**20:.1f} MiB, {(total - empty) / 2**20:.1f} MiB over an empty database (largest with indexes: "
        + ", ".join(f"{n} {b / 2**20:.1f}" for n, b in tables)
        + ")"
    )


def history_and_pages(db: Path, work: Path, url: str | None, targets: list[str], queries: int) -> None:
    """GET /history per kind, then the same queries as /ui/ pages and the run pages: p50/p99 per kind."""
    results, _sizes = bench_history.measure(db, work, queries=queries, limit=50, targets=targets, database_url=url)
    worst = max(results, key=lambda name: c.percentile(results[name], 99))
    p99s = [c.percentile(t, 99) for t in results.values()]
    print(
        f"  GET /history, {len(results)} kinds x {queries}: p99 median {statistics.median(p99s):.1f} ms, "
        f"worst {worst} {max(p99s):.1f} ms (target {HISTORY_TARGET_P99_MS:.0f} ms: "
        f"{c.verdict(max(p99s) <= HISTORY_TARGET_P99_MS)}); {load()}"
    )
    rng = random.Random(13)
    kinds = bench_history.query_kinds(db, rng, targets)
    with closing(sqlite3.connect(db)) as conn:
        (max_run,) = conn.execute("SELECT max(id) FROM runs").fetchone()
    env = {"REMEDIATE_RETENTION": "off"}
    pages: dict[str, list[float]] = {}
    with c.remediate_server(work, db=db, extra_env=env, database_url=url) as server:
        session = requests.Session()
        bench_ui.log_in(session, server.url)
        cpu = server.cpu_seconds()
        for name, params in kinds.items():
            pages[f"/ui/ {name}"], _ = bench_ui._time_pair(session, server.url, params, queries)
        # The server's CPU per page and its GET /history twin: a figure the machine's load moves less than p99.
        pair_cpu_ms = (server.cpu_seconds() - cpu) / (len(kinds) * queries) * 1000
        pages["/ui/runs/<id>"] = _run_pages(session, server.url, max_run, rng, queries * 5)
        pages["/ui/state"] = bench_ui._time(session, server.url + "/ui/state", dict, queries)
    worst = max(pages, key=lambda name: c.percentile(pages[name], 99))
    p99s = [c.percentile(t, 99) for t in pages.values()]
    run_pages = pages["/ui/runs/<id>"]
    print(
        f"  /ui/ pages, {len(pages) - 2} history kinds x {queries}: p99 median {statistics.median(p99s):.1f} ms, "
        f"worst {worst} {max(p99s):.1f} ms; /ui/runs/<id> p50 {c.percentile(run_pages, 50):.1f} "
        f"p99 {c.percentile(run_pages, 99):.1f} ms; /ui/state p99 {c.percentile(pages['/ui/state'], 99):.1f} ms "
        f"(target {UI_TARGET_P99_MS:.0f} ms: {c.verdict(max(p99s) < UI_TARGET_P99_MS)}); server CPU "
        f"{pair_cpu_ms:.1f} ms per /ui/ page + its GET /history (mean over the kinds); {load()}"
    )


def _run_pages(session: requests.Session, url: str, max_run: int, rng: random.Random, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        run_id = rng.randint(1, max_run)
        started = time.perf_counter()
        response = session.get(f"{url}/ui/runs/{run_id}", timeout=60)
        timings.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"/ui/runs/{run_id}: HTTP {response.status_code} {response.text[:300]}")
    return timings


def report(url: str, repeat: int, cpu_of_database: Callable[[], float]) -> None:
    """`Store.history.report` as `remediate report --since 7d` and `--since 30d` run it, `repeat` times each:
    wall p50/p99 and the CPU of one report (this process's and PostgreSQL's: figures the load moves less)."""
    store = Store.open(url)
    try:
        for days in (7, DAYS):
            timings = []
            cpu, database_cpu = time.process_time(), cpu_of_database()
            for _ in range(repeat):
                now = time.time()
                started = time.perf_counter()
                figures = store.history.report(ReportQuery(since=now - days * 86400, until=now))
                timings.append((time.perf_counter() - started) * 1000)
            cpu = (time.process_time() - cpu) / repeat * 1000
            database_cpu = (cpu_of_database() - database_cpu) / repeat * 1000
            print(
                f"  report --since {days}d x {repeat}: p50 {c.percentile(timings, 50):.0f} ms, "
                f"p99 {c.percentile(timings, 99):.0f} ms; CPU {cpu:.0f} ms here + {database_cpu:.0f} ms PostgreSQL "
                f"per report; {figures.totals['incidents']:,} incidents, {len(figures.nodes):,} nodes; {load()}"
            )
    finally:
        store.close()


def replay(url: str, nodes: int, days: int) -> float:
    """`remediate replay` of a changed playbook set over the month, a child process: its wall time (s)."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "playbooks"
        directory.mkdir()
        bench_replay.playbooks(directory)
        command = [sys.executable, "-m", "remediate", "replay", "--database-url", url, "--playbooks", str(directory)]
        command += ["--since", f"{days + 1}d", "--cluster-nodes", str(nodes), "--json"]
        env = {**os.environ, "PYTHONPATH": str(c.REPO)}
        out = Path(scratch) / "out.json"
        started = time.perf_counter()
        with out.open("wb") as sink:
            child = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.PIPE, cwd=scratch)
            # wait4: this child's own CPU and peak RSS (RUSAGE_CHILDREN would mix in the servers started before).
            _pid, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        errors = child.stderr.read().decode() if child.stderr else ""
        if child.returncode != 0:
            raise SystemExit(f"remediate replay exited {child.returncode}: {errors[-2000:]}")
        figures = json.loads(out.read_text())
    print(
        f"  replay --since {days + 1}d: {figures['alerts']:,} alerts in {seconds:.1f} s wall "
        f"({c.verdict(seconds < REPLAY_TARGET_S)} < {REPLAY_TARGET_S:.0f} s), "
        f"CPU {usage.ru_utime + usage.ru_stime:.1f} s, "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB; {figures['changed_decisions']:,} decisions change, "
        f"{len(figures['cordoned']['replayed'])} nodes cordoned; {load()}"
    )
    return seconds


def prune(url: str, cpu_of_database: Callable[[], float]) -> None:
    """Retention deleting the whole month (older than now) in the server's batches."""
    store = Store.open(url)
    try:
        database_cpu = cpu_of_database()
        cpu = time.process_time()
        started = time.perf_counter()
        done = store.retention.prune(0.0, now=time.time() + 1, batch_size=Pruner.batch_size, pause=0.0)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
        database_cpu = cpu_of_database() - database_cpu
    finally:
        store.close()
    pauses = done.batches * Pruner.pause
    print(
        f"  prune the month (batches of {Pruner.batch_size}): {done.total:,} rows in {done.batches:,} batches, "
        f"{seconds:.1f} s wall, CPU {cpu:.1f} s here + {database_cpu:.1f} s PostgreSQL "
        f"({done.summary()}); the server's {Pruner.pause * 1000:.0f} ms pauses add {pauses:.0f} s; {load()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=80_000, help="GPUs in the fleet (8 a node) [80000]")
    parser.add_argument("--scale", type=float, default=1.0, help="times the published failure rates [1]")
    parser.add_argument("--firing", type=int, default=60, help="minutes each fault's alert fires [60]")
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--queries", type=int, default=30, help="requests per query kind [30]")
    parser.add_argument("--repeat", type=int, default=20, help="reports per window [20]")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (the SQLite month)")
    args = parser.parse_args(argv)
    month = fleet(args.gpus, args.scale, args.firing)
    with c.workspace(args.keep) as work:
        print(f"machine: {c.machine_line()}; {load()}")
        print(
            f"fleet: {month['gpus']:,} GPUs on {month['nodes']:,} nodes, {DAYS} days, {args.scale:g}x the Llama 3 "
            f"rate: {month['interruptions']:,} interruptions + {month['warnings']:,} warnings = {month['faults']:,} "
            f"faults, {month['alerts_per_fault']} alerts each ({args.firing} min firing, repeat_interval "
            f"{REPEAT_INTERVAL_MIN} min)"
        )
        db = work / "month.db"
        built = build(db, month)
        print(
            f"month: {built['notifications']:,} notifications, {built['alerts']:,} alerts and decisions, "
            f"{built['runs']:,} runs, {built['steps']:,} steps (written in {built['seconds']:.1f} s, {load()})"
        )
        backends: list[tuple[str, str, Callable[[], float]]] = []
        databases = c.Databases("postgresql" if args.database != "sqlite" else None)
        with databases:
            if args.database != "sqlite":
                url = databases.new(work, "month")
                started = time.perf_counter()
                copied = copy_database(f"sqlite:///{db}", url)
                print(
                    f"remediate db copy into PostgreSQL 15: {copied.rows:,} rows in "
                    f"{time.perf_counter() - started:.1f} s ({load()})"
                )
                backends.append(("PostgreSQL 15", url, databases.cpu_seconds))
            # SQLite last: its prune empties the file that the query parameters are drawn from.
            if args.database != "postgresql":
                backends.append(("SQLite", f"sqlite:///{db}", lambda: 0.0))
            for name, url, cpu_of_database in backends:
                print(f"{name}:")
                size = sqlite_size(db) if url.startswith("sqlite") else postgres_size(url)
                print(f"  size: {size}")
                served = None if url.startswith("sqlite") else url
                history_and_pages(db, work, served, built["targets"], args.queries)
                report(url, args.repeat, cpu_of_database)
                replay(url, month["nodes"], DAYS)
                prune(url, cpu_of_database)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
