"""Fault -> quarantine latency of the node-local GPU fault path beside the Prometheus path's figure.

Measured: a simulated XID (the simulator's event file, read through the same `open_events` interface as
NVML) on a real `remediate agent` -> `POST /api/v2/alerts` to a real AlertManager 0.25 running the shipped
alertmanager/alertmanager.yml (its source="nvml" route) -> a real `remediate serve` running the shipped
playbooks/gpu-xid-quarantine.yaml -> the node cordoned on the test Kubernetes API server. One fault per node
(the playbook's cooldown allows one run per node), a fresh agent per node, started before the clock starts.
The time is from just before the event is written to the moment the API server applied the cordon.

Computed (not measured): the Prometheus path, dcgm-exporter -> Prometheus -> the shipped GPUXidCritical rule
(`for: 1m`) -> AlertManager (the shipped route's group_wait 10s) -> remediate, from those intervals.

    .venv/bin/python bench/gpu_fault_path.py [--faults 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import yaml
from _common import REPO, machine_line, percentile, workspace

sys.path.insert(0, str(REPO))
from tests.support.fake_apiserver import FakeKubeAPI, cluster  # the repository root is on sys.path only now
from tests.support.realsystems import ShippedAlertManager, WebhookRecorder
from tests.support.server import NodeAgent, RemediateServer

PLAYBOOK = "gpu-xid-quarantine"

# The Prometheus path's intervals (seconds): dcgm-exporter's default collection interval (-c 30000 ms), the
# scrape and rule evaluation intervals of kube-prometheus-stack (30s each), the shipped rule's `for:`, and the
# shipped route's group_wait.
EXPORTER_INTERVAL, SCRAPE_INTERVAL, EVALUATION_INTERVAL, GROUP_WAIT = 30.0, 30.0, 30.0, 10.0


def rule_for_seconds() -> float:
    rules = yaml.safe_load((REPO / "alertmanager" / "rules" / "xid.rules.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GPUXidCritical"]
    text = rule["for"]
    return float(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def prometheus_path(after_alert: float) -> tuple[float, float]:
    """(best, worst) fault -> cordon on the Prometheus path: every interval aligned, or each at its worst
    (the `for:` is judged at evaluations, so it may need one more); plus remediate's own part, as measured."""
    hold = rule_for_seconds()
    best = hold + GROUP_WAIT + after_alert
    worst = EXPORTER_INTERVAL + SCRAPE_INTERVAL + EVALUATION_INTERVAL + hold + EVALUATION_INTERVAL + GROUP_WAIT
    return best, worst + after_alert


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20, help="faults, one per node (default 20)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    with workspace(args.keep) as work, FakeKubeAPI() as kube, WebhookRecorder() as sink:
        nodes = cluster(kube, max(40, 2 * args.faults))
        playbooks = work / "playbooks"
        playbooks.mkdir()
        (playbooks / f"{PLAYBOOK}.yaml").write_text((REPO / "playbooks" / f"{PLAYBOOK}.yaml").read_text())
        env = {
            "REMEDIATE_KUBECONFIG": str(kube.write_kubeconfig(work / "kubeconfig")),
            "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": sink.url}}),
            # Each fault is on another node: the breaker (a storm guard) must not be what is measured.
            "REMEDIATE_BREAKER_MAX_NODES": "1000",
            "REMEDIATE_BREAKER_MAX_FRACTION": "1.0",
        }
        server = RemediateServer(work / "remediate", playbooks, env=env).start()
        am = ShippedAlertManager(work / "alertmanager", server.webhook_url, token=server.token).start()
        seconds, alert_to_cordon = [], []
        try:
            for index in range(args.faults):
                node = nodes[index]
                agent = NodeAgent(
                    work / f"agent-{index}", node, env={"REMEDIATE_GPU_EVENTS_ALERTMANAGER_URL": am.url}
                ).start()
                try:
                    uuid = agent.gpus.devices()[index % 4].uuid
                    started = time.monotonic()
                    agent.gpus.inject_event(uuid, xid=79)
                    while not kube.changes_of("cordon", node):
                        if time.monotonic() - started > 120:
                            raise SystemExit(f"{node}: not cordoned in 120 s\n{server.log_tail()}\n{agent.log_tail()}")
                        time.sleep(0.005)
                    cordoned = kube.changes_of("cordon", node)[0].at
                    seconds.append(cordoned - started)
                    received = [e for e in server.history(playbook=PLAYBOOK) if e["target"] == node]
                    alert_to_cordon.append(_after_receipt(received, cordoned, started))
                    in_remediate = alert_to_cordon[-1]
                    print(
                        f"fault {index + 1:2d} on {node}: cordoned after {seconds[-1]:.2f} s"
                        + ("" if in_remediate is None else f" (webhook received -> cordoned {in_remediate:.2f} s)"),
                        flush=True,
                    )
                finally:
                    agent.stop()
        finally:
            am.stop()
            server.stop()

    p50, p99 = percentile(seconds, 50), percentile(seconds, 99)
    after = percentile([s for s in alert_to_cordon if s is not None] or [float("nan")], 50)
    best, worst = prometheus_path(after)
    print()
    print(machine_line())
    print(f"node-local path, {len(seconds)} faults: fault -> node cordoned p50 {p50:.2f} s, p99 {p99:.2f} s, "
          f"max {max(seconds):.2f} s (goal p99 <= 5 s: {'meets' if p99 <= 5 else 'MISSES'})")  # fmt: skip
    print(f"  of which remediate (webhook received -> cordoned), p50: {after:.2f} s")
    print(f"Prometheus path (computed: exporter {EXPORTER_INTERVAL:g} s, scrape {SCRAPE_INTERVAL:g} s, evaluation "
          f"{EVALUATION_INTERVAL:g} s, for: {rule_for_seconds():g} s, group_wait {GROUP_WAIT:g} s, + remediate's "
          f"part): {best:.0f} s at best, {worst:.0f} s at worst")  # fmt: skip


def _after_receipt(entries: list[dict], cordoned: float, started: float) -> float | None:
    """Webhook receipt -> cordon, from the history entry's time (wall clock) and the monotonic clock now."""
    if not entries:
        return None
    wall_now, mono_now = time.time(), time.monotonic()
    received_mono = float(entries[-1]["time"]) - wall_now + mono_now
    return cordoned - received_mono if received_mono >= started else None


if __name__ == "__main__":
    main()
