"""Fleet scale: what one `k8s.cordon` run, one gpu-xid-quarantine run and an XID storm cost the server on a
cluster of 100, 1,000 and 10,000 GPU-sized nodes.

    .venv/bin/python bench/fleet.py                    # 100, 1,000, 10,000 nodes; writes docs/img/scaling-fleet-size.*
    .venv/bin/python bench/fleet.py --quick            # 100 and 1,000 nodes, a 10 s storm; writes to /tmp
    .venv/bin/python bench/fleet.py --sizes 100,10000  # other sizes

Driven as a user runs it: a real `remediate serve` (2 HTTP workers and the executor process with 4 threads,
the chart's defaults) whose kubeconfig points at the project's test API server (tests/support/fake_apiserver.py,
real Kubernetes REST to the official client), serving N nodes dressed as a GPU node's kubelet and the NVIDIA GPU
operator write them (~15 KB each: the 50 images a kubelet reports, GFD and NFD labels, capacity
nvidia.com/gpu: 8); the breaker and the node selector as the chart ships them (min(10% of the nodes, 3) per 10
minutes; kube_node_selector nvidia.com/gpu.present=true). Alerts are POSTed to /webhook as AlertManager sends
them. Each scenario gets a fresh server (a fresh breaker) whose first run is a dry-run cordon (it imports the
Kubernetes client and plans once: reported as "first run"), then:

- cordon: one alert -> the one-step `k8s.cordon` playbook;
- quarantine: one GPUXidCritical -> the shipped playbooks/gpu-xid-quarantine.yaml (checkpoint, cordon, taint,
  drain of the node's pod, notify);
- storm: GPUXidCritical on 5% of the fleet, spread evenly over --storm-window seconds (60: "within a minute"),
  then until every run has finished or --storm-timeout passed (what did not finish is reported as such).

Figures, load-independent where they can be: CPU of the executor process and of the whole server (utime + stime
of each process in /proc/<pid>/stat); the executor's peak RSS growth (VmHWM after the run, its high-water mark
reset through /proc/<pid>/clear_refs before it, minus VmRSS before: exact, not sampled); the server's peak PSS
(its processes summed, sampled every 0.2 s: the figure to hold against the pod's memory limit); the API
requests the server made (the test API server's request log), by kind; alert -> node cordoned (wall time: give
the load average with it). Ratios largest / smallest size. A JSON of the figures and a plot of cost against
cluster size (matplotlib: the `bench` extra). Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as c
import requests
import yaml

sys.path.insert(0, str(c.REPO))
from tests.support.fake_apiserver import FakeKubeAPI, cluster  # the repository root is on sys.path only now
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer

SIZES = (100, 1_000, 10_000)
OUT_NAME = "scaling-fleet-size"
SCENARIOS = ("cordon", "quarantine", "storm")
STORM_SHARE = 0.05
GPU_LABEL = "nvidia.com/gpu.present"

CORDON_PLAYBOOK = """\
name: bench-cordon
description: Benchmark playbook; one k8s.cordon step.
match:
  alertname: [BenchCordon]
mode: enforce
target: node
cooldown: 0s
steps:
  - action: k8s.cordon
    with:
      note: benchmark
"""
WARM_PLAYBOOK = (
    CORDON_PLAYBOOK.replace("bench-cordon", "bench-warm")
    .replace("BenchCordon", "BenchWarm")
    .replace("mode: enforce", "mode: dry-run")
)


# ---------------------------------------------------------------------------------------------- the fleet


def _digest(seed: int) -> str:
    return f"{(seed * 0x9E3779B97F4A7C15) & (2**256 - 1):064x}"


REPOSITORIES = ["pytorch", "tensorflow", "tritonserver", "nemo", "cuda", "k8s/dcgm-exporter", "gpu-operator", "driver",
                "k8s-device-plugin", "gpu-feature-discovery"]  # fmt: skip
# What a GPU node's kubelet reports (nodeStatusMaxImages: 50 images, each by digest and tag) and what the GPU
# operator's feature discovery (GFD) and NFD label it with. One list shared by every node of the test server
# (its LIST copies each node anyway): only the bench's own memory is spared.
IMAGES = [
    {
        "names": [
            f"nvcr.io/nvidia/{repo}@sha256:{_digest(i)}",
            f"nvcr.io/nvidia/{repo}:{24 + i % 3}.{i % 12 + 1:02d}-py3",
        ],
        "sizeBytes": 1_000_000_000 + i * 37_000_123,
    }
    for i, repo in enumerate(REPOSITORIES * 5)
]
CPU_FLAGS = (
    "ADX AESNI AVX AVX2 AVX512BF16 AVX512BITALG AVX512BW AVX512CD AVX512DQ AVX512F AVX512IFMA AVX512VBMI "
    "AVX512VBMI2 AVX512VL AVX512VNNI AVX512VPOPCNTDQ AMXBF16 AMXINT8 AMXTILE CMPXCHG8 FMA3 FSRM FXSR GFNI "
    "IBPB MOVBE OSXSAVE SHA STIBP SYSCALL SYSEE VAES VMX VPCLMULQDQ WAITPKG X87 XGETBV1 XSAVE XSAVEC"
)
NFD_LABELS = {f"feature.node.kubernetes.io/cpu-cpuid.{flag}": "true" for flag in CPU_FLAGS.split()}
GFD_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "DGXH100",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "90",
    "nvidia.com/cuda.driver.rev": "07",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
    "nvidia.com/gfd.timestamp": "1732000000",
    "nvidia.com/gpu.deploy.container-toolkit": "true",
    "nvidia.com/gpu.deploy.dcgm": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.driver": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    "nvidia.com/gpu.deploy.node-status-exporter": "true",
    "nvidia.com/gpu.deploy.operator-validator": "true",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "topology.kubernetes.io/region": "us-east-1",
    "kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
}
RESOURCES = {
    "cpu": "192", "memory": "2113663708Ki", "ephemeral-storage": "7497553852Ki", "hugepages-1Gi": "0",
    "hugepages-2Mi": "0", "nvidia.com/gpu": "8", "pods": "110", "rdma/rdma_shared_device_a": "63",
}  # fmt: skip


def dress(index: int) -> Any:
    """The change that makes a bare test node a GPU node as its kubelet and the GPU operator leave it."""

    def change(node: dict[str, Any]) -> None:
        node["metadata"]["labels"].update({**GFD_LABELS, **NFD_LABELS, "topology.kubernetes.io/zone": f"z{index % 4}"})
        node["metadata"]["annotations"].update({
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{index:017x}"}),
            "nfd.node.kubernetes.io/feature-labels": ",".join(k.rsplit("/", 1)[1] for k in NFD_LABELS),
            "nvidia.com/gpu-driver-upgrade-enabled": "true",
        })  # fmt: skip
        status = node["status"]
        status["capacity"], status["allocatable"] = dict(RESOURCES), {**RESOURCES, "cpu": "191500m"}
        status["images"] = IMAGES
        status["addresses"] = [
            {"type": "InternalIP", "address": f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"},
            {"type": "Hostname", "address": node["metadata"]["name"]},
        ]
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
        status["conditions"] = [
            {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": f"kubelet has {reason}",
             "lastHeartbeatTime": "2026-11-27T06:00:00Z", "lastTransitionTime": "2026-11-20T06:00:00Z"}
            for kind, reason in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                                 ("PIDPressure", "SufficientPID"))
        ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
              "lastHeartbeatTime": "2026-11-27T06:00:00Z", "lastTransitionTime": "2026-11-20T06:00:00Z"}]  # fmt: skip

    return change


def build_fleet(kube: FakeKubeAPI, size: int) -> list[str]:
    names = cluster(kube, size, prefix="gpu")
    for index, name in enumerate(names):
        kube.update_node(name, dress(index))
        # One training pod per node (a ReplicaSet's): what the quarantine's drain evicts.
        kube.add_pod("ml", f"trainer-{name}", name)
    return names


# ---------------------------------------------------------------------------------------------- the server's processes


def processes(server: RemediateServer) -> dict[int, str]:
    """pid -> role (`master`, `http`, `executor`) of the server's processes."""
    roles = {}
    for pid in c.process_tree(server.pid):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            roles[pid] = title.split("remediate: ", 1)[1].split()[0] if "remediate: " in title else "other"
    return roles


def executor_pid(server: RemediateServer) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [pid for pid, role in processes(server).items() if role == "executor"]
        if found:
            return found[0]
        time.sleep(0.1)
    raise SystemExit(f"no executor process in the server's tree\n{server.log_tail()}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (its threads, the exited ones too)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def status_kib(pid: int, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> None:
    """VmHWM := VmRSS now (Linux >= 4.0: '5' to clear_refs), so that VmHWM later is this window's peak."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


class Sampler:
    """Samples the server's summed PSS (and the executor's RSS) every `interval` s while a window is open;
    stops the server when the executor passes `stop_mib` (this machine is shared)."""

    def __init__(self, server: RemediateServer, executor: int, stop_mib: float, interval: float = 0.2) -> None:
        self.server, self.executor, self.stop_mib, self.interval = server, executor, stop_mib, interval
        self.peak_pss_mib = 0.0
        self.peak_executor_rss_mib = 0.0
        """Sampled: the figure left when the server was stopped (its VmHWM went with it)."""
        self.stopped_for_memory = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(OSError, FileNotFoundError):
                total = sum(c.process_memory(pid)["pss_mib"] for pid in processes(self.server))
                self.peak_pss_mib = max(self.peak_pss_mib, total)
                self.peak_executor_rss_mib = max(self.peak_executor_rss_mib, status_kib(self.executor, "VmRSS") / 1024)
                if self.peak_executor_rss_mib > self.stop_mib:
                    self.stopped_for_memory = True
                    self.server.kill()
                    return
            self._done.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=10)


# ---------------------------------------------------------------------------------------------- one measurement


def request_kind(method: str, path: str, verb: str) -> str:
    """'LIST nodes', 'WATCH nodes', 'GET nodes/NAME', 'PATCH nodes/NAME', 'POST pods/eviction', ... (`verb`: the
    test API server's, which tells a watch from a list: their paths are the same but for the query)."""
    path = re.sub(r"^/apis?/(?:[^/]+/)?v1/", "", path)
    path = re.sub(r"^namespaces/[^/]+/", "", path)
    parts = path.split("/")
    if len(parts) == 1:
        return f"{'WATCH' if verb == 'watch' else 'LIST' if method == 'GET' else method} {parts[0]}"
    return f"{method} {parts[0]}/NAME" + "".join(f"/{p}" for p in parts[2:])


def alert(alertname: str, node: str, fingerprint: str) -> dict[str, Any]:
    body = c.alert(fingerprint, node, alertname=alertname)
    body["labels"]["node"] = node
    body["annotations"]["summary"] = f"GPU 3 (GPU-{fingerprint}) XID 79: fallen off the bus"
    return body


def post(server: RemediateServer, alertname: str, node: str, fingerprint: str) -> float:
    sent = time.monotonic()
    answer = requests.post(
        server.webhook_url,
        json=c.notification([alert(alertname, node, fingerprint)]),
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=60,
    )
    if answer.status_code != 200:
        raise SystemExit(f"/webhook answered {answer.status_code}: {answer.text[:300]}")
    return sent


def runs(db: Path) -> tuple[int, int]:
    """(runs not finished, all runs)."""
    with contextlib.closing(c.db_connect(db)) as conn:
        pending, total = conn.execute(
            "SELECT count(*) FILTER (WHERE status IN ('queued', 'running', 'awaiting_approval')), count(*) FROM runs"
        ).fetchone()
    return int(pending), int(total)


def statuses(db: Path, after: int) -> dict[str, int]:
    """Status -> count of the runs after the first `after` (by id)."""
    with contextlib.closing(c.db_connect(db)) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM (SELECT status FROM runs ORDER BY id LIMIT -1 OFFSET ?) GROUP BY status",
            (after,),
        ).fetchall()
    return {str(status): int(count) for status, count in rows}


def wait_runs(server: RemediateServer, timeout: float, sampler: Sampler) -> bool:
    """Wait until no run is unfinished. Every POST was answered 200, so each alert's decision (a run, or none
    where the breaker was already open) is stored by now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not sampler.stopped_for_memory:
        if runs(server.db_path)[0] == 0:
            return True
        time.sleep(0.1)
    return False


def idle_cpu(server: RemediateServer, seconds: float = 3.0) -> float:
    """The executor's CPU per second while no run is queued (its idle polling), to set beside a run's."""
    executor = executor_pid(server)
    before = cpu_seconds(executor)
    time.sleep(seconds)
    return (cpu_seconds(executor) - before) / seconds


def measure(
    server: RemediateServer,
    kube: FakeKubeAPI,
    alerts: list[tuple[str, str]],
    *,
    window: float,
    timeout: float,
    stop_mib: float,
    prefix: str,
) -> dict[str, Any]:
    """POST `alerts` ((alertname, node)) evenly over `window` s; wait for their runs; the window's figures."""
    executor = executor_pid(server)
    pids = processes(server)
    _, runs_before = runs(server.db_path)
    rss_before = status_kib(executor, "VmRSS") / 1024
    reset_peak(executor)
    cpu_before = {pid: cpu_seconds(pid) for pid in pids}
    with kube.lock:
        first_request = len(kube.requests)
        first_change = len(kube.changes)
    sent: dict[str, float] = {}
    started = time.monotonic()
    with Sampler(server, executor, stop_mib) as sampler:
        for index, (alertname, node) in enumerate(alerts):
            time.sleep(max(0.0, started + window * index / max(1, len(alerts)) - time.monotonic()))
            sent[node] = post(server, alertname, node, f"{prefix}{index:05d}")
        finished = wait_runs(server, timeout, sampler)
        elapsed = time.monotonic() - started
        peak_rss = max(status_kib(executor, "VmHWM") / 1024, sampler.peak_executor_rss_mib)
        cpu = {pid: cpu_seconds(pid) - cpu_before[pid] for pid in pids}
    with kube.lock:
        made = list(kube.requests[first_request:])
        verbs = [verb for verb, _resource in kube.verbs[first_request:]]  # appended with each request
        changes = list(kube.changes[first_change:])
    cordoned = {ch.target: ch.at for ch in changes if ch.kind == "cordon" and ch.target in sent}
    pending, total = runs(server.db_path) if server.running else (-1, -1)
    return {
        "alerts": len(alerts),
        "finished": finished,
        "stopped_for_memory": sampler.stopped_for_memory,
        "runs_unfinished": pending,
        "runs": total - runs_before if total >= 0 else None,
        "seconds": elapsed,
        "executor_cpu_s": cpu[executor],
        "server_cpu_s": sum(cpu.values()),
        "cpu_by_role": _sum_by(pids, cpu),
        "run_statuses": statuses(server.db_path, runs_before) if server.running else {},
        "executor_rss_before_mib": rss_before,
        "executor_peak_growth_mib": peak_rss - rss_before,
        "executor_peak_rss_mib": peak_rss,
        "server_peak_pss_mib": sampler.peak_pss_mib,
        "api_requests": len(made),
        "api_requests_by_kind": dict(
            Counter(request_kind(m, p, v) for (m, p, _), v in zip(made, verbs, strict=True)).most_common()
        ),
        "nodes_cordoned": len(cordoned),
        "alert_to_cordoned_s": sorted(cordoned[n] - sent[n] for n in cordoned),
    }


def _sum_by(roles: dict[int, str], cpu: dict[int, float]) -> dict[str, float]:
    total: dict[str, float] = {}
    for pid, role in roles.items():
        total[role] = total.get(role, 0.0) + cpu[pid]
    return total


# ---------------------------------------------------------------------------------------------- scenarios


def start_server(work: Path, kube: FakeKubeAPI, sink: WebhookRecorder, request_timeout: str) -> RemediateServer:
    playbooks = work / "playbooks"
    playbooks.mkdir(parents=True)
    (playbooks / "bench-cordon.yaml").write_text(CORDON_PLAYBOOK)
    (playbooks / "bench-warm.yaml").write_text(WARM_PLAYBOOK)
    shipped = "gpu-xid-quarantine.yaml"
    (playbooks / shipped).write_text((c.REPO / "playbooks" / shipped).read_text())
    values = yaml.safe_load((c.REPO / "helm" / "remediate" / "values.yaml").read_text())
    env = {
        "REMEDIATE_KUBECONFIG": str(kube.write_kubeconfig(work / "kubeconfig")),
        "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": sink.url}}),
        # What the chart sets (its configmap: agent.nodeSelector as the k8s actions' selector) and its
        # executor settings; the poll interval: the setting's default (the test server's 0.05 s is for tests).
        "REMEDIATE_KUBE_NODE_SELECTOR": ",".join(f"{k}={v}" for k, v in values["agent"]["nodeSelector"].items()),
        "REMEDIATE_POLL_INTERVAL": "0.2",
        "REMEDIATE_KUBE_REQUEST_TIMEOUT": request_timeout,
    }
    server = RemediateServer(
        work, playbooks, env=env, workers=values["server"]["workers"],
        executor_threads=values["server"]["executorThreads"],
    )  # fmt: skip
    return server.start()


def wait_for_node_cache(server: RemediateServer, timeout: float) -> float | None:
    """Seconds (after the warm-up run) until the executor's node cache, which the executor started at its start,
    has its first full view (the server's /readyz shows `node_cache` once it has); None if not within `timeout`.
    The runs measured after it read a warm cache, as every run does once the cache has synced."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        cache = requests.get(f"{server.url}/readyz", timeout=10).json().get("node_cache")
        if cache and cache.get("fresh"):
            return round(time.monotonic() - started, 2)
        time.sleep(0.5)
    return None


def scenario(name: str, size: int, work: Path, sink: WebhookRecorder, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh fleet and a fresh server (a fresh breaker) for one scenario at one size."""
    built = time.monotonic()
    with FakeKubeAPI() as kube:
        nodes = build_fleet(kube, size)
        print(f"  {size} nodes ({len(json.dumps(kube.node(nodes[0]))) / 1000:.1f} KB each as JSON) built in "
              f"{time.monotonic() - built:.1f} s", flush=True)  # fmt: skip
        server = start_server(work / f"{name}-{size}", kube, sink, args.kube_request_timeout)
        try:
            first = measure(server, kube, [("BenchWarm", nodes[-1])], window=0, timeout=args.run_timeout,
                            stop_mib=args.stop_mib, prefix=f"w{size}-")  # fmt: skip
            first["node_cache_synced_s"] = wait_for_node_cache(server, timeout=args.run_timeout)
            if name == "cordon":
                alerts = [("BenchCordon", nodes[0])]
            elif name == "quarantine":
                alerts = [("GPUXidCritical", nodes[0])]
            else:
                alerts = [("GPUXidCritical", n) for n in nodes[: max(1, round(size * STORM_SHARE))]]
            idle = idle_cpu(server)
            storm = name == "storm"
            result = measure(
                server, kube, alerts, window=args.storm_window if storm else 0,
                timeout=args.storm_timeout if storm else args.run_timeout, stop_mib=args.stop_mib,
                prefix=f"{name[0]}{size}-",
            )  # fmt: skip
        finally:
            server.stop()
    return {"first_run": first, "run": result, "executor_idle_cpu_s_per_s": idle}


def line(name: str, size: int, figures: dict[str, Any]) -> str:
    r = figures["run"]
    cordon = r["alert_to_cordoned_s"]
    alert_to_cordon = f"{cordon[0]:.2f} s" if len(cordon) == 1 else (
        f"p50 {c.percentile(cordon, 50):.2f} s, max {cordon[-1]:.2f} s" if cordon else "-"
    )  # fmt: skip
    lists = r["api_requests_by_kind"].get("LIST nodes", 0)
    done = "" if r["finished"] else (" STOPPED: memory" if r["stopped_for_memory"] else " NOT all finished")
    return (
        f"  {name:10} {size:6d} nodes  executor CPU {r['executor_cpu_s']:7.2f} s  server CPU {r['server_cpu_s']:7.2f} s"
        f"  executor peak +{r['executor_peak_growth_mib']:6.0f} MiB (RSS {r['executor_peak_rss_mib']:5.0f})"
        f"  server PSS peak {r['server_peak_pss_mib']:5.0f} MiB  API requests {r['api_requests']:5d}"
        f" ({lists} LIST nodes)  cordoned {r['nodes_cordoned']}  alert->cordoned {alert_to_cordon}"
        f"  runs {r['run_statuses']}{done}"
    )


PLOTTED = (
    ("executor_cpu_s", "executor CPU per run (s)"),
    ("executor_peak_growth_mib", "executor peak memory growth (MiB)"),
    ("server_peak_pss_mib", "server peak PSS (MiB)"),
    ("api_requests", "API requests per run"),
)


def plot(figures: dict[str, Any], path: Path, subtitle: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(18, 4.4))
    sizes = figures["sizes"]
    for ax, (key, label) in zip(axes, PLOTTED, strict=True):
        for name in figures["scenarios"]:
            # A storm's runs do not all finish (or its server is stopped): only its peak memory is per storm.
            if name == "storm" and key != "server_peak_pss_mib":
                continue
            per_run = [
                figures["results"][name][str(n)]["run"][key] / (figures["results"][name][str(n)]["run"]["runs"] or 1)
                for n in sizes
            ]
            if key == "server_peak_pss_mib":  # a peak of the whole window, not a sum: never divided
                per_run = [figures["results"][name][str(n)]["run"][key] for n in sizes]
            ax.plot(sizes, per_run, marker="o", label=name + (" (5% of the nodes)" if name == "storm" else ""))
        if key == "server_peak_pss_mib":
            limit = float(figures["memory_limit"].removesuffix("Mi"))
            ax.axhline(limit, linestyle="--", color="red", label=f"the chart's limit ({figures['memory_limit']})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes in the cluster (~15 KB each)")
        ax.set_ylabel(label)
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Cost against cluster size; {subtitle}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(out: Path, figures: dict[str, Any]) -> None:
    """The figures so far as JSON and the plot, stamped with the commit and the time."""
    from scaling import commit

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures = {"commit": commit(), "taken": stamp, **figures}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{OUT_NAME}.json").write_text(json.dumps(figures, indent=2) + "\n")
    try:
        plot(figures, out / f"{OUT_NAME}.png", f"{figures['machine'].split(',')[0]}, {figures['commit']}, {stamp}, "
             f"load average {figures['load_average']['before']:.1f}")  # fmt: skip
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
    print(f"wrote {out / OUT_NAME}.json and .png", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes up to 1,000 and a 10 s storm; writes to /tmp")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="nodes in the cluster [100,1000,10000]")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="cordon, quarantine, storm [all]")
    parser.add_argument("--storm-window", type=float, default=60.0, help="seconds the storm's alerts span [60]")
    parser.add_argument("--storm-timeout", type=float, default=300.0, help="most seconds a storm may take [300]")
    parser.add_argument("--run-timeout", type=float, default=300.0, help="most seconds one run may take [300]")
    parser.add_argument(
        "--kube-request-timeout",
        default="10s",
        help="the server's kube_request_timeout [10s, the default]: the test API server (Python, one lock) answers "
        "a LIST of 10,000 such nodes more slowly than that on a loaded machine",
    )
    parser.add_argument("--stop-mib", type=float, default=6144, help="kill a server whose executor passes this RSS")
    parser.add_argument("--out", type=Path, default=None, help=f"directory for {OUT_NAME}.json/.png [docs/img]")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(n) for n in args.sizes.split(",")})
    args.scenarios = [s for s in SCENARIOS if s in args.scenarios.split(",")]
    if args.quick:
        args.sizes = [n for n in args.sizes if n <= 1000] or args.sizes[:1]
        args.storm_window = min(args.storm_window, 10.0)
    out = args.out or (Path("/tmp") if args.quick else c.REPO / "docs" / "img")
    values = yaml.safe_load((c.REPO / "helm" / "remediate" / "values.yaml").read_text())
    limit = values["resources"]["limits"]["memory"]  # the server pod's (helm/remediate/values.yaml)

    machine = c.machine_line()
    load_before = os.getloadavg()[0]
    print(f"machine: {machine}; load average before: {load_before:.2f}; the chart's memory limit: {limit}")
    results: dict[str, dict[str, Any]] = {name: {} for name in args.scenarios}
    with c.workspace(keep=args.keep) as work, WebhookRecorder() as sink:
        for size in args.sizes:
            for name in args.scenarios:
                results[name][str(size)] = scenario(name, size, work, sink, args)
                print(line(name, size, results[name][str(size)]), f"(load {os.getloadavg()[0]:.1f})", flush=True)
            # After each size: a run cut short (10,000 nodes take long today) still leaves its figures.
            done = args.sizes[: args.sizes.index(size) + 1]
            save(out, {"machine": machine, "load_average": {"before": load_before, "after": os.getloadavg()[0]},
                       "memory_limit": limit, "sizes": done, "scenarios": args.scenarios,
                       "storm_window_s": args.storm_window,
                       "kube_request_timeout": args.kube_request_timeout, "results": results})  # fmt: skip

    print()
    first, last = str(args.sizes[0]), str(args.sizes[-1])
    print("first run of each server (a dry-run cordon: the Kubernetes client's import and one plan), "
          "executor CPU / peak growth: " + "; ".join(
        f"{n}: {results[args.scenarios[0]][str(n)]['first_run']['executor_cpu_s']:.2f} s / "
        f"+{results[args.scenarios[0]][str(n)]['first_run']['executor_peak_growth_mib']:.0f} MiB, node cache's "
        f"first full view after {results[args.scenarios[0]][str(n)]['first_run']['node_cache_synced_s']} s"
        for n in args.sizes
    ))  # fmt: skip
    if len(args.sizes) > 1:
        print(f"ratios {last} / {first} nodes (target: per-run cost flat within 1.5x):")
        for name in args.scenarios:
            a, b = results[name][first]["run"], results[name][last]["run"]
            ratio = {k: b[k] / a[k] if a[k] else float("nan") for k in ("executor_cpu_s", "api_requests")}
            growth = b["executor_peak_growth_mib"] - a["executor_peak_growth_mib"]
            flat = ratio["executor_cpu_s"] <= 1.5 and ratio["api_requests"] <= 1.5
            print(f"  {name:10} executor CPU {ratio['executor_cpu_s']:.1f}x, "
                  f"API requests {ratio['api_requests']:.1f}x, executor peak growth {growth:+.0f} MiB: "
                  f"{'meets' if flat else 'MISSES'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
