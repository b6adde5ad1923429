"""slurm.* steps through the real engine, executor and SQLite store, against the real slurmctld and slurmd of
tests/support/slurm.py: a firing XID alert drains its node with the run's reason and requeues its jobs, the
resolved alert resumes it (the drain's alert kept in the store's action memory between the two runs), a node a
person drained stays theirs, the breaker refuses the drain past its cap, and a keep-out rung hands its node to a
breakfix sink, which the resolved alert then leaves drained; a burn-in step keeps its figure, baseline and
verdict in the run, and one that fails fails the run."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.breaker import CircuitBreaker, limits_from_settings
from remediate.config.schedulers import Scheduler
from remediate.config.settings import ExecutorSettings, Settings
from remediate.config.values import to_sinks
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import HistoryQuery, Store
from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import WebhookRecorder
from tests.support.slurm import SlurmCluster, xid_playbook
from tests.support.store_json import history_json_of, run_json_of
from tests.support.waiting import wait_until


class Rig:
    def __init__(self, store: Store, engine: Engine, executor: Executor) -> None:
        self.store, self.engine, self.executor = store, engine, executor

    def ingest(self, *alerts: dict[str, Any]) -> None:
        self.engine.ingest_body(json.dumps(notification_payload(*alerts)).encode(), received_at=time.time())

    def wait_idle(self) -> None:
        def idle() -> bool:
            depth = self.store.queue.queue_depth()
            return depth["queued"] == 0 and depth["running"] == 0

        wait_until(idle, 60, interval=0.05, message="runs still queued or running")

    def runs(self) -> list[dict[str, Any]]:
        """GET /runs/<id> of every run, oldest first."""
        entries, _ = history_json_of(self.store, HistoryQuery(limit=100))
        ids = sorted({e["run_id"] for e in entries if e["run_id"] is not None})
        return [run_json_of(self.store, run_id) for run_id in ids]


@pytest.fixture
def make_rig(slurm: SlurmCluster, tmp_path: Any) -> Iterator[Callable[..., Rig]]:
    built: list[Rig] = []

    def make(playbook: str | None = None, **settings_fields: Any) -> Rig:
        settings = Settings.of(
            schedulers=(Scheduler.SLURM,), slurm_conf=slurm.conf, slurm_partitions=("train",), **settings_fields
        )
        # Exactly what the server builds: the process's one Slurm node cache, then the registry on it.
        registry = default_registry(settings, slurm=slurm.node_cache(interval=settings.slurm.poll_interval))
        store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
        limits = limits_from_settings(settings.kube.breaker)
        executor = Executor(
            store=store,
            registry=registry,
            retry_wait_max=0.05,
            breaker=CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=limits),
            settings=ExecutorSettings(threads=2, poll_interval=0.02),
        )
        text = playbook or xid_playbook(retries=2, timeout="60s")
        playbooks = PlaybookSet([parse_playbook(yaml.safe_load(text), registry, source="pb.yaml")])
        engine = Engine(store=store, playbooks=playbooks, registry=registry, on_queued=executor.wake)
        rig = Rig(store, engine, executor)
        built.append(rig)
        executor.start()
        return rig

    yield make
    for rig in built:
        rig.executor.stop()
        rig.store.close()


def xid(node: str, status: str = "firing") -> dict[str, Any]:
    return alert_payload("GPUXidCritical", status=status, labels={"Hostname": node, "gpu": "3", "xid": "79"})


def test_an_xid_alert_drains_and_requeues_and_its_resolution_resumes_the_node(
    slurm: SlurmCluster, make_rig: Callable[..., Rig]
) -> None:
    job = slurm.sbatch(slurm.host, requeue=True)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", 20, interval=0.2, message=f"job {job} running")
    rig = make_rig()
    rig.ingest(xid(slurm.host))
    rig.wait_idle()
    (firing,) = rig.runs()
    assert firing["status"] == "succeeded", firing
    drain, requeue = firing["steps"]
    reason = f"remediate run {firing['id']}: GPUXidCritical GPU 3 (xid 79)"
    assert drain["result"]["outcome"] == "drained" and drain["result"]["reason"] == reason
    assert [j["job_id"] for j in requeue["result"]["requeued"]] == [job]
    print("sinfo -R after the run:\n" + slurm.run("sinfo", "-R").stdout + slurm.reasons())
    assert slurm.reasons().split() == [*reason.split(), "root", slurm.host]
    wait_until(lambda: slurm.job_state(job) == "PENDING", 20, message=f"job {job} back in the queue")

    rig.ingest(xid(slurm.host, status="resolved"))
    rig.wait_idle()
    resolved = rig.runs()[-1]
    assert resolved["status"] == "succeeded", resolved
    (resume,) = resolved["steps"]
    assert resume["result"]["outcome"] == "resumed" and resume["result"]["drained_by_run"] == firing["id"]
    assert not slurm.client().node(slurm.host).drained and slurm.reasons() == ""


def test_a_node_a_person_drained_stays_theirs_through_both_runs(
    slurm: SlurmCluster, make_rig: Callable[..., Rig]
) -> None:
    slurm.drain_by_hand("gpu-02", "burn-in until Friday")
    rig = make_rig()
    rig.ingest(xid("gpu-02"))
    rig.wait_idle()
    rig.ingest(xid("gpu-02", status="resolved"))
    rig.wait_idle()
    firing, resolved = rig.runs()
    assert [s["result"]["outcome"] for s in firing["steps"]] == ["left_alone", "left_alone"]
    assert resolved["steps"][0]["result"]["outcome"] == "left_alone"
    assert "burn-in until Friday" in slurm.reasons()


def test_the_breaker_refuses_the_drain_past_its_cap(slurm: SlurmCluster, make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(breaker_max_nodes=2, breaker_max_fraction=1.0)
    for node in ("gpu-01", "gpu-02"):
        rig.ingest(xid(node))
        rig.wait_idle()
    rig.ingest(xid("gpu-03"))
    rig.wait_idle()
    *held, refused = rig.runs()
    assert [run["status"] for run in held] == ["succeeded", "succeeded"]
    assert refused["status"] == "failed" and "breaker open" in (refused["steps"][0]["error"] or ""), refused
    assert not slurm.client().node("gpu-03").drained
    assert sorted(n.name for n in slurm.client().nodes() if n.drained) == ["gpu-01", "gpu-02"]


KEEP_OUT = """
name: xid-slurm-keep-out
match: {alertname: GPUXidCritical}
target: node
cooldown: 0s
steps:
  - action: slurm.drain
    with: {note: "xid {{ labels.xid }}"}
  - action: slurm.handoff
    with:
      sink: breakfix
      why: "XID {{ labels.xid }} still reported after a reset"
      message: "{{ labels.Hostname }}: {{ run.outcome }}"
on_resolved:
  - action: slurm.resume
"""


def test_a_keep_out_rung_hands_its_node_to_breakfix_and_the_resolution_leaves_it_drained(
    slurm: SlurmCluster, make_rig: Callable[..., Rig]
) -> None:
    with WebhookRecorder(path="/tickets") as sink:
        rig = make_rig(KEEP_OUT, sinks=to_sinks({"breakfix": {"type": "webhook", "url": sink.url}}))
        rig.ingest(xid("gpu-03"))
        rig.wait_idle()
        (firing,) = rig.runs()
        assert firing["status"] == "succeeded", firing
        drain, handoff = firing["steps"]
        reason = f"breakfix: XID 79 still reported after a reset (from remediate run {firing['id']})"
        assert drain["result"]["outcome"] == "drained"
        assert handoff["result"]["outcome"] == "handed_off" and handoff["result"]["reason"] == reason
        (posted,) = sink.requests
        assert posted.json["run_id"] == firing["id"] and posted.json["message"].startswith("gpu-03: ")
        assert "succeeded" in posted.json["message"], posted.json["message"]  # the drain, rendered when the step ran
        node = slurm.client().node("gpu-03")
        assert node.drained and node.reason == reason

        rig.ingest(xid("gpu-03", status="resolved"))
        rig.wait_idle()
        resolved = rig.runs()[-1]
        (resume,) = resolved["steps"]
        assert resume["result"]["outcome"] == "left_alone"
        assert resume["result"]["reason"].startswith(f"left alone: handed to breakfix by run {firing['id']}: ")
        assert slurm.client().node("gpu-03").reason == reason and len(sink.requests) == 1


def burnin_playbook(baseline: float) -> str:
    """Drain, then a burn-in of the node judged against `baseline` (the `cpu` model's): the re-admission's proof."""
    root = Path(__file__).resolve().parents[2]
    with_ = {"python": sys.executable, "workdir": str(root), "megabytes": 4, "iters": 5,
             "baselines": {"cpu": baseline}, "timeout": 120}  # fmt: skip
    steps = [{"action": "slurm.drain", "timeout": "60s"},
             {"action": "slurm.burnin", "with": with_, "timeout": "180s", "retries": 0}]  # fmt: skip
    playbook = {"name": "xid-slurm-burnin", "match": {"alertname": "GPUXidCritical"}, "target": "node",
                "cooldown": "0s", "steps": steps}  # fmt: skip
    return yaml.safe_dump(playbook)


@pytest.mark.parametrize(("baseline", "status", "verdict"), [(0.0001, "succeeded", "pass"), (1e6, "failed", "fail")])
def test_a_burnin_step_keeps_figure_baseline_and_verdict_and_a_failed_one_fails_the_run(
    slurm: SlurmCluster, make_rig: Callable[..., Rig], baseline: float, status: str, verdict: str
) -> None:
    rig = make_rig(burnin_playbook(baseline))
    rig.ingest(xid(slurm.host))
    rig.wait_idle()
    (run,) = rig.runs()
    assert run["status"] == status, run
    drain, burnin = run["steps"]
    result = burnin["result"]
    print(f"\nrun {run['id']} slurm.burnin: {result['figure']} GB/s vs baseline {result['baseline']}: {verdict}")
    assert drain["result"]["outcome"] == "drained" and result["verdict"] == verdict
    assert result["baseline"] == baseline and result["figure"] > 0 and result["still_drained"] is True
    assert slurm.client().node(slurm.host).drained_by_run == run["id"]
