"""A DaemonSet rollout on a fleet: N agent pods ask a real `remediate serve` for their node's credential at once.

Each simulated agent runs the agent's own enrollment client (`remediate.cli.agent`: each try is `ask_credential`,
what the chart's init container sends, POST /v1/agent-credential with the pod's projected ServiceAccount token;
between tries the pause of `Backoff`, Retry-After honoured, full jitter, with its own seeded generator): the
loop of `credential_from_server`, scheduled on a heap and sent by `--senders` threads (10,000 threads that
each sleep would load a shared 2-core machine to a load average of hundreds), from an address of its own
(127.x.y.z, as each pod has its own IP: the server's per-address bound sees one pod per address). The
server checks each token with a TokenReview, then reads the pod and the DaemonSet, against the test API server
(tests/support/fake_apiserver.py) holding the N pods, which records when each TokenReview arrived.

Printed: agents enrolled and the time the last one took, the enrollment rate (agents/s), TokenReviews per second
as the API server saw them (the most in any 1 s window) beside the server's bound (agent_enroll_rate), retries
per agent (mean, p50, p99, max), API requests per enrollment, the server's CPU seconds (all its processes, from
/proc) and memory (RSS and peak RSS per process), and the load average (the machine may be shared).

    .venv/bin/python bench/agent_fleet.py [--agents 10000] [--rate 20] [--ramp 0]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests
from _common import REPO, machine_line, percentile, workspace
from requests.adapters import HTTPAdapter

sys.path.insert(0, str(REPO))
import heapq

from remediate.cli.agent import Backoff, ask_credential
from remediate.errors import ConfigError
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.server import RemediateServer

NS, DAEMONSET, ACCOUNT, AUDIENCE = "remediate", "rel-remediate-agent", "rel-remediate-agent", "remediate-agent"
AGENT_TOKEN = "bench-agent-master-token-0123456789"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


class TimedKubeAPI(FakeKubeAPI):
    """The test API server, also noting when each TokenReview came (its own `requests` has no times)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.review_times: list[float] = []

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        if method == "POST" and raw_path.startswith(REVIEWS):
            with self.lock:
                self.review_times.append(time.monotonic())
        return super().handle(method, raw_path, headers, body)


class EarlierBackoff(Backoff):
    """For `--before` only: the client's pauses before jitter (1, 2, 4, 8, then 10 s; Retry-After ignored)."""

    def pause(self, attempt: int, retry_after: float | None = None) -> float:
        return min(2.0**attempt, 10.0)


class FromAddress(HTTPAdapter):
    """Connects from `address` (a loopback address of its own: one simulated pod's IP)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def pod_address(index: int) -> str:
    return f"127.{1 + index // 65_000}.{index // 250 % 260 % 256}.{1 + index % 250}"


def most_in_one_second(times: list[float]) -> int:
    """The most events in any window of 1 s (sliding, not aligned to whole seconds)."""
    ordered, most, start = sorted(times), 0, 0
    for end, at in enumerate(ordered):
        while ordered[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def group_processes(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    found.append(int(entry.name))
    return found


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def memory_kib(pid: int) -> tuple[int, int, str]:
    """(VmRSS, VmHWM) in KiB and the process title."""
    values = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:60]
    return values.get("VmRSS", 0), values.get("VmHWM", 0), title


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000, help="agent pods (default 10000)")
    parser.add_argument("--rate", type=int, default=20, help="the server's agent_enroll_rate (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="the server's HTTP workers (default 2, the chart's)")
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds over which the pods start (default 0)")
    parser.add_argument("--wait", type=float, default=1200.0, help="each agent's --wait (default 1200 s)")
    parser.add_argument("--senders", type=int, default=32, help="threads sending the agents' tries (default 32)")
    parser.add_argument(
        "--before",
        action="store_true",
        help="the behaviour before the server-wide bound and the jitter: no bound across addresses (a rate of "
        "1,000,000/s), the earlier pauses (1, 2, 4, 8, 10 s, Retry-After ignored)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    if args.before:
        args.rate = 1_000_000

    with workspace(args.keep) as work, TimedKubeAPI() as kube:
        kube.add_daemonset(NS, DAEMONSET)
        tokens = work / "tokens"
        tokens.mkdir()
        for index in range(args.agents):
            pod = f"{DAEMONSET}-{index:05d}"
            kube.add_pod(NS, pod, f"gpu-{index:05d}", owner="DaemonSet", owner_name=DAEMONSET, service_account=ACCOUNT)
            (tokens / pod).write_text(kube.issue_token(NS, pod, audiences=(AUDIENCE,)))
        playbooks = work / "playbooks"
        playbooks.mkdir()
        env = {
            "REMEDIATE_KUBECONFIG": str(kube.write_kubeconfig(work / "kubeconfig")),
            "REMEDIATE_AGENT_SELECTOR": "app.kubernetes.io/component=agent",
            "REMEDIATE_AGENT_NAMESPACE": NS,
            "REMEDIATE_AGENT_DAEMONSET": DAEMONSET,
            "REMEDIATE_AGENT_SERVICE_ACCOUNT": ACCOUNT,
            "REMEDIATE_AGENT_TOKEN": AGENT_TOKEN,
            "REMEDIATE_AGENT_ENROLL_RATE": str(args.rate),
            "REMEDIATE_LOG_LEVEL": "WARNING",
        }
        server = RemediateServer(work / "remediate", playbooks, env=env, workers=args.workers).start()
        pids = group_processes(server.pid)
        cpu_before = cpu_seconds(pids)
        load_before = os.getloadavg()
        requests_before = len(kube.requests)
        done: list[tuple[float, int]] = []
        failed: list[str] = []
        lock = threading.Condition()
        started = time.monotonic()
        # (when, agent, attempt): each agent's next try; the pods start over --ramp seconds.
        due = [(started + args.ramp * i / max(1, args.agents), i, 0) for i in range(args.agents)]
        heapq.heapify(due)
        kind = EarlierBackoff if args.before else Backoff
        backoffs = [kind(rng=random.Random(args.seed * 1_000_003 + i)) for i in range(args.agents)]
        sessions: dict[int, requests.Session] = {}

        def sender() -> None:
            while True:
                with lock:
                    while due and due[0][0] > time.monotonic():
                        lock.wait(min(0.05, due[0][0] - time.monotonic()))
                    if not due:
                        return
                    _, index, attempt = heapq.heappop(due)
                session = sessions.setdefault(index, requests.Session())
                session.mount("http://", FromAddress(pod_address(index)))
                pod = f"{DAEMONSET}-{index:05d}"
                try:
                    credential, asked, problem = ask_credential(
                        server.url, tokens / pod, f"gpu-{index:05d}", session=session
                    )
                except ConfigError as exc:
                    credential, problem = None, f"refused: {exc}"
                    asked = float("inf")
                with lock:
                    if credential is not None:
                        done.append((time.monotonic() - started, attempt))
                        sessions.pop(index).close()
                        continue
                    pause = backoffs[index].pause(attempt, asked)
                    if time.monotonic() - started + pause > args.wait:
                        failed.append(problem)
                        continue
                    heapq.heappush(due, (time.monotonic() + pause, index, attempt + 1))
                    lock.notify()

        threads = [threading.Thread(target=sender, daemon=True) for _ in range(args.senders)]
        for thread in threads:
            thread.start()
        last = time.monotonic()
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                print(f"  {time.monotonic() - started:5.0f} s: {len(done)} enrolled", flush=True)
        elapsed = time.monotonic() - started
        cpu_after = cpu_seconds(pids)
        memory = [memory_kib(pid) for pid in pids]
        load_after = os.getloadavg()
        api_requests = len(kube.requests) - requests_before
        server.stop()

    times = sorted(at for at, _ in done)
    retries = [r for _, r in done]
    reviews = len(kube.review_times)
    server_cpu = sum(cpu_after.get(pid, 0.0) - cpu_before.get(pid, 0.0) for pid in pids)
    print()
    print(machine_line())
    print(f"load average at start {load_before[0]:.2f}, at the end {load_after[0]:.2f} (1 min); wall {elapsed:.0f} s")
    print(
        f"{len(done)} of {args.agents} agents enrolled ({len(failed)} gave up), server {args.workers} HTTP workers, "
        f"agent_enroll_rate {args.rate}/s, pods started over {args.ramp:g} s"
    )
    if times:
        print(f"time for all to enroll: {times[-1]:.1f} s (half: {times[len(times) // 2]:.1f} s)")
        print(f"enrollment rate: {len(times) / times[-1]:.1f} agents/s (the most in 1 s: {most_in_one_second(times)})")
        print(
            f"retries per agent: mean {sum(retries) / len(retries):.2f}, p50 {percentile(retries, 50):.0f}, "
            f"p99 {percentile(retries, 99):.0f}, max {max(retries)}"
        )
    print(
        f"TokenReviews: {reviews}, the most the API server saw in 1 s: {most_in_one_second(kube.review_times)} "
        f"(bound {args.rate})"
    )
    print(f"API requests: {api_requests} ({api_requests / max(1, len(done)):.2f} per enrolled agent)")
    print(f"server CPU: {server_cpu:.1f} s ({1000 * server_cpu / max(1, len(done)):.1f} ms per enrolled agent)")
    for rss, hwm, title in memory:
        print(f"  {title:60s} RSS {rss / 1024:6.1f} MiB, peak {hwm / 1024:6.1f} MiB")
    print(f"  sum of RSS {sum(m[0] for m in memory) / 1024:.1f} MiB")
    if failed:
        print("first failures:", *failed[:3], sep="\n  ")


if __name__ == "__main__":
    main()
