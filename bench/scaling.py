"""Scaling with the notification's size: 1 / 10 / 100 / 1,000 / 10,000 alerts per notification — time to 200 and
cost per alert, for remediate and both ceilings; a JSON of the figures and a log-log plot (PNG).

    .venv/bin/python bench/scaling.py            # medians of 3, ~1-2 min; writes docs/img/scaling-notification-size.*
    .venv/bin/python bench/scaling.py --quick    # one round, sizes up to 1,000, < 30 s; writes to /tmp
    .venv/bin/python bench/scaling.py --database-url postgresql   # every server on a throwaway PostgreSQL 15

Three servers under the same gunicorn settings (2 sync workers): the bare ceiling (bench/ceiling_app.py), the
durable ceiling (bench/durable_ceiling_app.py: one row per alert in one transaction) and `remediate serve` with
the executors OFF (runs stay queued), so that what is measured is the receipt of the notification alone: the
executor's share is bench/big_notification.py's backlog runs/s. Every alert matches the one-step `log` playbook
and has a fresh fingerprint: each is stored with its decision, run and step.
For each size N, k = min(50, max(1, 5000 / N)) notifications are POSTed one after another (50 of 1 alert ... 1
of 10,000); the figures: the median time to 200, that time / N (ms per alert), and the server's CPU (its master's
and workers' threads, /proc/*/task/*/schedstat, nanoseconds) over the k POSTs / (k x N) (CPU per alert), and
the time its threads were runnable but waited for a CPU, per POST (what other load on the machine added). Each
round starts fresh servers; --repeat rounds, medians. "Grows linearly" is read from the slope of a least-squares
fit of log(time to 200) on log(N): 1 is linear, below 1 a fixed cost per request still dominates, above 1 worse
than linear.
Needs matplotlib (the `bench` extra: pip install -e '.[bench]'). Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import _common as c

SIZES = (1, 10, 100, 1_000, 10_000)
SERVERS = {"ceiling": "bare ceiling", "durable": "durable ceiling", "remediate": "remediate (executors off)"}
OUT_NAME = "scaling-notification-size"


def posts_for(size: int, most: int) -> int:
    return min(most, max(1, 5000 // size))


def measure(server: c.Server, size: int, count: int, prefix: str) -> dict[str, Any]:
    bodies = [c.big_body(size, f"{prefix}{i:03d}-") for i in range(count)]
    seconds, statuses = [], set()
    cpu, wait = c.tree_schedstat(server.process.pid)
    for body in bodies:
        status, elapsed, _ = c.timed_post(server.url, body)
        seconds.append(elapsed)
        statuses.add(status)
    after = c.tree_schedstat(server.process.pid)
    return {
        "posts": count,
        "time_to_200_s": c.median(seconds),
        "cpu_ms_per_alert": (after[0] - cpu) * 1000 / (count * size),
        # Runnable but not running: what the machine's other load added to the time to 200.
        "cpu_wait_ms_per_post": (after[1] - wait) * 1000 / count,
        "statuses": sorted(statuses),
    }


def one_round(args: argparse.Namespace, work: Path, dbs: c.Databases, rep: int) -> dict[str, dict[int, Any]]:
    result: dict[str, dict[int, Any]] = {name: {} for name in SERVERS}
    starts = {
        "ceiling": lambda: c.ceiling_server(work, workers=args.workers),
        "durable": lambda: c.durable_ceiling_server(work, dbs.new(work, "ceiling"), workers=args.workers),
        "remediate": lambda: c.remediate_server(
            work, db=work / "unused.db", database_url=dbs.new(work, "remediate"), workers=args.workers,
            executor_threads=0,
        ),
    }  # fmt: skip
    for name, start in starts.items():
        with start() as server:
            c.warm_up(server)
            for size in args.sizes:
                result[name][size] = measure(server, size, posts_for(size, args.most), f"s{rep}{name[0]}{size}-")
    return result


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def describe(name: str, sizes: list[int], times: list[float], cpu: list[float]) -> str:
    upper = [i for i, n in enumerate(sizes) if n >= 100]
    whole = slope([float(n) for n in sizes], times)
    text = f"  {SERVERS[name]}: time to 200 ~ N^{whole:.2f} over {sizes[0]}..{sizes[-1]}"
    if len(upper) >= 2:
        top = slope([float(sizes[i]) for i in upper], [times[i] for i in upper])
        kind = "linear" if 0.85 <= top <= 1.15 else "FASTER than linear" if top > 1.15 else "sub-linear"
        text += f", ~ N^{top:.2f} from {sizes[upper[0]]} up ({kind} there)"
    text += (
        f"; CPU per alert {cpu[0]:.3f} ms at {sizes[0]} -> {cpu[-1]:.3f} ms at {sizes[-1]} "
        f"({'falls' if cpu[-1] < cpu[0] * 0.9 else 'rises' if cpu[-1] > cpu[0] * 1.1 else 'flat'}: "
        f"{'a fixed cost per request amortised' if cpu[-1] < cpu[0] * 0.9 else 'per-alert work dominates'})"
    )
    return text


def plot(figures: dict[str, Any], path: Path, subtitle: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    sizes = figures["sizes"]
    for name, label in SERVERS.items():
        med = figures["medians"][name]
        left.plot(sizes, [med[str(n)]["time_to_200_s"] * 1000 for n in sizes], marker="o", label=label)
        right.plot(sizes, [med[str(n)]["cpu_ms_per_alert"] for n in sizes], marker="o", label=label)
    # A line of slope 1 through remediate's largest size: what "grows linearly" looks like on this plot.
    top = figures["medians"]["remediate"][str(sizes[-1])]["time_to_200_s"] * 1000
    left.plot(sizes, [top * n / sizes[-1] for n in sizes], linestyle="--", color="grey", label="slope 1 (linear)")
    for ax, ylabel, title in (
        (left, "time to 200 (ms)", "POST /webhook: time to 200"),
        (right, "server CPU per alert (ms)", "server CPU per alert"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("alerts per notification")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Notification size (medians of {figures['rounds']}); {subtitle}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(c.REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round, sizes 1..1,000, 10 POSTs at most (< 30 s)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="alerts per notification [1,...,10000]")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (fresh servers each); medians [3]")
    parser.add_argument("--most", type=int, default=50, help="most POSTs per size [50]")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, every server [2]")
    parser.add_argument("--database-url", default=None, help="sqlite (default), postgresql, or a postgresql:// URL")
    parser.add_argument("--out", type=Path, default=None, help=f"directory for {OUT_NAME}.json/.png [docs/img]")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(n) for n in args.sizes.split(",")})
    if args.quick:
        args.repeat, args.most = 1, 10
        args.sizes = [n for n in args.sizes if n <= 1000]
    out = args.out or (Path("/tmp") if args.quick else c.REPO / "docs" / "img")

    machine = c.machine_line()
    load_before = os.getloadavg()[0]
    print(f"machine: {machine}; load average before: {load_before:.2f}")
    rounds = []
    with c.Databases(args.database_url) as dbs, c.workspace(keep=args.keep) as work:
        store = dbs.describe()
        print(f"settings: every server {args.workers} gunicorn sync workers; sizes {args.sizes}; store: {store}")
        for rep in range(args.repeat):
            rounds.append(one_round(args, work, dbs, rep))
            print(
                f"  round {rep + 1}/{args.repeat}: "
                + "; ".join(
                    f"{name} " + " ".join(f"{rounds[-1][name][n]['time_to_200_s'] * 1000:.0f}" for n in args.sizes)
                    for name in SERVERS
                )
                + " ms",
                flush=True,
            )

    medians = {
        name: {
            str(n): {
                key: c.median([r[name][n][key] for r in rounds])
                for key in ("time_to_200_s", "cpu_ms_per_alert", "cpu_wait_ms_per_post")
            }
            for n in args.sizes
        }
        for name in SERVERS
    }
    bad = {name: {n for r in rounds for n in args.sizes if r[name][n]["statuses"] != [200]} for name in SERVERS}
    print()
    print(f"alerts per notification, {'medians of ' + str(len(rounds)) if len(rounds) > 1 else 'one round'}")
    print(
        "                              alerts  POSTs  time to 200   ms per alert  server CPU per alert"
        "  waited for a CPU per POST"
    )
    for name, label in SERVERS.items():
        for n in args.sizes:
            m = medians[name][str(n)]
            flag = "   NOT all 200" if n in bad[name] else ""
            print(
                f"  {label:26} {n:8d} {posts_for(n, args.most):6d} {m['time_to_200_s'] * 1000:9.1f} ms "
                f"{m['time_to_200_s'] * 1000 / n:11.3f} ms {m['cpu_ms_per_alert']:14.3f} ms"
                f"  {m['cpu_wait_ms_per_post']:17.1f} ms{flag}"
            )
    print()
    print("remediate / durable ceiling (time to 200):  " + "   ".join(
        f"{n}: {medians['remediate'][str(n)]['time_to_200_s'] / medians['durable'][str(n)]['time_to_200_s']:.1f}x"
        for n in args.sizes
    ))  # fmt: skip
    print("what grows linearly (slope of the log-log fit of time to 200 on N; 1 = linear):")
    for name in SERVERS:
        times = [medians[name][str(n)]["time_to_200_s"] for n in args.sizes]
        cpu = [medians[name][str(n)]["cpu_ms_per_alert"] for n in args.sizes]
        print(describe(name, args.sizes, times, cpu))

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures = {
        "machine": machine,
        "store": store,
        "commit": commit(),
        "taken": stamp,
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "workers": args.workers,
        "rounds": len(rounds),
        "sizes": args.sizes,
        "posts_per_size": {str(n): posts_for(n, args.most) for n in args.sizes},
        "medians": medians,
        "each_round": [{name: {str(n): v for n, v in r[name].items()} for name in SERVERS} for r in rounds],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{OUT_NAME}.json").write_text(json.dumps(figures, indent=2) + "\n")
    try:
        plot(
            figures,
            out / f"{OUT_NAME}.png",
            f"{machine.split(',')[0]}, {store.split(',')[0]}, {figures['commit']}, {stamp}, "
            f"load average {load_before:.1f}",
        )
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
    print(f"wrote {out / OUT_NAME}.json and .png; load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
