"""The reliability report on a large store: `Store.history.report` over 7 days, and /metrics with and without its cache.

    .venv/bin/python bench/report.py             # 1,000,000 runs over 90 days (the store of bench/history.py)
    .venv/bin/python bench/report.py --quick     # 100,000 runs

Builds the store of bench/history.py (once; reused like there), adds two finished steps to every run of
the last 7 days (the report reads each run's last step end), sets `runs.rung` on a third of them and
opens a few breaker claims. Then times, in this process: `Store.history.report` over the last 7 days (the
`remediate report` default) --repeat times, and `metrics.exposition` as a /metrics scrape sees it, the
first scrape (computes the figures) and the scrapes within `report_cache` (reuse them). Prints the
timings; asserts nothing.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import history as bench_history
from prometheus_client import CollectorRegistry

from remediate.metrics import ReliabilityCollector, exposition
from remediate.store import ReportQuery, Store

WEEK = 7 * 86400.0


def add_steps(path: Path, since: float) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute("DELETE FROM steps")
        for idx in (0, 1):
            conn.execute(
                'INSERT INTO steps (run_id, idx, name, action, "where", params, timeout, retries, status,'
                " attempts, started_at, finished_at, always)"
                " SELECT id, ?, 'step', 'log', 'cluster', '{}', 30, 0, 'succeeded', 1, started_at, finished_at, 0"
                " FROM runs WHERE created_at >= ?",
                (idx, since),
            )
        conn.execute("UPDATE runs SET rung = 1 + (id % 3) WHERE created_at >= ? AND id % 3 <> 0", (since,))
        conn.execute("DELETE FROM breaker_claims")
        for node in range(5):
            conn.execute(
                "INSERT INTO breaker_claims (node, kind, run_id, claimed_at) VALUES (?, 'cordon', 1, ?)",
                (f"node-{node:03d}", time.time() - 3600),
            )
        conn.execute("COMMIT")
        return int(conn.execute("SELECT count(*) FROM steps").fetchone()[0])
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100,000 runs")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", type=Path, default=None, help="store file [/tmp/remediate-bench-report-<runs>.db]")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    runs = 100_000 if args.quick else args.runs
    path = args.db or Path(f"/tmp/remediate-bench-report-{runs}.db")
    built, seconds = bench_history.ensure_store(path, runs, args.rebuild)
    if built:
        print(f"built {runs:,} runs in {seconds:.1f} s: {path}")
    now = time.time()
    steps = add_steps(path, now - WEEK)
    store = Store.open(f"sqlite:///{path}")
    try:
        with store.read() as conn:
            decisions = conn.exec_driver_sql("SELECT count(*) FROM decisions WHERE created_at >= ?", (now - WEEK,))
            in_window = decisions.scalar_one()
        print(
            f"store: {runs:,} runs over {bench_history.DAYS} days; last 7 days: {in_window:,} decisions, "
            f"{steps:,} steps"
        )
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            report = store.history.report(ReportQuery(since=now - WEEK, until=now))
            timings.append(time.perf_counter() - started)
        totals = report.totals
        print(
            f"report (7 d): median {statistics.median(timings) * 1000:.0f} ms, max {max(timings) * 1000:.0f} ms "
            f"over {args.repeat}; {totals['incidents']:,} incidents, {totals['remediations']:,} remediations, "
            f"{len(report.nodes)} nodes"
        )
        collector = ReliabilityCollector(store, window=WEEK, max_age=60.0, job_labels=("training_job", "job"))
        started = time.perf_counter()
        body = exposition(_registry(), store, collector)
        first = time.perf_counter() - started
        cached = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            exposition(_registry(), store, collector)
            cached.append(time.perf_counter() - started)
        print(
            f"/metrics: first scrape {first * 1000:.0f} ms (computes the figures), then median "
            f"{statistics.median(cached) * 1000:.1f} ms within report_cache; {len(body):,} bytes"
        )
    finally:
        store.close()
    return 0


def _registry() -> CollectorRegistry:
    """An empty registry of this process's own counters: the scrape's cost is the store's part."""
    return CollectorRegistry()


if __name__ == "__main__":
    sys.exit(main())
