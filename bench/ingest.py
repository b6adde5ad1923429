"""Webhook ingest: throughput and CPU of POST /webhook against two ceilings; receipt-to-first-step at a steady rate.

    .venv/bin/python bench/ingest.py                     # medians of 3, ~2-2.5 min
    .venv/bin/python bench/ingest.py --quick             # smoke run, < 30 s
    .venv/bin/python bench/ingest.py --database-url postgresql   # every server on a throwaway PostgreSQL 15

1. wrk (Lua script: POST, application/json, bearer token, a distinct fingerprint per request), one-alert
   notifications, against four servers under the same gunicorn settings (2 sync workers), one after another:
   a) the bare ceiling, bench/ceiling_app.py: parse the JSON, answer 200;
   b) the durable ceiling, bench/durable_ceiling_app.py: parse the JSON, store one row per alert (its JSON) in one
      transaction (SQLite WAL with remediate's pragmas and BEGIN IMMEDIATE, or PostgreSQL with psycopg), answer 200;
   c) `remediate serve` with a playbook of one `log` step (`--action notify.webhook`: one POST to a local sink, a
      bare Flask app whose CPU is not counted) matching every alert: every request stores a
      notification, an alert, a decision, a run and a step, and the executor runs it; the run's figures count
      until the backlog is drained, so its CPU per request is per fully handled alert;
   d) `remediate serve` with the executors off (runs stay queued): ingest alone.
   `--repeat N` runs the four N times, interleaved (a b c d a b c d ...), and prints medians.
2. Receipt to first step: a paced client (4 threads) sends --rate one-alert notifications per second; for each
   run, (first attempt of step 0 started) - (notification received_at), and (run claimed) - (received_at), read
   from the database. Repeated --repeat times (a fresh server each time); the median of the percentiles.

The targets are printed as lines saying meets / MISSES. Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import _common as c

EXECUTORS_OFF_TARGET = 0.60  # remediate with executors off / durable ceiling, req/s
CPU_PER_ALERT_TARGET_MS = 1.0  # server CPU per fully handled one-step alert
FIRST_STEP_P99_TARGET_MS = 10.0  # receipt -> first step, p99, at 100 alerts/s

KINDS = {
    "ceiling": "ceiling: bare Flask, parse JSON",
    "durable": "durable ceiling: + 1 transaction",
    "remediate": "remediate serve",
    "remediate_off": "remediate serve, executors off",
}


def _ms(us: float) -> str:
    return f"{us / 1000:.1f} ms"


def _load(
    args: argparse.Namespace, server: c.Server, dbs: c.Databases, script: Path, prefix: str, drain: str | None = None
) -> dict[str, Any]:
    """One wrk run; with `drain` (the database URL), also wait for the backlog of runs and count its CPU too."""
    cpu, db_cpu = server.cpu_seconds(), dbs.cpu_seconds()
    result = c.run_wrk(
        server.url, script, prefix=prefix, duration=args.duration, threads=args.threads, connections=args.connections
    )
    if drain is not None:
        drained, waited = c.wait_for_runs_done(drain, timeout=args.drain_timeout)
        result["drain"] = {"drained": drained, "seconds": waited}
    # Server processes' CPU (user + system) per request; with `drain`: receiving AND running each alert.
    result["cpu_ms"] = (server.cpu_seconds() - cpu) * 1000 / max(1, result["requests"])
    result["db_cpu_ms"] = (dbs.cpu_seconds() - db_cpu) * 1000 / max(1, result["requests"])
    result["errors"] = sum(result[k] for k in ("non_2xx", "connect_errors", "read_errors", "write_errors", "timeouts"))
    return result


def _remediate_rows(url: str) -> dict[str, Any]:
    with contextlib.closing(c.Database(url)) as db:
        return {
            "rows": {
                table: db.scalar(f"SELECT count(*) FROM {table}")  # noqa: S608 - fixed names
                for table in ("notifications", "alerts", "decisions", "runs", "steps")
            },
            "run_statuses": dict(db.rows("SELECT status, count(*) FROM runs GROUP BY status")),
        }


def throughput_once(args: argparse.Namespace, work: Path, dbs: c.Databases, rep: int) -> dict[str, Any]:
    script = c.wrk_script(work / "webhook.lua")
    results: dict[str, Any] = {}
    with c.ceiling_server(work, workers=args.workers) as server:
        results["ceiling"] = _load(args, server, dbs, script, "c")
    with c.durable_ceiling_server(work, dbs.new(work, "ceiling"), workers=args.workers) as server:
        results["durable"] = _load(args, server, dbs, script, "d")
        results["durable"]["stored"] = c.ceiling_rows(server)
    url = dbs.new(work, "remediate")
    with c.remediate_server(
        work, db=work / "unused.db", database_url=url, workers=args.workers, poll_interval=args.poll_interval,
        playbook=args.playbook,
    ) as server:  # fmt: skip
        results["remediate"] = _load(args, server, dbs, script, f"r{rep}{uuid.uuid4().hex[:5]}", drain=url)
        results["remediate"].update(_remediate_rows(url))
    url = dbs.new(work, "noexec")
    with c.remediate_server(
        work, db=work / "unused.db", database_url=url, workers=args.workers, executor_threads=0, playbook=args.playbook
    ) as server:
        results["remediate_off"] = _load(args, server, dbs, script, "n")
    return results


def first_step_once(args: argparse.Namespace, work: Path, dbs: c.Databases, rep: int) -> dict[str, Any]:
    url = dbs.new(work, "latency")
    prefix = f"lat{rep:02d}"
    total = int(args.rate * args.latency_seconds)
    bodies = (
        json.dumps(c.notification([c.alert(f"{prefix}{i:010x}", f"node-{i % c.TARGETS:03d}")])).encode()
        for i in range(total)
    )
    with c.remediate_server(
        work, db=work / "unused.db", database_url=url, workers=args.workers, poll_interval=args.poll_interval,
        playbook=args.playbook,
    ) as server:  # fmt: skip
        sent = c.paced_posts(server.url + "/webhook", bodies, args.rate)
        drained, _ = c.wait_for_runs_done(url, timeout=args.drain_timeout)
    return {**sent, **c.first_step_latencies(url, prefix), "drained": drained}


def _median_of(runs: list[dict[str, Any]], key: str) -> float:
    return c.median([r[key] for r in runs])


def report(args: argparse.Namespace, tp: list[dict[str, Any]], lat: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the tables and the targets; return the summary figures (medians)."""
    n = len(tp)
    per_kind = {kind: [rep[kind] for rep in tp] for kind in KINDS}
    med = {
        kind: {key: _median_of(runs, key) for key in ("rps", "p50_us", "p99_us", "cpu_ms", "db_cpu_ms")}
        for kind, runs in per_kind.items()
    }
    on_pg = any(m["db_cpu_ms"] for m in med.values())
    print()
    print(f"webhook ingest (wrk), {'median of ' + str(n) if n > 1 else 'one run'}")
    header = "                                       req/s      p50        p99  errors  server CPU/req"
    print(header + ("  PostgreSQL CPU/req" if on_pg else "") + ("   req/s of each run" if n > 1 else ""))
    for kind, label in KINDS.items():
        m = med[kind]
        errors = sum(r["errors"] for r in per_kind[kind])
        line = f"  {label:34} {m['rps']:8.0f} {_ms(m['p50_us']):>10} {_ms(m['p99_us']):>10} {errors:7d}"
        line += f"  {m['cpu_ms']:10.2f} ms"
        if on_pg:
            line += f"  {m['db_cpu_ms']:15.2f} ms"
        if n > 1:
            line += "   " + ", ".join(f"{r['rps']:.0f}" for r in per_kind[kind])
        print(line)
    print("  (remediate serve: CPU counted until its backlog of runs was drained: per fully handled alert)")

    print()
    print("ratios (median of each round's)         req/s to bare / durable     CPU per request to bare / durable")
    ratios: dict[str, Any] = {}
    for kind in ("remediate", "remediate_off"):
        # Each round's ratio (the servers of one round ran back to back, under the same load), then the median.
        rps = tuple(c.median([r[kind]["rps"] / r[ceiling]["rps"] for r in tp]) for ceiling in ("ceiling", "durable"))
        cpu = tuple(
            c.median([r[kind]["cpu_ms"] / r[ceiling]["cpu_ms"] for r in tp]) for ceiling in ("ceiling", "durable")
        )
        ratios[kind] = {"rps_bare": rps[0], "rps_durable": rps[1], "cpu_bare": cpu[0], "cpu_durable": cpu[1]}
        print(f"  {KINDS[kind]:34} {rps[0]:10.1%} / {rps[1]:6.1%}         {cpu[0]:10.1f}x / {cpu[1]:.1f}x")
    last = tp[-1]["remediate"]
    drains = [r["drain"]["seconds"] for r in per_kind["remediate"]]
    all_drained = all(r["drain"]["drained"] for r in per_kind["remediate"])
    print(
        f"  stored (last run): remediate {last['rows']}, runs {last['run_statuses']}; durable ceiling "
        f"{tp[-1]['durable']['stored']} rows for {tp[-1]['durable']['requests']} answered requests; remediate's "
        f"backlog {'drained' if all_drained else 'NOT drained'} {c.median(drains):.1f} s after wrk stopped (median)"
    )

    lat_p = {
        key: {
            "p50": c.median([c.percentile(r[key], 50) for r in lat]),
            "p99": c.median([c.percentile(r[key], 99) for r in lat]),
            "max": c.median([max(r[key], default=float("nan")) for r in lat]),
        }
        for key in ("client_ms", "to_claim_ms", "to_first_step_ms")
    }
    print()
    print(
        f"receipt to first step at {args.rate:.0f} alerts/s for {args.latency_seconds:.0f} s, "
        f"{'median of ' + str(len(lat)) if len(lat) > 1 else 'one run'} (achieved "
        + ", ".join(f"{r['achieved_rate']:.0f}/s" for r in lat)
        + f"; {sum(r['sent'] for r in lat)} sent, {sum(r['failures'] for r in lat)} non-200, "
        f"{sum(r['runs'] for r in lat)} runs{'' if all(r['drained'] for r in lat) else ', NOT all finished'})"
    )
    print("                                         p50        p99        max")
    for name, key in (
        ("POST /webhook (client side)", "client_ms"),
        ("received -> run claimed", "to_claim_ms"),
        ("received -> first step attempt", "to_first_step_ms"),
    ):
        p = lat_p[key]
        print(f"  {name:34} {p['p50']:7.1f} ms {p['p99']:7.1f} ms {p['max']:7.1f} ms")

    off = ratios["remediate_off"]["rps_durable"]
    cpu = med["remediate"]["cpu_ms"]
    p99 = lat_p["to_first_step_ms"]["p99"]
    print()
    each = [r["remediate_off"]["rps"] / r["durable"]["rps"] for r in tp]
    rounds = f" (median of the rounds' {', '.join(f'{x:.1%}' for x in each)})" if n > 1 else ""
    print(f"targets ({'medians of ' + str(n) if n > 1 else 'ONE run, not medians of 3'}):")
    print(
        f"  ingest with executors off >= {EXECUTORS_OFF_TARGET:.0%} of the durable ceiling's req/s: "
        f"{off:.1%}{rounds}: "
        f"{c.verdict(off >= EXECUTORS_OFF_TARGET)}"
    )
    print(
        f"  server CPU per fully handled one-step alert <= {CPU_PER_ALERT_TARGET_MS:.1f} ms: {cpu:.2f} ms: "
        f"{c.verdict(cpu <= CPU_PER_ALERT_TARGET_MS)}"
        + (f" (PostgreSQL's own CPU, not counted: {med['remediate']['db_cpu_ms']:.2f} ms)" if on_pg else "")
    )
    print(
        f"  receipt -> first step p99 <= {FIRST_STEP_P99_TARGET_MS:.0f} ms at {args.rate:.0f} alerts/s: "
        f"{p99:.1f} ms: {c.verdict(p99 <= FIRST_STEP_P99_TARGET_MS)}"
    )
    return {"medians": med, "ratios": ratios, "first_step": lat_p}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run (< 30 s): one repeat, 2 s wrk runs, 2 s at --rate"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each server, interleaved; medians [3]")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run [5]")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads [2]")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections [16]")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, every server [2]")
    parser.add_argument("--rate", type=float, default=100.0, help="alerts/s for the receipt-to-first-step test [100]")
    parser.add_argument("--latency-seconds", type=float, default=5.0, help="length of that test [5]")
    parser.add_argument(
        "--database-url",
        default=None,
        help="sqlite (default: a fresh file per server); postgresql (a throwaway PostgreSQL 15 started here); "
        "or postgresql://user@host/db of a server where that role may CREATE DATABASE (one per server)",
    )
    parser.add_argument(
        "--poll-interval", default=None, help="REMEDIATE_POLL_INTERVAL for the server (default: remediate's own)"
    )
    parser.add_argument("--drain-timeout", type=float, default=120.0, help="max seconds to wait for queued runs")
    parser.add_argument(
        "--action",
        choices=("log", "notify.webhook"),
        default="log",
        help="the playbook's one step: log, or notify.webhook to a local sink (a bare Flask app, its CPU not "
        "counted) [log]",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (databases, server logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
        args.duration = min(args.duration, 2)
        args.latency_seconds = min(args.latency_seconds, 2.0)
        args.drain_timeout = min(args.drain_timeout, 15.0)
    if not c.have_wrk():
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2

    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    with c.Databases(args.database_url) as dbs:
        print(
            f"settings: every server {args.workers} gunicorn sync workers (1 thread); remediate + 1 executor process "
            f"(2 threads), poll_interval {args.poll_interval or 'default'}; wrk {args.threads} threads, "
            f"{args.connections} connections, {args.duration} s; body {c.body_size()} bytes, one alert; "
            f"store: {dbs.describe()}"
        )
        with c.workspace(keep=args.keep) as work, contextlib.ExitStack() as sinks:
            args.playbook = c.PLAYBOOK
            if args.action == "notify.webhook":
                sink = sinks.enter_context(c.ceiling_server(work, workers=args.workers))
                args.playbook = c.notify_playbook(sink.url + "/webhook")
            tp, lat = [], []
            for rep in range(args.repeat):
                tp.append(throughput_once(args, work, dbs, rep))
                lat.append(first_step_once(args, work, dbs, rep))
                print(
                    f"  run {rep + 1}/{args.repeat}: "
                    + ", ".join(f"{kind} {tp[-1][kind]['rps']:.0f} req/s" for kind in KINDS)
                    + f"; first step p99 {c.percentile(lat[-1]['to_first_step_ms'], 99):.1f} ms",
                    flush=True,
                )
    summary = report(args, tp, lat)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": tp, **summary}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
