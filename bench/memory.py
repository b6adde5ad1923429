"""Idle memory and CPU of `remediate agent` and of `remediate serve` (master + HTTP workers + executor process).

    .venv/bin/python bench/memory.py            # ~1.5 min
    .venv/bin/python bench/memory.py --quick    # < 30 s
    .venv/bin/python bench/memory.py --agent-only   # the agent alone (~30 s): run it alternately in two trees

For each process of each program's process tree: VmRSS (/proc/<pid>/status) and PSS (/proc/<pid>/smaps_rollup:
each page shared by n processes counts 1/n). Summing RSS over processes forked from one master counts the pages
they still share (the imported code, mostly) once per process; the PSS sum counts them once, which is what the
kernel charges a container's memory cgroup. The targets: the server's PSS sum idle <= 100 MiB; the
agent (one process) idle <= 40 MB of RSS, and its idle CPU printed (CPU seconds over --cpu-window s idle).

1. `remediate agent` (simulated GPUs, a cleanup policy, its state file), idle --settle s after it is ready;
   then its CPU over --cpu-window s idle.
2. `remediate serve` with the benchmarks' settings (2 HTTP workers, an executor process of 2 threads, SQLite),
   a) idle --settle s after it is ready (and its CPU over --cpu-window s); b) idle again after --alerts
   one-alert notifications were handled (sent, run, drained; Python keeps some of what it allocated).

Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import yaml

AGENT_TARGET_MB = 40.0
"""The agent's idle RSS, in MB = 10^6 bytes."""
SERVER_PSS_TARGET_MIB = 100.0
"""The server's idle PSS, all its processes, in MiB."""
AGENT_TOKEN = "bench-agent-token-0123456789"


def snapshot(server: c.Server) -> list[dict[str, Any]]:
    """Every process of the server's tree, named by its role (read from gunicorn's log: without setproctitle every
    process has the master's command line)."""
    log = server.log_path.read_text(errors="replace")
    executors = {int(pid) for pid in re.findall(r"Started the executor process \(pid: (\d+)", log)}
    found = []
    pids = c.process_tree(server.process.pid)
    for pid in pids:
        try:
            memory = c.process_memory(pid)
        except OSError:
            continue  # exited meanwhile
        role = "executor" if pid in executors else "worker" if pid != server.process.pid else "master"
        if len(pids) == 1:
            role = "alone"  # one process serving by itself (`remediate agent`: no gunicorn master)
        found.append({**memory, "role": role})
    return found


def agent_server(work: Path) -> c.Server:
    sys.path.insert(0, str(c.REPO))
    from remediate.gpu.simulator import SimulatedBackend

    port = c.free_port()
    scratch = work / "scratch"
    scratch.mkdir()
    policies = work / "policies.yaml"
    policy = {"name": "scratch", "mountpoint": "/scratch", "roots": [str(scratch)], "patterns": ["*.tmp"]}
    policies.write_text(yaml.safe_dump({"policies": [policy]}))
    argv = [
        sys.executable, "-m", "remediate", "agent", "--bind", f"127.0.0.1:{port}", "--node-name", "node-000",
        "--gpu-backend", "simulated", "--gpu-simulator-file", str(SimulatedBackend.write_example(work / "gpus.yaml")),
        "--policies-file", str(policies), "--state-file", str(work / "state" / "agent.db"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env["REMEDIATE_AGENT_TOKEN"] = AGENT_TOKEN
    return c.Server("agent", argv, env, port, "/readyz", work / f"agent-{port}.log")


def show(title: str, processes: list[dict[str, Any]]) -> dict[str, float]:
    print(f"{title}")
    for p in processes:
        print(f"  {p['role']:8} pid {p['pid']:7d}  RSS {p['rss_mib']:6.1f} MiB  PSS {p['pss_mib']:6.1f} MiB")
    total = {
        "rss_mib": sum(p["rss_mib"] for p in processes),
        "pss_mib": sum(p["pss_mib"] for p in processes),
        "largest_rss_mib": max(p["rss_mib"] for p in processes),
        "processes": processes,
    }
    print(f"  total ({len(processes)} processes)  RSS {total['rss_mib']:6.1f} MiB  PSS {total['pss_mib']:6.1f} MiB")
    return total


def idle_cpu(server: c.Server, window: float) -> dict[str, float]:
    """CPU seconds the server's processes use over `window` seconds of idling."""
    before = server.cpu_seconds()
    time.sleep(window)
    used = server.cpu_seconds() - before
    # utime/stime count clock ticks (10 ms): over `window` s a process idling below one tick shows 0.
    resolution = 1000 / os.sysconf("SC_CLK_TCK") / window
    per_s = 1000 * used / window
    return {"cpu_window_s": window, "cpu_s": used, "cpu_ms_per_s": per_s, "resolution_ms_per_s": resolution}


def cpu_line(figures: dict[str, Any]) -> str:
    return (
        f"idle CPU over {figures['cpu_window_s']:g} s: {figures['cpu_ms_per_s']:.2f} ms per second "
        f"({figures['cpu_ms_per_s'] / 10:.3f}% of a core; one clock tick = {figures['resolution_ms_per_s']:.2f} ms/s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter settle, 200 alerts (< 20 s)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds idle before each snapshot [5]")
    parser.add_argument("--cpu-window", type=float, default=20.0, help="seconds of idle CPU measured [20]")
    parser.add_argument("--alerts", type=int, default=2000, help="one-alert notifications before the 2nd snapshot")
    parser.add_argument("--workers", type=int, default=2, help="HTTP workers of remediate serve [2]")
    parser.add_argument("--agent-only", action="store_true", help="measure `remediate agent` only")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.settle, args.alerts, args.cpu_window = 2.0, 200, 5.0

    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    print("MiB = 2^20 bytes; the agent's target is read as MB = 10^6 bytes (40 MB = 38.1 MiB)")
    figures: dict[str, Any] = {}
    with c.workspace(keep=args.keep) as work:
        (work / "agent").mkdir()
        with agent_server(work / "agent") as agent:
            time.sleep(args.settle)
            figures["agent"] = show("remediate agent, idle", snapshot(agent))
            figures["agent"].update(idle_cpu(agent, args.cpu_window))
            print(f"  {cpu_line(figures['agent'])}")
        print()
        if args.agent_only:
            return report(args, figures)
        db = work / "serve.db"
        with c.remediate_server(work, db=db, workers=args.workers) as server:
            time.sleep(args.settle)
            figures["server_idle"] = show(
                f"remediate serve ({args.workers} HTTP workers + executor process), idle", snapshot(server)
            )
            figures["server_idle"].update(idle_cpu(server, args.cpu_window))
            print(f"  {cpu_line(figures['server_idle'])}")
            bodies = (
                json.dumps(c.notification([c.alert(f"mem{i:012x}", f"node-{i % c.TARGETS:03d}")])).encode()
                for i in range(args.alerts)
            )
            c.paced_posts(server.url + "/webhook", bodies, rate=1000.0)  # as fast as the server answers
            c.wait_for_runs_done(db, timeout=120)
            time.sleep(args.settle)
            print()
            figures["server_after"] = show(
                f"remediate serve, idle again after {args.alerts} alerts handled (for information)",
                snapshot(server),
            )

    print()
    return report(args, figures)


def report(args: argparse.Namespace, figures: dict[str, Any]) -> int:
    mb = 1e6 / 2**20  # MiB per MB
    agent = figures["agent"]
    agent_mb = agent["rss_mib"] / mb
    print("targets:")
    print(
        f"  agent RSS idle <= {AGENT_TARGET_MB:.0f} MB: {agent_mb:.1f} MB (PSS {agent['pss_mib'] / mb:.1f} MB): "
        f"{c.verdict(agent_mb <= AGENT_TARGET_MB)}; its {cpu_line(agent)}"
    )
    if "server_idle" in figures:
        server_pss = figures["server_idle"]["pss_mib"]
        print(
            f"  server PSS (master + workers + executor) idle <= {SERVER_PSS_TARGET_MIB:.0f} MiB: {server_pss:.1f} MiB "
            f"(RSS sum {figures['server_idle']['rss_mib']:.1f} MiB): {c.verdict(server_pss <= SERVER_PSS_TARGET_MIB)}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
