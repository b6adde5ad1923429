"""Peak memory of an HTTP worker while it takes one large notification.

    .venv/bin/python bench/body_memory.py                 # 4, 8, 16 and 31.5 MiB bodies, ~1-2 min
    .venv/bin/python bench/body_memory.py --quick         # 8 MiB only

`remediate serve` with ONE HTTP worker and a playbook that matches nothing (every alert is stored with
an `unmatched` decision: the parse and the store, without runs). Each body is a notification of
~800-byte alerts (AlertManager's shape), sent once; a sampler reads the worker's VmRSS from /proc every
2 ms while the request is in flight. Prints the worker's RSS before, its peak, and the peak growth
per MiB of body. A body over `max_body_bytes` is answered 413 before it is read (that figure too).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import _common as c
import requests

NO_MATCH = """\
name: never
match:
  alertname: NeverFiresInThisBench
target: node
steps:
  - name: log
    action: log
    with:
      message: never
"""


def _rss_kib(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) if match else 0


def _worker_pid(log: Path) -> int:
    pids = re.findall(r"Booting worker with pid: (\d+)", log.read_text())
    return int(pids[-1])


def _body(mib: float) -> bytes:
    target = int(mib * 1024 * 1024)
    one = len(json.dumps(c.alert("x" * 12, "node-000", gpu=0)))
    count = max(1, target // (one + 2))
    alerts = [c.alert(f"mem{i:010x}", f"node-{i % c.TARGETS:03d}", gpu=i % 8) for i in range(count)]
    return json.dumps(c.notification(alerts)).encode()


def measure(url: str, pid: int, body: bytes, parallel: int = 1) -> tuple[str, int, int, float]:
    before = _rss_kib(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_kib(pid))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {c.TOKEN}", "Content-Type": "application/json"}
    statuses: list[int] = []

    def post() -> None:
        statuses.append(requests.post(url + "/webhook", data=body, headers=headers, timeout=600).status_code)

    posts = [threading.Thread(target=post) for _ in range(parallel)]
    for thread in posts:
        thread.start()
    for thread in posts:
        thread.join()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    return ",".join(map(str, sorted(statuses))), before, peak, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one 8 MiB body")
    parser.add_argument("--sizes", type=float, nargs="+", default=[4, 8, 16, 31.5], help="body sizes in MiB")
    parser.add_argument("--max-body-bytes", type=int, help="the server's max_body_bytes (default: its own)")
    parser.add_argument("--parallel", type=int, default=1, help="POST this many bodies of each size at once [1]")
    parser.add_argument("--threads", type=int, default=4, help="threads of the HTTP worker [4, serve's default]")
    args = parser.parse_args(argv)
    sizes = [8.0] if args.quick else args.sizes
    print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
    extra = {"REMEDIATE_THREADS": str(args.threads)}
    if args.max_body_bytes:
        extra["REMEDIATE_MAX_BODY_BYTES"] = str(args.max_body_bytes)
    with c.workspace() as work:
        server = c.remediate_server(work, db=work / "mem.db", workers=1, playbook=NO_MATCH, extra_env=extra)
        with server:
            pid = _worker_pid(server.log_path)
            print(f"{args.parallel} body(ies) at once; one HTTP worker, {args.threads} threads")
            print("body        status  worker RSS before  peak      growth   growth/MiB  seconds")
            for mib in sizes:
                body = _body(mib)
                status, before, peak, seconds = measure(server.url, pid, body, args.parallel)
                size = len(body) / 1024 / 1024
                growth = (peak - before) / 1024
                print(
                    f"{size:6.1f} MiB  {status}     {before / 1024:7.1f} MiB       {peak / 1024:7.1f} MiB"
                    f"  {growth:6.1f} MiB  {growth / size:6.1f}      {seconds:6.2f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
