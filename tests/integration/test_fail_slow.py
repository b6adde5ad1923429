"""The shipped training-fail-slow ladder through the real engine, executor and SQLite
store, against the test API server (real HTTP, the official client), with a real plain job
(tests/support/jobs/plain_job.py, the quick-start loop) and the notify sinks posting to a local recorder.

Rung 1 only tells on-call, with the evidence from the alert (slow rank, node, GPU, ratio, since). The next
occurrence within holds_for climbs to rung 2: the node the alert's `node` label names is cordoned and tainted
(and no other node), and the job gets `restart`: it saves a checkpoint, acknowledges, exits with status 75,
and started again with --resume (what torchrun --max-restarts does; tests/integration/test_torchrun.py runs
that launcher) it continues from the checkpoint the restart saved. When the alert resolves, the undo verifies
first (check.prometheus; without a Prometheus it fails and the node stays out); when the straggler returns on
the same node, rung 3 cordons, taints and hands the node to breakfix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.config.settings import Settings
from remediate.config.values import Sink
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.kube import OWNER, KubeClient
from remediate.playbooks.loading import load_playbooks
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from remediate.training.protocol import RESTART_EXIT_CODE
from tests.conftest import alert_payload, notification_payload
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.processes import PlainJob, job_starter
from tests.support.realsystems import WebhookRecorder
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled

REPO = Path(__file__).resolve().parents[2]
JOB = "llm-7b"
SLOW, OTHER = "gpu-07", "gpu-08"
LABELS = {"training_job": JOB, "rank": "1", "world_size": "2", "node": SLOW, "gpu": "3", "severity": "warning"}
ANNOTATIONS = {"ratio": "1.43x", "summary": f"Rank 1 of {JOB} on {SLOW} steps 1.43x its job's median rank"}


@pytest.fixture
def spawn(tmp_path: Path, root: Path) -> Iterator[Callable[..., PlainJob]]:
    yield from job_starter(PlainJob, tmp_path, root)


def _occurrence(minute: int) -> bytes:
    alert = alert_payload("TrainingStragglerRank", labels=LABELS, annotations=ANNOTATIONS,
                          starts_at=f"2026-11-27T22:{minute:02d}:00Z", fingerprint="straggler-llm-7b-1")  # fmt: skip
    return json.dumps(notification_payload(alert)).encode()


def _resolved(minute: int) -> bytes:
    alert = alert_payload("TrainingStragglerRank", status="resolved", labels=LABELS, annotations=ANNOTATIONS,
                          starts_at=f"2026-11-27T22:{minute:02d}:00Z", ends_at=f"2026-11-27T22:{minute + 2:02d}:00Z",
                          fingerprint="straggler-llm-7b-1")  # fmt: skip
    return json.dumps(notification_payload(alert)).encode()


@pytest.fixture
def kube(kubeconfig: Path) -> Iterator[KubeClient]:
    """The process's one client, as the server builds it (kube_request_timeout's default), closed after the test
    (its node cache's watch with it)."""
    client = KubeClient(kubeconfig=kubeconfig)
    yield client
    client.close()


def _shipped_ladder(settings: Settings, store: Store, kube: KubeClient) -> tuple[Engine, Executor]:
    """An engine with the shipped training-fail-slow playbook alone, and an executor, on `store`."""
    registry = default_registry(settings, kube)
    playbooks = PlaybookSet(p for p in load_playbooks(REPO / "playbooks", registry).playbooks
                            if p.name == "training-fail-slow")  # fmt: skip
    return Engine(store=store, playbooks=playbooks, registry=registry), Executor(
        store=store, registry=registry, retry_wait_max=0.01
    )


def _again_within_holds_for(engine: Engine, executor: Executor) -> int:
    """Rung 1's occurrence resolves; the same straggler fires again 11 minutes later (after the 10m cooldown,
    within holds_for): the run of rung 2, executed."""
    engine.ingest_body(_resolved(0), received_at=time.time())
    executor.drain()
    second = engine.ingest_body(_occurrence(11), received_at=time.time() + 11 * 60).decisions[0]
    assert second.decision.value == "accepted", second.reason
    assert executor.drain() == 1
    assert second.run_id is not None
    return second.run_id


def test_the_fail_slow_ladder_notifies_then_cordons_taints_the_alerts_node_and_restarts_the_job(
    kube_api: FakeKubeAPI,
    kubeconfig: Path,
    kube: KubeClient,
    root: Path,
    store: Store,
    spawn: Any,
    recorder: WebhookRecorder,
) -> None:
    kube_api.add_node(SLOW)
    kube_api.add_node(OTHER)
    settings = Settings.of(
        kubeconfig=kubeconfig,
        training_control_root=root,
        sinks=(Sink("oncall", "webhook", url=recorder.url), Sink("breakfix", "webhook", url=recorder.url)),
    )
    engine, executor = _shipped_ladder(settings, store, kube)
    job = spawn(JOB, "--checkpoint-every", "5", "--max-seconds", "60")
    (registered,) = job.wait_for("registered")
    job.wait_for("checkpoint")

    # Rung 1: on-call hears the evidence; nothing else changes.
    first = engine.ingest_body(_occurrence(0), received_at=time.time()).decisions[0]
    assert first.decision.value == "accepted", first.reason
    assert executor.drain() == 1
    run = run_json_of(store, first.run_id)
    assert run["status"] == "succeeded", run["error"]
    assert [s["name"] for s in run["steps"]] == ["notify"]
    (message,) = [json.dumps(r.json) for r in recorder.requests]
    for evidence in (JOB, "rank 1", f"node {SLOW}", "GPU 3", "1.43x", "since 2026-11-27T22:00:00Z"):
        assert evidence in message, message
    assert not kube_api.node(SLOW)["spec"].get("unschedulable")
    assert job.proc.poll() is None

    # The same straggler again within holds_for (30m), after the cooldown (10m): rung 2.
    run = run_json_of(store, _again_within_holds_for(engine, executor))
    assert run["rung"] == 2 and run["status"] == "succeeded", run["error"]
    steps = {s["name"]: s for s in run["steps"]}
    assert list(steps) == ["cordon", "taint", "restart", "notify"]
    assert steps["cordon"]["result"]["node"] == steps["taint"]["result"]["node"] == SLOW
    node = kube_api.node(SLOW)
    assert node["spec"]["unschedulable"] is True
    assert {"key": "remediate.io/training-slow", "value": "straggler", "effect": "NoSchedule"} in [
        {k: t[k] for k in ("key", "value", "effect")} for t in node["spec"]["taints"]
    ]
    assert not kube_api.node(OTHER)["spec"].get("unschedulable") and not kube_api.node(OTHER)["spec"].get("taints")
    restart = steps["restart"]["result"]
    assert restart["kind"] == "restart" and restart["applied_by_pid"] == registered["pid"]
    assert restart["exit_code"] == RESTART_EXIT_CODE
    saved = restart["checkpoint"]["step"]
    assert job.proc.wait(scaled(10)) == RESTART_EXIT_CODE  # the job exited for its launcher to restart it
    assert not job.events("final")

    # What the launcher does: the same job again; it resumes from the checkpoint the restart saved.
    again = spawn(JOB, "--checkpoint-every", "5", "--max-seconds", "60", "--resume")
    (resumed,) = again.wait_for("resumed")
    assert resumed["step"] == saved
    (loaded,) = again.events("loaded")
    assert loaded["step"] == saved and loaded["pid"] == registered["pid"]

    # The alert resolves (the job left the node): verify before undo. Without a Prometheus to ask, the check
    # fails and the node stays cordoned and tainted rather than being let back in unverified.
    resolved = engine.ingest_body(_resolved(11), received_at=time.time() + 12 * 60).decisions[0]
    assert executor.drain() == 1
    undo = run_json_of(store, resolved.run_id)
    assert undo["phase"] == "resolved" and undo["status"] == "failed"
    assert undo["steps"][0]["name"] == "job-fast-for-10m" and undo["steps"][0]["status"] == "failed"
    assert all(s["status"] != "succeeded" for s in undo["steps"][1:])  # untaint, uncordon: not done
    assert "prometheus_url" in undo["error"]
    assert kube_api.node(SLOW)["spec"]["unschedulable"] is True

    # Slow on the same node again within an hour: rung 3 keeps it out and hands it to breakfix.
    third = engine.ingest_body(_occurrence(30), received_at=time.time() + 30 * 60).decisions[0]
    assert third.decision.value == "accepted", third.reason
    assert executor.drain() == 1
    run = run_json_of(store, third.run_id)
    assert run["rung"] == 3 and run["status"] == "succeeded", run["error"]
    assert [s["name"] for s in run["steps"]] == ["cordon", "taint", "handoff", "notify"]
    assert kube_api.node(SLOW)["metadata"]["annotations"][OWNER] == "breakfix"
    assert OWNER not in (kube_api.node(OTHER)["metadata"].get("annotations") or {})


def test_a_straggler_away_from_rank_0s_node_is_still_kept_out_and_on_call_is_told_to_restart_the_job_by_hand(
    kube_api: FakeKubeAPI,
    kubeconfig: Path,
    kube: KubeClient,
    tmp_path: Path,
    store: Store,
    recorder: WebhookRecorder,
) -> None:
    # A multi-node job with node-local control roots, alerted by a rule without the shipped rule's control_node
    # (so the restart's run_on falls back to the slow node): rank 0 registered on another node, and the slow
    # node's control root holds no such job (docs/training-protocol.md, "Deployment notes").
    kube_api.add_node(SLOW)
    empty_root = tmp_path / "this-nodes-control-root"
    empty_root.mkdir()
    settings = Settings.of(
        kubeconfig=kubeconfig, training_control_root=empty_root, sinks=(Sink("oncall", "webhook", url=recorder.url),)
    )
    engine, executor = _shipped_ladder(settings, store, kube)
    engine.ingest_body(_occurrence(0), received_at=time.time())
    run = run_json_of(store, _again_within_holds_for(engine, executor))
    assert run["rung"] == 2 and run["status"] == "failed"
    steps = {s["name"]: s for s in run["steps"]}
    assert [(name, s["status"]) for name, s in steps.items()] == [
        ("cordon", "succeeded"), ("taint", "succeeded"), ("restart", "failed"), ("notify", "succeeded")
    ]  # fmt: skip
    assert JOB in steps["restart"]["error"], steps["restart"]["error"]
    assert kube_api.node(SLOW)["spec"]["unschedulable"] is True
    told = json.dumps(recorder.requests[-1].json)
    assert "NOT all done" in told and "restart failed" in told, told
