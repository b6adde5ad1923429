"""Fault -> applied command for each shipped training playbook: remediate's part measured, Prometheus's computed.

Measured: a real `remediate serve` running the four shipped training playbooks (loss-spike, loss-nan,
gpu-memory-pressure, training-throughput-drop) and real job processes (tests/support/jobs/plain_job.py with
JSON checkpoints for the rollbacks, batch_job.py with a `Batching` for the batch-size and worker commands), all
on one control root. For each alert: the time from just before the webhook POST (the notification shaped as
AlertManager 0.25 sends it, labels as the shipped rules write them) to the job's acknowledgement of the first
command and of the last (the job's own `acked_at`). Each round uses fresh jobs (cooldowns count per job). The
jobs run longer than the playbooks' `before_alert_s` first, so the rollbacks have checkpoints to go back to.

Computed (not measured): the Prometheus and AlertManager part from the shipped settings: the rule's `for:`
(read from alertmanager/rules/), the scrape and rule evaluation intervals of kube-prometheus-stack (30 s each),
dcgm-exporter's collection interval (30 s) for GPUMemoryPressure, the time the 5 minute rate takes to fall
below half for TrainingThroughputDrop (a drop to a third, as in its unit test: 2.5 min / (1 - 1/3) = 3.75 min),
and the shipped route's group_wait (10 s). Best: every interval aligned; worst: each at its worst.

    .venv/bin/python bench/training_fault_path.py [--rounds 3]    # ~3 minutes (2 of them the jobs' warm-up)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from _common import REPO, machine_line, percentile, workspace

sys.path.insert(0, str(REPO))
from tests.support.processes import JobProcess  # the repository root is on sys.path only now
from tests.support.server import RemediateServer, notification

JOBS = REPO / "tests" / "support" / "jobs"
SCRAPE_INTERVAL, EVALUATION_INTERVAL, GROUP_WAIT, DCGM_INTERVAL = 30.0, 30.0, 10.0, 30.0
RATE_BELOW_HALF = 150.0 / (1 - 1 / 3)  # s: rate(x[5m]) of a counter whose rate drops to a third
WARM_UP = 125.0  # s: > loss-nan's before_alert_s (120): a checkpoint older than that exists


@dataclass(frozen=True)
class Case:
    playbook: str
    alertname: str
    rule_file: str
    signal_lag: tuple[float, float]  # (best, worst) s from the fault to a rule input that shows it
    commands: int  # commands the job acknowledges

    def labels(self, job: str) -> dict[str, str]:
        if self.alertname == "GPUMemoryPressure":  # dcgm-exporter's labels: the job is the pod
            return {
                "severity": "warning",
                "pod": job,
                "namespace": "ml",
                "gpu": "0",
                "Hostname": "127.0.0.1",
                "UUID": "GPU-aaaaaaaa-1111-5222-8333-444444444444",
            }
        severity = "critical" if self.alertname == "TrainingLossNaN" else "warning"
        return {"severity": severity, "training_job": job, "instance": "127.0.0.1:8000", "job": "trainer-metrics"}


CASES = [
    Case("loss-spike", "TrainingLossSpike", "training", (0.0, SCRAPE_INTERVAL), 2),
    Case("loss-nan", "TrainingLossNaN", "training", (0.0, SCRAPE_INTERVAL), 2),
    Case("gpu-memory-pressure", "GPUMemoryPressure", "training-resources", (0.0, DCGM_INTERVAL + SCRAPE_INTERVAL), 1),
    Case(
        "training-throughput-drop",
        "TrainingThroughputDrop",
        "training-resources",
        (RATE_BELOW_HALF, RATE_BELOW_HALF + SCRAPE_INTERVAL),
        1,
    ),
]


def rule_for_seconds(case: Case) -> float:
    rules = yaml.safe_load((REPO / "alertmanager" / "rules" / f"{case.rule_file}.rules.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == case.alertname]
    text = rule["for"]
    return float(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def start_job(case: Case, work: Path, root: Path, job: str) -> JobProcess:
    log = work / f"{job}.log"
    if case.playbook.startswith("loss-"):
        checkpoints = work / f"{job}-checkpoints"
        checkpoints.mkdir()
        return JobProcess(
            log,
            sys.executable,
            str(JOBS / "plain_job.py"),
            "--root",
            str(root),
            "--job",
            job,
            "--checkpoints",
            str(checkpoints),
            "--checkpoint-every",
            "25",
            "--keep",
            "1000",
            "--batch-seconds",
            "0.02",
            "--max-seconds",
            "900",
        )
    return JobProcess(
        log,
        sys.executable,
        str(JOBS / "batch_job.py"),
        "--root",
        str(root),
        "--job",
        job,
        "--workers",
        "4",
        "--batch-seconds",
        "0.02",
        "--max-seconds",
        "900",
    )


def measure(server: RemediateServer, case: Case, job: JobProcess, name: str) -> tuple[float, float]:
    """Seconds from the webhook POST to the job's first and last acknowledgement."""
    payload = notification(
        case.alertname,
        case.labels(name),
        fingerprint=uuid.uuid4().hex[:16],
        starts_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    earlier = {e["run_id"] for e in server.runs(playbook=case.playbook)}
    posted = time.time()
    response = server.post_webhook(payload)
    response.raise_for_status()
    entry = server.wait_for_run(
        lambda e: e["run_id"] not in earlier and e["status"] in ("succeeded", "failed"),
        playbook=case.playbook,
        timeout=300,
    )
    run = server.run(entry["run_id"])
    acks = [e["ack"] for e in job.events("ack")]
    if run["status"] != "succeeded" or len(acks) != case.commands:
        raise SystemExit(
            f"{case.playbook}: run {run['status']}, {len(acks)} acks\n{json.dumps(run, indent=1)}\n"
            f"{job.log_tail()}\n{server.log_tail()}"
        )
    return acks[0]["acked_at"] - posted, acks[-1]["acked_at"] - posted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alerts per playbook, each to a fresh job (default 3)")
    parser.add_argument("--warm-up", type=float, default=WARM_UP, help=f"seconds (default {WARM_UP:g})")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    with workspace(args.keep) as work:
        root, playbooks = work / "control", work / "playbooks"
        root.mkdir()
        playbooks.mkdir()
        for case in CASES:
            (playbooks / f"{case.playbook}.yaml").write_text((REPO / "playbooks" / f"{case.playbook}.yaml").read_text())
        jobs = {(case.playbook, r): f"{case.playbook}-{r}" for case in CASES for r in range(args.rounds)}
        env = {"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)}
        with RemediateServer(work / "remediate", playbooks, env=env) as server:
            by_name = {case.playbook: case for case in CASES}
            processes = {key: start_job(by_name[key[0]], work, root, name) for key, name in jobs.items()}
            try:
                print(
                    f"{len(processes)} jobs started; {args.warm_up:.0f} s warm-up (checkpoints older than "
                    "before_alert_s)",
                    flush=True,
                )
                time.sleep(args.warm_up)
                measured: dict[str, list[tuple[float, float]]] = {c.playbook: [] for c in CASES}
                for r in range(args.rounds):
                    for case in CASES:
                        key = (case.playbook, r)
                        first, last = measure(server, case, processes[key], jobs[key])
                        measured[case.playbook].append((first, last))
                        print(
                            f"{case.playbook:26s} round {r + 1}: webhook -> first ack {first:.2f} s, "
                            f"-> last ack {last:.2f} s",
                            flush=True,
                        )
            finally:
                for process in processes.values():
                    process.stop()

    print()
    print(machine_line())
    print(
        "| playbook | rule `for:` | fault -> alert firing (computed) | group_wait | webhook -> ack, p50 (measured) "
        "| fault -> command applied: best / worst |"
    )
    print("|---|---|---|---|---|---|")
    for case in CASES:
        hold = rule_for_seconds(case)
        lasts = [last for _, last in measured[case.playbook]]
        firsts = [first for first, _ in measured[case.playbook]]
        after = percentile(lasts, 50)
        best = case.signal_lag[0] + hold + GROUP_WAIT + after
        worst = case.signal_lag[1] + EVALUATION_INTERVAL + hold + EVALUATION_INTERVAL + GROUP_WAIT + after
        acked = f"{percentile(firsts, 50):.2f} s" + ("" if case.commands == 1 else f" / {after:.2f} s (both)")
        firing = f"{case.signal_lag[0] + hold:.0f}-{worst - GROUP_WAIT - after:.0f} s"
        print(
            f"| {case.playbook} | {hold:.0f} s | {firing} | {GROUP_WAIT:.0f} s | {acked} "
            f"| {best / 60:.1f} min / {worst / 60:.1f} min |"
        )


if __name__ == "__main__":
    main()
