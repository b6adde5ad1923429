"""End to end on a real Slurm cluster with the shipped parts, the whole path a Slurm site runs: dcgm-exporter's
series for the real slurmd's node (a MetricsEndpoint: two GPUs, their temperature and last XID) -> a real
Prometheus evaluating the SHIPPED alertmanager/rules/xid.rules.yml (and dcgm.rules.yml, the normalised series it
reads) -> a real AlertManager -> `remediate serve`
started as a Slurm site starts it (REMEDIATE_SCHEDULERS=slurm, its cluster named by REMEDIATE_SLURM_CONF) with
the SHIPPED gpu-xid-quarantine playbook -> the real slurmctld of tests/support/slurm.py, a real requeueable
`sbatch` job on the node.

Only the waits shrink: the rule's `for` (1m) and `keep_firing_for` (30m) and the proven-healthy check's window
(10m); the expressions, annotations, steps and messages are as shipped. The gate's burn-in (slurm.burnin) skips
itself without the burnin_* settings, as shipped; with them it runs on the real node (gloo on this host's CPUs,
whose model is `cpu`), from this checkout (its `workdir`). `pytest -s` prints the timeline (seconds
from the XID being set) and `sinfo -R` while the node is drained.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.gpu import SimulatedBackend
from tests.support.realsystems import AlertManager, MetricsEndpoint, Prometheus, WebhookRecorder, check_rules
from tests.support.rules import RULES_DIR, rules_of
from tests.support.server import RemediateServer
from tests.support.shipped import burn_in_here, quicken_checks, quicken_gate, shipped_playbook
from tests.support.slurm import SlurmCluster
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

PLAYBOOK = "gpu-xid-quarantine"
GPUS = ("0", "1")
FIRES_AFTER = "2s"  # the shipped `for: 1m`
KEEPS_FIRING = "5s"  # the shipped `keep_firing_for: 30m`
ROOT = Path(__file__).resolve().parents[2]
NOT_CONFIGURED = "no burn-in configured: set burnin_baselines"


@dataclass
class Timeline:
    """Seconds since the XID was set, for each thing seen, in the order seen."""

    started: float = field(default_factory=time.monotonic)
    wall: str = ""
    """The local time it started (as Slurm shows times)."""
    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        self.marks.append((what, round(time.monotonic() - self.started, 1)))

    def show(self) -> str:
        return "\n".join(f"  +{at:6.1f}s  {what}" for what, at in self.marks)


@dataclass
class Site:
    """What a Slurm site runs, started by the `site` fixture."""

    slurm: SlurmCluster
    exporter: MetricsEndpoint
    prometheus: Prometheus
    alertmanager: AlertManager
    server: RemediateServer
    oncall: WebhookRecorder
    gpus: SimulatedBackend
    """The node's GPUs as the re-admission gate (gpu.health, run here: the node is this host) reads them."""

    def series(self, gpu: str) -> dict[str, str]:
        return {"Hostname": self.slurm.host, "gpu": gpu, "UUID": f"GPU-{self.slurm.host}-{gpu}"}

    def set_xid(self, gpu: str, xid: int) -> None:
        self.exporter.set("DCGM_FI_DEV_XID_ERRORS", xid, self.series(gpu))

    def gpu_falls_off_the_bus(self, gpu: str) -> None:
        """Its series are gone from the exporter (no temperature, no XID): Prometheus marks them stale."""
        for metric in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"):
            self.exporter.remove(metric, self.series(gpu))

    def alert_state(self) -> str | None:
        """GPUXidCritical in Prometheus' rule evaluation for this node: pending, firing, or None."""
        for alert in self.prometheus.alerts():
            labels = alert["labels"]
            # The exporter writes `Hostname` here (a release before 4.8.3); the alert carries it as `hostname`.
            if labels["alertname"] == "GPUXidCritical" and labels.get("hostname") == self.slurm.host:
                return str(alert["state"])
        return None

    def in_alertmanager(self) -> bool:
        return any(a["labels"].get("alertname") == "GPUXidCritical" for a in self.alertmanager.alerts())

    def job_field(self, job: int, name: str) -> str:
        return self.slurm.job_field(job, name)

    def drained(self) -> bool:
        return self.slurm.drained(self.slurm.host)


def _fast_rules(directory: Path) -> list[Path]:
    """The shipped dcgm.rules.yml as it is, and xid.rules.yml with `for` 1m -> FIRES_AFTER and `keep_firing_for`
    30m -> KEEPS_FIRING; the expressions, labels and annotations as shipped."""
    rules = rules_of("xid")
    assert {(r["for"], r["keep_firing_for"]) for r in rules} == {("1m", "30m")}
    fast = [{**rule, "for": FIRES_AFTER, "keep_firing_for": KEEPS_FIRING} for rule in rules]
    path = directory / "xid.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "remediate-gpu-xid", "rules": fast}]}, sort_keys=False))
    layer = RULES_DIR / "dcgm.rules.yml"
    check_rules([layer, path])
    return [layer, path]


@pytest.fixture
def burnin() -> dict[str, str]:
    """The site's burn-in settings (REMEDIATE_BURNIN_*): none, as a site starts; a test parametrizes it."""
    return {}


@pytest.fixture
def site(
    burnin: dict[str, str],
    slurm: SlurmCluster,
    tmp_path: Path,
    playbooks_dir: Path,
    recorder: WebhookRecorder,
    start_alertmanager: Callable[..., AlertManager],
    watch_log: Callable[..., None],
) -> Iterator[Site]:
    # The shipped playbook as it is, but for the waits: the proven-healthy check's 2 s of evidence, not 10 minutes,
    # and the re-admission gate's soak of 2 s (a round a second), not 30 minutes.
    playbook = quicken_gate(quicken_checks(shipped_playbook(PLAYBOOK), holds="2s", gives_up=scaled(10)))
    burn_in_here(playbook, ROOT)
    (playbooks_dir / f"{PLAYBOOK}.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    # The node is this host (the cluster's one slurmd): its node steps run in the server, on simulated GPUs.
    gpus = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=len(GPUS)))
    server = RemediateServer(
        tmp_path / "remediate",
        playbooks_dir,
        env={
            **slurm.server_env(),
            "REMEDIATE_NODE_NAME": slurm.host,
            "REMEDIATE_GPU_BACKEND": "simulated",
            "REMEDIATE_GPU_SIMULATOR_FILE": str(gpus.path),
            # On-call and breakfix (a failed gate's hand-off) post to one recorder: their messages differ.
            "REMEDIATE_SINKS": json.dumps(
                {name: {"type": "webhook", "url": recorder.url} for name in ("oncall", "breakfix")}
            ),
            **burnin,
        },
    )
    watch_log("remediate", server)
    alertmanager = start_alertmanager(server.webhook_url, group_wait="1s", group_interval="1s")
    with (
        MetricsEndpoint() as exporter,
        Prometheus(
            tmp_path / "prometheus",
            scrape_targets=[exporter.target],
            rule_files=_fast_rules(tmp_path),
            alertmanager_url=alertmanager.url,
        ) as prometheus,
    ):
        watch_log("prometheus", prometheus)
        running = Site(slurm, exporter, prometheus, alertmanager, server, recorder, gpus)
        for gpu in GPUS:  # what dcgm-exporter shows of a healthy node: a temperature, no XID (0)
            exporter.set("DCGM_FI_DEV_GPU_TEMP", 55, running.series(gpu))
            running.set_xid(gpu, 0)
        prometheus.wait_until_scraping(timeout=scaled(30))
        server.extra_env["REMEDIATE_PROMETHEUS_URL"] = prometheus.url
        server.start()
        try:
            yield running
        finally:
            server.stop()


def _quarantine(site: Site, timeline: Timeline, job: int) -> dict[str, Any]:
    """XID 79 on GPU 1 up to the quarantine run's end: the node drained, its job requeued, on-call told; the
    run."""
    site.set_xid("1", 79)
    timeline.started, timeline.wall = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S")
    wait_until(lambda: site.alert_state() == "firing", scaled(30), interval=0.2, message="GPUXidCritical fired")
    timeline.mark("alert firing (Prometheus)")
    wait_until(site.in_alertmanager, scaled(30), interval=0.2, message="the alert never reached AlertManager")
    timeline.mark("alert in AlertManager")
    wait_until(site.drained, scaled(60), interval=0.2, message="the node was never drained")
    timeline.mark("node drained (scontrol show node)")
    wait_until(lambda: site.slurm.job_state(job) == "PENDING", scaled(30), interval=0.2, message="never requeued")
    timeline.mark("job requeued (PENDING)")
    site.oncall.wait_for(lambda r: "Quarantined" in (r.json or {}).get("message", ""))
    timeline.mark("on-call told: Quarantined ...")
    entry = site.server.wait_for_run(lambda e: e["run"]["phase"] == "firing", status="succeeded", playbook=PLAYBOOK)
    run = site.server.run(entry["run_id"])
    assert entry["target"] == site.slurm.host
    return run


def test_an_xid_drains_the_node_requeues_its_job_and_once_clear_and_proven_healthy_the_node_is_resumed(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    slurm, host = site.slurm, site.slurm.host
    job = slurm.sbatch(host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    timeline = Timeline()
    run = _quarantine(site, timeline, job)

    # Only the Slurm steps of the shipped rung (`schedulers: slurm`): no k8s.* step is even planned.
    assert [(s["action"], s["status"]) for s in run["steps"]] == [
        ("training.checkpoint_node", "succeeded"),  # run here (the node is this host): no training job to save
        ("slurm.drain", "succeeded"),
        ("slurm.requeue", "succeeded"),
        ("notify", "succeeded"),
    ]
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["checkpoint-jobs"]["continue_on_error"] and run["status"] == "succeeded"
    summary = run["alert"]["annotations"]["summary"]
    # The shipped annotation, rendered by Prometheus from the node's own series: which GPU, which XID, what it means.
    assert summary == (
        f"1 GPU(s) on {host} reported a serious XID error: GPU 1 (GPU-{host}-1) XID 79 (the GPU has fallen off the bus)"
    )
    reasons = slurm.reasons()
    whole = slurm.show_node(host).split("Reason=", 1)[1].strip()
    assert f"remediate run {run['id']}: GPUXidCritical" in reasons  # what an operator sees first: `sinfo -R`
    # The per-node alert names no `gpu` label: the reason's note, the shipped summary, names the GPU and its XID.
    gpus = summary.split(": ", 1)[1]  # "GPU 1 (GPU-...) XID 79 (...)": the summary's head left out
    assert f"Reason=remediate run {run['id']}: GPUXidCritical ({gpus})" in slurm.show_node(host)
    assert str(job) in json.dumps(steps["requeue"]["result"])
    told = site.oncall.wait_for(lambda r: "Quarantined" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert message.startswith(f"Quarantined {host}: {summary}."), message
    assert "Drained in Slurm (sinfo -R names this run) and its jobs requeued" in message
    assert "Cordoned" not in message

    # The XID clears (the GPU was reset or replaced): the alert fires on for keep_firing_for, then resolves.
    site.set_xid("1", 0)
    timeline.mark("XID cleared (0)")
    wait_until(lambda: site.alert_state() is None, scaled(60), interval=0.2, message="the alert never resolved")
    timeline.mark("alert resolved (Prometheus)")
    wait_until(lambda: not site.in_alertmanager(), scaled(30), interval=0.2, message="AlertManager kept the alert")
    timeline.mark("alert resolved (AlertManager)")
    # The gate's soak (2 s here) comes on top of proven-healthy's wait: the run's own end is waited for.
    resolved = site.server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)
    site.server.wait_for_run_status(resolved["run_id"], "succeeded", "failed")
    timeline.mark("resolve run done (proven-healthy, gate soak, resume)")
    undo = site.server.run(resolved["run_id"])
    assert [(s["action"], s["status"]) for s in undo["steps"]] == [
        ("check.prometheus", "succeeded"),  # proven-healthy: both GPUs the node reported today report again
        ("gpu.health", "succeeded"),  # the re-admission gate: every soak round healthy
        ("slurm.burnin", "succeeded"),  # ... and its burn-in, skipped: the site configured no baseline
        ("slurm.resume", "succeeded"),
        ("slurm.handoff", "succeeded"),  # `always`, after the gate: it passed, so nothing is handed off
        ("notify", "succeeded"),
    ]
    undone = {s["name"]: s for s in undo["steps"]}
    assert undone["resume"]["result"]["outcome"] == "resumed"
    assert [r["verdict"] for r in undone["gate"]["result"]["soak"]["rounds"]] == ["ok", "ok", "ok"]
    assert undone["slurm-handoff"]["result"]["outcome"] == "not_needed"
    skipped = undone["burnin"]["result"]
    assert (skipped["outcome"], skipped["verdict"]) == ("skipped", "skipped") and NOT_CONFIGURED in skipped["reason"]
    rounds = undone["gate"]["result"]["soak"]["rounds"]
    offsets = ", ".join(f"+{r['at_s']:g}s" for r in rounds)
    timeline.mark(f"(the gate's soak rounds, all ok, at {offsets} of the gate step)")
    assert not site.drained() and f"remediate run {run['id']}" not in slurm.reasons()
    timeline.mark("node resumed")
    told = site.oncall.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    assert "its GPUs report again" in told.json["message"], told.json["message"]
    # On-call reads that no burn-in vouched for the node, and why.
    assert f"NO burn-in ran: {NOT_CONFIGURED}" in told.json["message"], told.json["message"]
    assert "burnin succeeded (skipped)" in told.json["message"], told.json["message"]
    # Slurm starts the requeued job again once its node is back, not before the EligibleTime its requeue set
    # (about 2 minutes on): the test brings that time forward, as an operator in a hurry would.
    begins = site.job_field(job, "EligibleTime")
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(240), interval=0.5, message="the job never ran again")
    timeline.mark("job running again")
    with capsys.disabled():
        print(f"\nsinfo -R while drained:\n{reasons.rstrip()}\nthe whole reason: {whole}")
        print(f"timeline (seconds from XID 79 set on GPU 1 at {timeline.wall}; the job is eligible at {begins}):")
        print(timeline.show())


def test_a_gpu_that_fell_off_the_bus_keeps_the_node_drained_when_the_alert_resolves(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """The XID clears because GPU 1 is gone (no series at all): the alert resolves, but of the two GPUs the node
    reported today one does not report again, so proven-healthy fails and remediate's drain stays."""
    slurm, host = site.slurm, site.slurm.host
    job = slurm.sbatch(host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    timeline = Timeline()
    run = _quarantine(site, timeline, job)

    site.gpu_falls_off_the_bus("1")
    timeline.mark("GPU 1's series gone")
    wait_until(lambda: site.alert_state() is None, scaled(60), interval=0.2, message="the alert never resolved")
    timeline.mark("alert resolved (Prometheus)")
    held = site.server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="failed", playbook=PLAYBOOK)
    timeline.mark("proven-healthy failed: the node stays drained")
    kept = site.server.run(held["run_id"])
    assert [(s["action"], s["status"]) for s in kept["steps"]] == [
        ("check.prometheus", "failed"),
        ("gpu.health", "skipped"),
        ("slurm.burnin", "skipped"),
        ("slurm.resume", "skipped"),
        ("slurm.handoff", "succeeded"),  # the gate did not fail (it never ran): nothing handed off
        ("notify", "succeeded"),
    ]
    assert {s["name"]: s for s in kept["steps"]}["slurm-handoff"]["result"]["outcome"] == "not_needed"
    assert site.drained()
    assert f"Reason=remediate run {run['id']}: GPUXidCritical" in slurm.show_node(host)
    told = site.oncall.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    assert "The node stays out: its GPUs did not all report again" in told.json["message"], told.json["message"]
    with capsys.disabled():
        print(f"\nsinfo -R after the resolution:\n{slurm.reasons().rstrip()}")
        print(f"timeline (GPU 1 off the bus, seconds from its XID 79):\n{timeline.show()}")


def test_a_node_that_fails_the_readmission_gate_stays_drained_is_handed_off_and_on_call_reads_why(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """The XID clears and Prometheus sees both GPUs again (proven-healthy passes), but NVML on the node says GPU 1
    counts volatile double-bit ECC errors: the gate fails, the node stays drained, its reason becomes
    breakfix's (slurm.handoff), and on-call's message names the failing check and its values."""
    slurm, host = site.slurm, site.slurm.host
    job = slurm.sbatch(host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    timeline = Timeline()
    run = _quarantine(site, timeline, job)

    bad = site.gpus.devices()[1]
    healthy = site.gpus.devices()[0]
    section = {"ecc_dbe_volatile": 2, "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}}
    site.gpus.update_device(bad.uuid, health=section)
    site.set_xid("1", 0)
    timeline.mark("XID cleared (0); NVML: GPU 1 counts 2 volatile DBEs")
    held = site.server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", status="failed", playbook=PLAYBOOK)
    timeline.mark("gate failed: the node stays drained")
    kept = site.server.run(held["run_id"])
    assert [(s["action"], s["status"]) for s in kept["steps"]] == [
        ("check.prometheus", "succeeded"),
        ("gpu.health", "failed"),
        ("slurm.burnin", "skipped"),
        ("slurm.resume", "skipped"),
        ("slurm.handoff", "succeeded"),
        ("notify", "succeeded"),
    ]
    steps = {s["name"]: s for s in kept["steps"]}
    evidence = f"GPU 1 ({bad.uuid}): ecc_dbe_volatile: 2 > 0"
    gate = steps["gate"]
    assert evidence in gate["error"] and "soak round 1 of 3" in gate["error"], gate["error"]
    assert gate["result"]["failed"] == [evidence]  # the run keeps every GPU's checks with the failed step
    assert {g["gpu"]: g["verdict"] for g in gate["result"]["gpus"]} == {healthy.uuid: "ok", bad.uuid: "fail"}
    assert steps["slurm-handoff"]["result"]["outcome"] == "handed_off"
    assert site.drained()
    reason = slurm.show_node(host).split("Reason=", 1)[1]
    assert reason.startswith("breakfix: failed the re-admission gate"), reason
    assert f"remediate run {run['id']}: GPUXidCritical" not in reason  # the drain is breakfix's now: never resumed
    told = site.oncall.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert "FAILED the re-admission gate" in message and evidence in message, message
    assert "It is handed to breakfix." in message, message
    ticket = site.oncall.wait_for(lambda r: "failed the re-admission gate" in (r.json or {}).get("message", ""))
    assert evidence in ticket.json["message"]
    with capsys.disabled():
        print(f"\nkept out: on-call reads:\n  {message}\nsinfo -R:\n{slurm.reasons().rstrip()}")
        print(f"timeline (a failed gate, seconds from XID 79 on GPU 1):\n{timeline.show()}")


def _resolve(site: Site, timeline: Timeline) -> dict[str, Any]:
    """The XID clears (Prometheus sees both GPUs again): the resolve run, once it has ended."""
    site.set_xid("1", 0)
    timeline.mark("XID cleared (0)")
    resolved = site.server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook=PLAYBOOK)
    site.server.wait_for_run_status(resolved["run_id"], "succeeded", "failed")
    timeline.mark("resolve run done (proven-healthy, gate soak, burn-in)")
    return site.server.run(resolved["run_id"])


TABLE = {"cpu": 0.0001, "NVIDIA H100 80GB HBM3": 300.0}
"""A site's baselines: gloo's model on this host (`cpu`) at a bar any run of it passes (0.05 to 0.23 GB/s
measured here, docs/slurm.md "Burn-in"), and a GPU model."""


@pytest.mark.parametrize(
    "burnin",
    [{"REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE), "REMEDIATE_BURNIN_PYTHON": sys.executable}],
)
def test_with_baselines_configured_the_gate_burns_the_drained_node_in_on_the_cluster_and_then_resumes_it(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """The site's burnin_* settings, not the playbook, give the shipped gate its table: the burn-in runs on the
    real node (srun --no-allocate, the node still drained), its figure passes the `cpu` baseline, and only then
    is the node resumed."""
    slurm, host = site.slurm, site.slurm.host
    job = slurm.sbatch(host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    timeline = Timeline()
    _quarantine(site, timeline, job)

    undo = _resolve(site, timeline)
    assert [(s["action"], s["status"]) for s in undo["steps"]] == [
        ("check.prometheus", "succeeded"),
        ("gpu.health", "succeeded"),
        ("slurm.burnin", "succeeded"),  # ran on the node, and passed
        ("slurm.resume", "succeeded"),
        ("slurm.handoff", "succeeded"),  # nothing failed: nothing handed off
        ("notify", "succeeded"),
    ]
    steps = {s["name"]: s for s in undo["steps"]}
    burnt = steps["burnin"]["result"]
    assert (burnt["outcome"], burnt["verdict"], burnt["model"], burnt["baseline"]) == ("passed", "pass", "cpu", 0.0001)
    assert burnt["figure"] > 0.0001 and burnt["measurement"]["correct"] is True and burnt["still_drained"] is True
    assert burnt["command"][:3] == [sys.executable, "-m", "remediate.burnin"]
    assert steps["burnin"]["params"]["baselines"] == TABLE  # the site's table, kept with the step it judged
    assert steps["slurm-handoff"]["result"]["outcome"] == "not_needed"
    assert not site.drained() and "remediate run" not in slurm.reasons()
    told = site.oncall.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert "and a burn-in against its GPU model's baseline" in message and "NO burn-in" not in message, message
    with capsys.disabled():
        print(f"\nburn-in on {host}: {burnt['why']} ({burnt['measurement']['seconds_per_iter']:.3g} s per all-reduce)")
        print(f"timeline (a burnt-in gate, seconds from XID 79 on GPU 1):\n{timeline.show()}")


@pytest.mark.parametrize(
    "burnin",
    [
        {
            "REMEDIATE_BURNIN_BASELINES": json.dumps({"NVIDIA H100 80GB HBM3": 300}),
            "REMEDIATE_BURNIN_PYTHON": sys.executable,
        }
    ],
)
def test_a_node_whose_model_the_configured_baselines_do_not_name_fails_the_gate_and_is_handed_off(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table that does not name the model the node reports (`cpu` here) is no proof: the burn-in runs, its figure
    has no baseline, the gate fails, the node stays drained and is handed to breakfix, and on-call reads why."""
    slurm, host = site.slurm, site.slurm.host
    job = slurm.sbatch(host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", scaled(30), message="the job never ran")
    timeline = Timeline()
    run = _quarantine(site, timeline, job)

    kept = _resolve(site, timeline)
    assert kept["status"] == "failed"
    assert [(s["action"], s["status"]) for s in kept["steps"]] == [
        ("check.prometheus", "succeeded"),
        ("gpu.health", "succeeded"),  # the soak passed ...
        ("slurm.burnin", "failed"),  # ... but nothing vouches for the model the burn-in ran on
        ("slurm.resume", "skipped"),
        ("slurm.handoff", "succeeded"),
        ("notify", "succeeded"),
    ]
    steps = {s["name"]: s for s in kept["steps"]}
    burnin = steps["burnin"]
    assert "no baseline for this model" in burnin["error"] and "'cpu'" in burnin["error"], burnin["error"]
    assert (burnin["result"]["verdict"], burnin["result"]["baseline"], burnin["result"]["model"]) == (
        "fail",
        None,
        "cpu",
    )
    assert steps["slurm-handoff"]["result"]["outcome"] == "handed_off"
    assert site.drained()
    reason = slurm.show_node(host).split("Reason=", 1)[1]
    assert reason.startswith("breakfix: failed the re-admission gate"), reason
    assert f"remediate run {run['id']}: GPUXidCritical" not in reason
    told = site.oncall.wait_for(lambda r: "resolved on" in (r.json or {}).get("message", ""))
    message = told.json["message"]
    assert f"FAILED the re-admission gate: burn-in of {host} failed" in message, message
    assert "It is handed to breakfix." in message, message
    ticket = site.oncall.wait_for(lambda r: "failed the re-admission gate" in (r.json or {}).get("message", ""))
    assert f"burnin: burn-in of {host} failed" in ticket.json["message"], ticket.json["message"]
    with capsys.disabled():
        print(f"\nkept out by the burn-in: on-call reads:\n  {message}\nsinfo -R:\n{slurm.reasons().rstrip()}")
