"""Webhook ingest: throughput and latency of POST /webhook, against a bare Flask ceiling; receipt-to-first-step.

    .venv/bin/python bench/ingest.py            # ~1.5 min
    .venv/bin/python bench/ingest.py --quick    # smoke run, < 30 s

1. wrk (Lua script: POST, application/json, bearer token, a distinct fingerprint per request) against
   a) bench/ceiling_app.py (parse the JSON, answer 200) and b) `remediate serve`, same gunicorn
   settings (2 sync workers), one-alert notifications matching a playbook with one `log` step, so every
   request stores a notification, an alert, a decision, a run and a step, and the executors run it.
   Then, for information, `remediate serve` with the executors off (runs stay queued).
2. Receipt to first step: a paced client sends --rate one-alert notifications per second; for each run,
   (first attempt of step 0 started) - (notification received_at), and (run claimed) - (received_at),
   read from the SQLite database.

Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c
import requests

THROUGHPUT_TARGET = 0.70  # remediate / ceiling
FIRST_STEP_P99_TARGET_MS = 100.0


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


def _load(args: argparse.Namespace, server: c.Server, script: Path, prefix: str, db: Path | None = None) -> dict:
    """One wrk run; with `db`, also wait for the backlog of runs, and count its CPU too."""
    cpu = server.cpu_seconds()
    result = c.run_wrk(
        server.url, script, prefix=prefix, duration=args.duration, threads=args.threads, connections=args.connections
    )
    if db is not None:
        drained, waited = c.wait_for_runs_done(db, timeout=args.drain_timeout)
        result["drain"] = {"drained": drained, "seconds": waited}
    # Server processes' CPU (user + system) per request; with `db`: receiving AND running each alert.
    result["cpu_ms"] = (server.cpu_seconds() - cpu) * 1000 / max(1, result["requests"])
    return result


def throughput(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    script = c.wrk_script(work / "webhook.lua")
    results: dict[str, Any] = {}
    with c.ceiling_server(work, workers=args.workers) as server:
        results["ceiling"] = _load(args, server, script, "c")
    db = work / "ingest.db"
    with c.remediate_server(work, db=db, workers=args.workers, poll_interval=args.poll_interval) as server:
        results["remediate"] = _load(args, server, script, "r" + uuid.uuid4().hex[:6], db)
        results["drain"] = results["remediate"]["drain"]
        with contextlib.closing(c.db_connect(db)) as conn:
            results["rows"] = {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 - fixed names
                for table in ("notifications", "alerts", "decisions", "runs", "steps")
            }
            results["run_statuses"] = dict(conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
            results["decisions"] = dict(
                conn.execute("SELECT decision, count(*) FROM decisions GROUP BY decision").fetchall()
            )
    if not args.skip_no_executor:
        with c.remediate_server(work, db=work / "noexec.db", workers=args.workers, executor_threads=0) as server:
            results["remediate_no_executor"] = _load(args, server, script, "n")
    return results


def first_step_latency(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    db = work / "latency.db"
    client_ms: list[float] = []
    failures = 0
    with c.remediate_server(work, db=db, workers=args.workers, poll_interval=args.poll_interval) as server:
        session = requests.Session()
        headers = {"Authorization": f"Bearer {c.TOKEN}", "Content-Type": "application/json"}
        total = int(args.rate * args.latency_seconds)
        bodies = [
            json.dumps(c.notification([c.alert(f"lat{i:012x}", f"node-{i % c.TARGETS:03d}")])) for i in range(total)
        ]
        start = time.monotonic()
        for i, body in enumerate(bodies):
            delay = start + i / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent = time.monotonic()
            response = session.post(server.url + "/webhook", data=body, headers=headers, timeout=30)
            client_ms.append((time.monotonic() - sent) * 1000)
            failures += response.status_code != 200
        sending = time.monotonic() - start
        drained, _ = c.wait_for_runs_done(db, timeout=args.drain_timeout)
    with contextlib.closing(c.db_connect(db)) as conn:
        rows = conn.execute(
            """
            SELECT n.received_at, r.started_at, min(a.started_at)
            FROM runs r
            JOIN alerts al ON al.id = r.alert_id
            JOIN notifications n ON n.id = al.notification_id
            JOIN steps s ON s.run_id = r.id AND s.idx = 0
            LEFT JOIN attempts a ON a.step_id = s.id
            GROUP BY r.id
            """
        ).fetchall()
    to_claim = [(claimed - received) * 1000 for received, claimed, _ in rows if claimed is not None]
    to_step = [(first - received) * 1000 for received, _, first in rows if first is not None]
    return {
        "sent": len(bodies),
        "failures": failures,
        "achieved_rate": len(bodies) / sending,
        "runs": len(rows),
        "drained": drained,
        "client_ms": client_ms,
        "to_claim_ms": to_claim,
        "to_first_step_ms": to_step,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run (< 30 s): short wrk runs, 3 s at --rate")
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run [10]")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads [2]")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections [16]")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, both servers [2]")
    parser.add_argument("--rate", type=float, default=100.0, help="alerts/s for the receipt-to-first-step test [100]")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="length of that test [10]")
    parser.add_argument(
        "--poll-interval", default=None, help="REMEDIATE_POLL_INTERVAL for the server (default: remediate's own)"
    )
    parser.add_argument("--drain-timeout", type=float, default=120.0, help="max seconds to wait for queued runs")
    parser.add_argument("--skip-no-executor", action="store_true", help="skip the executors-off wrk run")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (databases, server logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = min(args.duration, 3)
        args.latency_seconds = min(args.latency_seconds, 3.0)
        args.drain_timeout = min(args.drain_timeout, 15.0)
        args.skip_no_executor = True
    if not c.have_wrk():
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2

    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    print(
        f"settings: remediate {args.workers} HTTP workers (1 thread) + 1 executor process (2 threads); "
        f"poll_interval {args.poll_interval or 'default (0.2s)'}; wrk {args.threads} threads, "
        f"{args.connections} connections, {args.duration} s; body {c.body_size()} bytes, one alert"
    )
    with c.workspace(keep=args.keep) as work:
        tp = throughput(args, work)
        lat = first_step_latency(args, work)

    ceiling, rem = tp["ceiling"], tp["remediate"]
    ratio = rem["rps"] / ceiling["rps"]
    print()
    print("webhook ingest (wrk)                    req/s      p50        p99  errors  server CPU/request")
    for name, r in (
        ("ceiling: bare Flask, parse JSON", ceiling),
        ("remediate serve", rem),
        ("remediate serve, executors off", tp.get("remediate_no_executor")),
    ):
        if r is None:
            continue
        errors = r["non_2xx"] + r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"]
        print(
            f"  {name:36} {r['rps']:8.0f} {_ms(r['p50_us']):>10} {_ms(r['p99_us']):>10} {errors:7d}"
            f"  {r['cpu_ms']:6.2f} ms"
        )
    verdict = "meets" if ratio >= THROUGHPUT_TARGET else "MISSES"
    print(f"  ratio remediate/ceiling: {ratio:.1%} (target >= {THROUGHPUT_TARGET:.0%}: {verdict})")
    if "remediate_no_executor" in tp:
        off = tp["remediate_no_executor"]["rps"] / ceiling["rps"]
        print(f"  ratio remediate (executors off)/ceiling: {off:.1%}")
    drain = tp["drain"]
    print(
        f"  stored: {tp['rows']}; runs {tp['run_statuses']}; decisions {tp['decisions']}; "
        f"backlog {'drained' if drain['drained'] else 'NOT drained'} {drain['seconds']:.1f} s after wrk stopped"
    )

    print()
    print(
        f"receipt to first step at {args.rate:.0f} alerts/s for {args.latency_seconds:.0f} s "
        f"(achieved {lat['achieved_rate']:.0f}/s, {lat['sent']} sent, {lat['failures']} non-200, "
        f"{lat['runs']} runs{'' if lat['drained'] else ', NOT all finished'})"
    )
    print("                                         p50        p99        max")
    for name, values in (
        ("POST /webhook (client side)", lat["client_ms"]),
        ("received -> run claimed", lat["to_claim_ms"]),
        ("received -> first step attempt", lat["to_first_step_ms"]),
    ):
        p50, p99, top = c.percentile(values, 50), c.percentile(values, 99), max(values, default=float("nan"))
        print(f"  {name:34} {p50:7.1f} ms {p99:7.1f} ms {top:7.1f} ms")
    p99 = c.percentile(lat["to_first_step_ms"], 99)
    verdict = "meets" if p99 <= FIRST_STEP_P99_TARGET_MS else "MISSES"
    print(f"  first-step p99 target <= {FIRST_STEP_P99_TARGET_MS:.0f} ms: {verdict}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")

    if args.json:
        summary = {
            "throughput": tp,
            "ratio": ratio,
            "first_step": {
                k: v if not isinstance(v, list) else {"p50": c.percentile(v, 50), "p99": c.percentile(v, 99)}
                for k, v in lat.items()
            },
        }
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
