"""One notification with 10,000 alerts: time until POST /webhook answers 200, and is every alert stored?

    .venv/bin/python bench/big_notification.py            # 3 notifications, ~1 min
    .venv/bin/python bench/big_notification.py --quick    # 1 notification, < 30 s

`remediate serve` (2 sync workers, executors on) with a playbook that matches every alert (one `log`
step), so each notification stores 10,000 alerts, decisions, runs and steps in one write transaction.
Each POST has fresh fingerprints; before the next one the executors drain the previous 10,000 runs
(that time is printed too: executor throughput on a backlog). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import _common as c
import requests

TARGET_S = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one notification, no drain wait (< 30 s)")
    parser.add_argument("--alerts", type=int, default=10_000, help="alerts per notification [10000]")
    parser.add_argument("--repeat", type=int, default=3, help="notifications to send, one after another [3]")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers [2]")
    parser.add_argument("--drain-timeout", type=float, default=60.0, help="max seconds to wait for the backlog")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1

    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"settings: gunicorn {args.workers} sync workers, executor_threads 2 per worker, {args.alerts} alerts/POST")
    headers = {"Authorization": f"Bearer {c.TOKEN}", "Content-Type": "application/json"}
    rows = []
    with c.workspace(keep=args.keep) as work:
        db = work / "big.db"
        with c.remediate_server(work, db=db, workers=args.workers) as server:
            for rep in range(args.repeat):
                alerts = [
                    c.alert(f"big{rep:02d}{i:010x}", f"node-{i % c.TARGETS:03d}", gpu=i % 8) for i in range(args.alerts)
                ]
                body = json.dumps(c.notification(alerts)).encode()
                started = time.perf_counter()
                response = requests.post(server.url + "/webhook", data=body, headers=headers, timeout=120)
                elapsed = time.perf_counter() - started
                answer = response.json()
                notification_id = answer.get("notification_id")
                with contextlib.closing(c.db_connect(db)) as conn:
                    stored = {
                        table: conn.execute(
                            f"SELECT count(*) FROM {table} WHERE notification_id = ?",  # noqa: S608 - fixed names
                            (notification_id,),
                        ).fetchone()[0]
                        for table in ("alerts", "decisions")
                    }
                    stored["runs"] = conn.execute(
                        "SELECT count(*) FROM runs JOIN alerts ON alerts.id = runs.alert_id"
                        " WHERE alerts.notification_id = ?",
                        (notification_id,),
                    ).fetchone()[0]
                drained, waited = (None, 0.0)
                if not args.quick:
                    drained, waited = c.wait_for_runs_done(db, timeout=args.drain_timeout)
                rows.append((rep + 1, len(body), response.status_code, elapsed, stored, answer, drained, waited))

    print()
    print("  #   body       HTTP  time to 200   alerts  decisions   runs   backlog of runs executed in")
    for rep, size, status, elapsed, stored, answer, drained, waited in rows:
        complete = stored["alerts"] == stored["decisions"] == stored["runs"] == args.alerts
        backlog = "-" if drained is None else f"{waited:.1f} s ({args.alerts / waited:.0f} runs/s)"
        if drained is False:
            backlog = f"NOT drained after {waited:.0f} s"
        print(
            f"  {rep}  {size / 2**20:5.2f} MiB  {status}   {elapsed:8.2f} s   {stored['alerts']:6d}  "
            f"{stored['decisions']:9d}  {stored['runs']:6d}   {backlog}{'' if complete else '   INCOMPLETE'}"
        )
        if status != 200:
            print(f"     answer: {answer}")
    times = [r[3] for r in rows]
    verdict = "meets" if max(times) <= TARGET_S else "MISSES"
    print(f"  time to 200: best {min(times):.2f} s, worst {max(times):.2f} s (target <= {TARGET_S:.0f} s: {verdict})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
