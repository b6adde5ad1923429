"""One notification of 10,000 alerts: time until POST /webhook answers 200, against two ceilings; its backlog of
10,000 runs (runs/s); a fresh alert's receipt-to-first-step while that backlog drains.

    .venv/bin/python bench/big_notification.py                          # 3 rounds: ~40 s + 3 backlog drains
    .venv/bin/python bench/big_notification.py --quick                   # 1 notification, < 30 s
    .venv/bin/python bench/big_notification.py --database-url postgresql # every server on a throwaway PostgreSQL 15

Three servers under the same gunicorn settings (2 sync workers): the bare ceiling (bench/ceiling_app.py: parse
the JSON, answer 200), the durable ceiling (bench/durable_ceiling_app.py: parse, then store one row per alert,
its JSON, in one transaction) and `remediate serve` (executors on) with a playbook that matches every alert (one
`log` step), so the notification stores 10,000 alerts, decisions, runs and steps before its 200.
Each of --repeat rounds POSTs the same 10,000 alerts (fresh fingerprints for remediate) to the bare ceiling, the
durable ceiling, then remediate; then, while remediate's executor drains the 10,000 runs, a paced client sends
one-alert notifications (--fresh-rate per second, fingerprints `fresh...`) until the backlog is drained: their
receipt to first step (from the database, as bench/ingest.py) says whether a fresh alert waits behind a storm.
Backlog runs/s = 10,000 / (the last of its runs finished - the 200 received); the fresh alerts' runs are few
(--fresh-rate x the drain time) and are executed in that time too. Prints medians; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

TIME_TO_200_TARGET_S = 0.5
DURABLE_RATIO_TARGET = 3.0
RUNS_PER_S_TARGET = 3000.0
FRESH_P99_TARGET_MS = 100.0


def fresh_alerts(prefix: str) -> Any:
    index = 0
    while True:
        yield json.dumps(c.notification([c.alert(f"{prefix}{index:010x}", f"node-{index % c.TARGETS:03d}")])).encode()
        index += 1


def backlog(args: argparse.Namespace, server: c.Server, url: str, notification_id: Any, answered: float, rep: int):
    """Fresh alerts at --fresh-rate while the notification's runs drain (at most --drain-timeout s); the figures."""
    state = {"checked": 0.0, "drained": False}

    def drained() -> bool:
        now = time.monotonic()
        if now - state["checked"] >= 0.2:
            state["checked"] = now
            state["drained"] = c.notification_runs(url, notification_id)["pending"] == 0
        return state["drained"] or time.time() - answered > args.drain_timeout

    prefix = f"fresh{rep:02d}"
    sent: dict[str, Any] = {"sent": 0, "failures": 0, "client_ms": []}
    if args.fresh_rate > 0:
        sent = c.paced_posts(server.url + "/webhook", fresh_alerts(prefix), args.fresh_rate, until=drained)
    while not drained():
        time.sleep(0.1)
    stored = c.notification_runs(url, notification_id)
    # The fresh alerts' own runs: a little time to finish when the backlog did (not when it was cut short).
    deadline = time.monotonic() + (5.0 if stored["pending"] == 0 else 0.0)
    while True:
        fresh = c.first_step_latencies(url, prefix)
        if not fresh["not_started_ms"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if stored["pending"] == 0 and stored["last_finished"] is not None:
        seconds = max(stored["last_finished"] - answered, 1e-3)
        rate, note = stored["runs"] / seconds, f"{seconds:.1f} s ({stored['runs'] / seconds:.0f} runs/s)"
    else:
        seconds = time.time() - answered
        done = stored["runs"] - stored["pending"]
        rate, note = (
            done / seconds,
            f"NOT drained: {done} of {stored['runs']} in {seconds:.1f} s ({done / seconds:.0f}/s)",
        )
    # Runs not started yet count with their age so far: a lower bound, so the p99 is too (marked >=).
    latencies = fresh["to_first_step_ms"] + fresh["not_started_ms"]
    return {
        "runs_per_s": rate,
        "backlog": note,
        "drained": stored["pending"] == 0,
        "fresh_sent": sent["sent"],
        "fresh_failures": sent["failures"],
        "fresh_runs": fresh["runs"],
        "fresh_not_started": len(fresh["not_started_ms"]),
        "fresh_p50_ms": c.percentile(latencies, 50),
        "fresh_p99_ms": c.percentile(latencies, 99),
        "fresh_max_ms": max(latencies, default=float("nan")),
    }


def _sched_since(server: c.Server, before: tuple[float, float]) -> dict[str, float]:
    """The server's CPU seconds, and seconds runnable but waiting for a CPU, since `before` (tree_schedstat)."""
    run, wait = c.tree_schedstat(server.process.pid)
    return {"cpu_s": run - before[0], "cpu_wait_s": wait - before[1]}


def one_round(args: argparse.Namespace, servers: dict[str, c.Server], url: str, rep: int) -> dict[str, Any]:
    body = c.big_body(args.alerts, f"big{rep:02d}")
    row: dict[str, Any] = {"body_bytes": len(body)}
    for name in ("ceiling", "durable"):
        before = c.ceiling_rows(servers[name]) if name == "durable" else 0
        sched = c.tree_schedstat(servers[name].process.pid)
        status, seconds, _ = c.timed_post(servers[name].url, body)
        row[name] = {"status": status, "seconds": seconds, **_sched_since(servers[name], sched)}
        if name == "durable":
            row[name]["stored"] = c.ceiling_rows(servers[name]) - before
    sched = c.tree_schedstat(servers["remediate"].process.pid)
    status, seconds, answer = c.timed_post(servers["remediate"].url, body)
    answered = time.time()
    spent = _sched_since(servers["remediate"], sched)
    notification_id = answer.get("notification_id")
    stored = c.notification_runs(url, notification_id)
    row["remediate"] = {"status": status, "seconds": seconds, "answer": answer if status != 200 else {}, **stored}
    row["remediate"].update(spent)
    row["remediate"].update(backlog(args, servers["remediate"], url, notification_id, answered, rep))
    # The next round must not start on a backlog (the rest of this one, or fresh alerts' runs queued behind it):
    # wait, not counted.
    if not args.quick:
        row["remediate"]["all_drained_later"], _ = c.wait_for_runs_done(url, timeout=args.drain_timeout)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one notification, backlog watched for 8 s (< 30 s)")
    parser.add_argument("--alerts", type=int, default=10_000, help="alerts per notification [10000]")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (one notification to each server); medians [3]")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, every server [2]")
    parser.add_argument("--fresh-rate", type=float, default=20.0, help="one-alert notifications/s while draining [20]")
    parser.add_argument("--drain-timeout", type=float, default=90.0, help="max seconds to watch a backlog drain [90]")
    parser.add_argument("--database-url", default=None, help="sqlite (default), postgresql, or a postgresql:// URL")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.drain_timeout = 1, min(args.drain_timeout, 8.0)

    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    with c.Databases(args.database_url) as dbs, c.workspace(keep=args.keep) as work:
        print(
            f"settings: every server {args.workers} gunicorn sync workers; remediate + 1 executor process (2 threads); "
            f"{args.alerts} alerts/POST; fresh alerts at {args.fresh_rate:g}/s while the backlog drains; "
            f"store: {dbs.describe()}"
        )
        url = dbs.new(work, "remediate")
        servers: dict[str, c.Server] = {}
        try:
            servers["ceiling"] = c.ceiling_server(work, workers=args.workers)
            servers["durable"] = c.durable_ceiling_server(work, dbs.new(work, "ceiling"), workers=args.workers)
            servers["remediate"] = c.remediate_server(
                work, db=work / "unused.db", database_url=url, workers=args.workers
            )
            for server in servers.values():
                c.warm_up(server)
            c.wait_for_runs_done(url, timeout=30)
            for rep in range(args.repeat):
                rows.append(one_round(args, servers, url, rep))
                r = rows[-1]
                print(
                    f"  round {rep + 1}/{args.repeat}: bare {r['ceiling']['seconds']:.2f} s, durable "
                    f"{r['durable']['seconds']:.2f} s, remediate {r['remediate']['seconds']:.2f} s; "
                    f"backlog {r['remediate']['backlog']}",
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()

    n = len(rows)
    print()
    print(
        f"one notification of {args.alerts} alerts ({rows[0]['body_bytes'] / 2**20:.2f} MiB), time to 200"
        f"{', median of ' + str(n) if n > 1 else ''}"
    )
    print("  #   bare ceiling   durable ceiling   remediate   alerts decisions   runs   backlog of runs executed in")
    for i, r in enumerate(rows, 1):
        rem = r["remediate"]
        complete = (
            rem["alerts"] == rem["decisions"] == rem["runs"] == args.alerts and r["durable"]["stored"] == args.alerts
        )
        statuses = {r["ceiling"]["status"], r["durable"]["status"], rem["status"]}
        print(
            f"  {i}  {r['ceiling']['seconds']:9.3f} s  {r['durable']['seconds']:12.3f} s  {rem['seconds']:8.3f} s  "
            f"{rem['alerts']:6d} {rem['decisions']:9d} {rem['runs']:6d}   {rem['backlog']}"
            + ("" if complete else "   INCOMPLETE")
            + ("" if statuses == {200} else f"   HTTP {sorted(statuses)} {rem['answer']}")
        )
    med = {name: c.median([r[name]["seconds"] for r in rows]) for name in ("ceiling", "durable", "remediate")}
    print(f"  median {med['ceiling']:8.3f} s  {med['durable']:12.3f} s  {med['remediate']:8.3f} s")
    cpu = {name: c.median([r[name]["cpu_s"] for r in rows]) for name in ("ceiling", "durable", "remediate")}
    wait = {name: c.median([r[name]["cpu_wait_s"] for r in rows]) for name in ("ceiling", "durable", "remediate")}
    print(f"  server CPU during the POST {cpu['ceiling']:6.3f} s  {cpu['durable']:12.3f} s  {cpu['remediate']:8.3f} s")
    print(
        f"  waited for a CPU (load)    {wait['ceiling']:6.3f} s  {wait['durable']:12.3f} s  {wait['remediate']:8.3f} s"
        "   (summed over the server's runnable threads: other work on the machine)"
    )
    to_bare, to_durable = med["remediate"] / med["ceiling"], med["remediate"] / med["durable"]
    print(f"  ratio remediate / bare ceiling {to_bare:.1f}x, remediate / durable ceiling {to_durable:.1f}x")
    runs_per_s = c.median([r["remediate"]["runs_per_s"] for r in rows])
    fresh = [r["remediate"] for r in rows]
    lower = any(f["fresh_not_started"] for f in fresh)
    fresh_p99 = c.median([f["fresh_p99_ms"] for f in fresh])
    print()
    print(
        f"fresh one-alert notifications while the backlog drained: {sum(f['fresh_sent'] for f in fresh)} sent "
        f"({sum(f['fresh_failures'] for f in fresh)} non-200), {sum(f['fresh_runs'] for f in fresh)} runs, "
        f"{sum(f['fresh_not_started'] for f in fresh)} whose first step had not started when measured "
        "(counted with their age then: a lower bound)"
    )
    for i, f in enumerate(fresh, 1):
        print(
            f"  {i}  received -> first step attempt p50 {f['fresh_p50_ms']:8.1f} ms  p99 {f['fresh_p99_ms']:8.1f} ms  "
            f"max {f['fresh_max_ms']:8.1f} ms"
        )
    mark = ">= " if lower else ""
    print()
    print(f"targets ({'medians of ' + str(n) if n > 1 else 'ONE notification, not medians of 3'}):")
    print(
        f"  time to 200 <= {TIME_TO_200_TARGET_S} s: {med['remediate']:.2f} s: "
        f"{c.verdict(med['remediate'] <= TIME_TO_200_TARGET_S)}"
    )
    print(
        f"  time to 200 <= {DURABLE_RATIO_TARGET:.0f}x the durable ceiling: {to_durable:.1f}x: "
        f"{c.verdict(to_durable <= DURABLE_RATIO_TARGET)}"
    )
    print(
        f"  its {args.alerts} runs executed at >= {RUNS_PER_S_TARGET:.0f} runs/s: {runs_per_s:.0f} runs/s: "
        f"{c.verdict(runs_per_s >= RUNS_PER_S_TARGET and all(f['drained'] for f in fresh))}"
    )
    print(
        f"  receipt -> first step p99 <= {FRESH_P99_TARGET_MS:.0f} ms while the backlog drains: "
        f"{mark}{fresh_p99:.1f} ms: "
        f"{c.verdict(fresh_p99 <= FRESH_P99_TARGET_MS and not lower)}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        summary = {
            "rounds": rows,
            "medians_s": med,
            "cpu_s": cpu,
            "cpu_wait_s": wait,
            "runs_per_s": runs_per_s,
            "fresh_p99_ms": fresh_p99,
        }
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
