"""The web pages on a large store: p50/p99 render times of /ui/ and /ui/runs/<id> on 1,000,000 runs.

    .venv/bin/python bench/ui.py            # the 1M-run store of bench/history.py (built once, ~1 min), copied
    .venv/bin/python bench/ui.py --quick    # 50,000 runs, 20 requests per kind, < 30 s

The store is bench/history.py's (same build, same query kinds), copied to its own file so that the steps
added here do not change that benchmark's store: 3 finished steps with 2 attempts each on 1,000 random
runs (the run pages asked for). Then `remediate serve` (2 sync workers, the pages on) answers --queries
GET /ui/ per kind (the history form's filters, a deep cursor) and GET /ui/runs/<id>, one at a time over
HTTP on 127.0.0.1 with a logged-in session cookie, each page followed by the same query as GET /history
(JSON), so that what the page adds is seen apart from what the store's query costs. Prints p50/p99 per
kind against the 100 ms target; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _common as c
import history as bench_history
import requests

TARGET_MS = 100.0
STEP_RUNS = 1000
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def add_run_steps(path: Path, rng: random.Random) -> list[int]:
    """3 finished steps with 2 attempts each on STEP_RUNS random runs (replacing earlier ones); their ids."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        (max_id,) = conn.execute("SELECT max(id) FROM runs").fetchone()
        run_ids = sorted(rng.sample(range(1, max_id + 1), STEP_RUNS))
        conn.execute("BEGIN")
        conn.execute("DELETE FROM attempts")
        conn.execute("DELETE FROM steps")
        params = json.dumps({"message": "XID 79 on GPU 3 of node-042", "level": "warning"})
        for run_id in run_ids:
            for idx in range(3):
                cursor = conn.execute(
                    'INSERT INTO steps (run_id, idx, name, action, "where", params, plan, result, timeout, retries,'
                    " status, attempts, started_at, finished_at, always)"
                    " SELECT id, ?, ?, 'log', 'cluster', ?, ?, ?, 30, 1, 'succeeded', 2, started_at, finished_at, 0"
                    " FROM runs WHERE id = ?",
                    (idx, f"step {idx}", params, params, json.dumps({"logged": "yes"}), run_id),
                )
                for number in (1, 2):
                    conn.execute(
                        "INSERT INTO attempts (step_id, number, started_at, finished_at, outcome, error, worker)"
                        " VALUES (?, ?, 1.0, 1.5, ?, ?, 'replica-a:123')",
                        (
                            cursor.lastrowid,
                            number,
                            "retryable_error" if number == 1 else "succeeded",
                            "timeout" if number == 1 else None,
                        ),
                    )
        conn.execute("COMMIT")
    return run_ids


def log_in(session: requests.Session, url: str) -> None:
    form = session.get(url + "/ui/login", timeout=30)
    found = _CSRF.search(form.text)
    assert found is not None, form.text[:300]
    answer = session.post(
        url + "/ui/login", data={"token": c.TOKEN, "csrf_token": found.group(1)}, allow_redirects=False, timeout=30
    )
    assert answer.status_code == 302, answer.text[:300]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50,000 runs and 20 requests per kind (< 30 s)")
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs in the store [1000000]")
    parser.add_argument("--queries", type=int, default=200, help="requests per kind [200]")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = min(args.runs, 50_000)
        args.queries = min(args.queries, 20)
    with c.workspace() as work:
        source = work / "history.db" if args.quick else Path(f"/tmp/remediate-bench-history-{args.runs}.db")
        print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
        built, seconds = bench_history.ensure_store(source, args.runs, rebuild=False)
        db = work / "ui.db" if args.quick else Path(f"/tmp/remediate-bench-ui-{args.runs}.db")
        started = time.perf_counter()
        shutil.copyfile(source, db)
        rng = random.Random(13)
        run_ids = add_run_steps(db, rng)
        print(
            f"store: {db} ({db.stat().st_size / 2**20:.0f} MiB, {args.runs:,} runs; "
            f"{f'built in {seconds:.0f} s' if built else 'reused'}, copied and stepped in "
            f"{time.perf_counter() - started:.0f} s)"
        )
        print(f"settings: remediate serve, 2 sync workers, ui on; {args.queries} sequential requests per kind")
        kinds = {f"/ui/ {name}": params for name, params in bench_history.query_kinds(db, rng).items()}
        results: dict[str, list[float]] = {}
        api: dict[str, list[float]] = {}
        with c.remediate_server(work, db=db) as server:
            session = requests.Session()
            log_in(session, server.url)
            for _ in range(5):  # warm both workers' connections and the page cache a little
                session.get(server.url + "/ui/", timeout=30)
            for name, params in kinds.items():
                # The same query as JSON right after each page: what the page adds to GET /history.
                results[name], api[name] = _time_pair(session, server.url, params, args.queries)
            results["/ui/runs/<id> (3 steps x 2 attempts)"] = _time_runs(
                session, server.url, run_ids, rng, args.queries
            )
            results["/ui/state"] = _time(session, server.url + "/ui/state", dict, args.queries)

    print()
    print("  page                                  p50 ms   p99 ms   max ms   GET /history, same queries: p50, p99 ms")
    misses = [name for name, timings in results.items() if c.percentile(timings, 99) > TARGET_MS]
    for name, timings in results.items():
        p99 = c.percentile(timings, 99)
        print(
            f"  {name:36} {c.percentile(timings, 50):8.1f} {p99:8.1f} {max(timings):8.1f}"
            + (f"   {c.percentile(api[name], 50):8.1f} {c.percentile(api[name], 99):8.1f}" if name in api else " " * 21)
            + ("   MISSES" if p99 > TARGET_MS else "")
        )
    print(
        f"  target p99 < {TARGET_MS:.0f} ms: {'met by every page' if not misses else 'missed by ' + ', '.join(misses)}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


def _time(session: requests.Session, url: str, params: object, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        query = params() if callable(params) else {}
        started = time.perf_counter()
        response = session.get(url, params=query, timeout=60)
        timings.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{url} {query}: HTTP {response.status_code} {response.text[:300]}")
    return timings


def _time_pair(
    session: requests.Session, url: str, params: Callable[[], dict[str, str]], count: int
) -> tuple[list[float], list[float]]:
    pages: list[float] = []
    answers: list[float] = []
    headers = {"Authorization": f"Bearer {c.TOKEN}"}
    for _ in range(count):
        query = params()
        for path, timings, extra in (("/ui/", pages, {}), ("/history", answers, {"headers": headers})):
            started = time.perf_counter()
            response = session.get(
                url + path, params={**query, "limit": "50"} if path == "/history" else query, timeout=60, **extra
            )
            timings.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"{path} {query}: HTTP {response.status_code} {response.text[:300]}")
    return pages, answers


def _time_runs(session: requests.Session, url: str, run_ids: list[int], rng: random.Random, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        run_id = rng.choice(run_ids)
        started = time.perf_counter()
        response = session.get(f"{url}/ui/runs/{run_id}", timeout=60)
        timings.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200 or "step 2" not in response.text:
            raise SystemExit(f"/ui/runs/{run_id}: HTTP {response.status_code} {response.text[:300]}")
    return timings


if __name__ == "__main__":
    sys.exit(main())
