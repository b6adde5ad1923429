"""`remediate replay --since 30d` over a month of a busy cluster: its time and peak RSS.

    .venv/bin/python bench/replay.py                 # ~1,000,000 stored alerts over 30 days (built once into /tmp)
    .venv/bin/python bench/replay.py --alerts 50000  # a quick size

The store is bench/history.py's generator (`history.build`: notifications of 1-7 alerts, 500 nodes skewed,
8 alertnames, recorded runs and decisions) with its days set to 30, so the whole month is replayed. The
replayed playbooks match all 8 alertnames on the alert's node (cooldown 30m, at most 3 attempts a day); the
GpuXidError one cordons the node, so the breaker is simulated (500 nodes: cap 3 per 10 minutes).

`remediate replay --json` runs as a child process; its wall time, CPU time and peak resident set size (RSS, the
kernel's maxrss of the child: ru_maxrss of RUSAGE_CHILDREN) are printed. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c
import history

DAYS = 30


def playbooks(directory: Path) -> None:
    for alertname in history.ALERTNAMES:
        cordon = "\n  - name: cordon\n    action: k8s.cordon" if alertname == "GpuXidError" else ""
        (directory / f"{alertname.lower()}.yaml").write_text(
            f"name: replay-{alertname.lower()}\nmatch:\n  alertname: {alertname}\nmode: enforce\ntarget: node\n"
            f"cooldown: 30m\nmax_attempts: 3\nsteps:\n  - name: log\n    action: log\n    with:\n"
            f'      message: "{{{{ labels.alertname }}}} on {{{{ labels.Hostname }}}}"{cordon}\n',
            encoding="utf-8",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alerts", type=int, default=1_000_000, help="stored alerts (about)")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    runs = int(args.alerts * (1 - sum(w for _, w in history.NO_RUN)))
    db = Path(f"/tmp/remediate-bench-replay-{runs}.db")
    history.DAYS = DAYS  # the generator's span: one month
    if args.rebuild or not db.exists():
        started = time.perf_counter()
        counts = history.build(db, runs)
        print(f"built {db} in {time.perf_counter() - started:.0f} s: {counts}")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "playbooks"
        directory.mkdir()
        playbooks(directory)
        command = [sys.executable, "-m", "remediate", "replay", "--database-url", f"sqlite:///{db}"]
        command += ["--playbooks", str(directory), "--since", f"{DAYS + 1}d", "--cluster-nodes", "500", "--json"]
        env = {**os.environ, "PYTHONPATH": str(c.REPO)}
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, check=False, cwd=scratch)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stderr.decode(), file=sys.stderr)
        return 1
    report = json.loads(done.stdout)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mib = usage.ru_maxrss / 1024
    print(c.machine_line())
    print(
        f"replayed {report['notifications']:,} notifications, {report['alerts']:,} alerts in {seconds:.1f} s "
        f"({report['alerts'] / seconds:,.0f} alerts/s; CPU {usage.ru_utime + usage.ru_stime:.1f} s); "
        f"peak RSS {peak_mib:.0f} MiB"
    )
    decisions = {name: (v["recorded"], v["replayed"]) for name, v in report["decisions"].items()}
    print(f"decisions recorded -> replayed: {decisions}")
    print(f"runs differing on {len(report['runs'])} (playbook, node) pairs; {report['changed_decisions']:,} decisions")
    print(f"breaker: {report['breaker']['note']}; {len(report['breaker']['trips'])} trips")
    cordoned = report["cordoned"]
    print(f"nodes cordoned: {len(cordoned['replayed'])} replayed, {len(cordoned['recorded'])} recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
