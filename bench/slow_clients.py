"""Does the server answer while slow or idle clients hold connections?

    .venv/bin/python bench/slow_clients.py                      # this checkout: 2, 8 and 50 slow clients
    .venv/bin/python bench/slow_clients.py --code /tmp/old      # another tree (e.g. `git archive 564130a`)
    .venv/bin/python bench/slow_clients.py --quick              # 2 slow clients only

`remediate serve` on its defaults (2 HTTP workers, the tree's default threads) on 127.0.0.1. For each
count N: N connections are opened, half idle (connected, nothing sent) and half sending a request
head one byte every 0.2 s; then 7 `/healthz` probes and one `POST /webhook` are made, each with a
2 s timeout, and their answers and latencies printed. Every connection is closed after 10 s at most;
traffic goes to loopback only. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from pathlib import Path

import _common as c
import requests

PROBES = 7
PROBE_TIMEOUT = 2.0
HOLD_SECONDS = 10.0


def _hold(port: int, slow: bool, stop: threading.Event) -> None:
    """One connection: idle, or trickling a request head a byte every 0.2 s, until `stop` or HOLD_SECONDS."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 200 + b"\r\n\r\n"
    deadline = time.monotonic() + HOLD_SECONDS
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            for byte in head if slow else b"":
                if stop.is_set() or time.monotonic() > deadline:
                    return
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
            stop.wait(max(0.0, deadline - time.monotonic()))
    except OSError:
        return  # the server cut it off: what a server should do to a client that is too slow


def _probe(server: c.Server) -> tuple[int, list[float], str]:
    """(/healthz answered of PROBES, their latencies, the webhook's answer)."""
    answered: list[float] = []
    for _ in range(PROBES):
        started = time.monotonic()
        try:
            if requests.get(server.url + "/healthz", timeout=PROBE_TIMEOUT).status_code == 200:
                answered.append(time.monotonic() - started)
        except requests.RequestException:
            pass
    body = c.notification([c.alert("slow-1", "node-a")])
    started = time.monotonic()
    try:
        response = requests.post(
            server.url + "/webhook",
            data=json.dumps(body),
            headers={"Authorization": f"Bearer {c.TOKEN}", "Content-Type": "application/json"},
            timeout=PROBE_TIMEOUT,
        )
        webhook = f"{response.status_code} in {time.monotonic() - started:.2f} s"
    except requests.RequestException as exc:
        webhook = f"no answer within {PROBE_TIMEOUT:.0f} s ({exc.__class__.__name__})"
    return len(answered), answered, webhook


def measure(workdir: Path, count: int, code: Path | None) -> None:
    # Each tree on its own default threads per worker (_common pins 1 for the ingest figures).
    env = {"REMEDIATE_THREADS": _default_threads(code)}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    db = workdir / f"slow-{count}.db"
    with c.remediate_server(workdir, db=db, extra_env=env) as server:
        stop = threading.Event()
        holders = [
            threading.Thread(target=_hold, args=(server.port, i % 2 == 1, stop), daemon=True) for i in range(count)
        ]
        for holder in holders:
            holder.start()
        time.sleep(1.0)  # every connection is open and holding
        started = time.monotonic()
        answered, latencies, webhook = _probe(server)
        took = time.monotonic() - started
        stop.set()
        for holder in holders:
            holder.join(HOLD_SECONDS + 2)
    worst = f"{max(latencies) * 1000:.0f} ms" if latencies else "-"
    print(
        f"{count:>3} slow clients: /healthz answered {answered}/{PROBES} (slowest {worst}); "
        f"webhook {webhook}; probing took {took:.1f} s"
    )


def _default_threads(code: Path | None) -> str:
    """The tree's own default of `threads` (1 in older trees: sync workers; 4 now)."""
    config = (code or c.REPO) / "remediate" / "config.py"
    for line in config.read_text().splitlines():
        if line.strip().startswith("threads: int ="):
            return line.split("=", 1)[1].split("#")[0].strip()
    return "1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="run `remediate serve` from this tree (PYTHONPATH)")
    parser.add_argument("--quick", action="store_true", help="2 slow clients only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    print(c.machine_line())
    print(f"code: {args.code or c.REPO}")
    with c.workspace(args.keep) as workdir:
        for count in (2,) if args.quick else (2, 8, 50):
            measure(workdir, count, args.code)


if __name__ == "__main__":
    main()
