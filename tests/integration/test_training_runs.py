"""Training playbooks end to end inside remediate: engine guards, executor, store, with real job processes.

Finding 6 (two jobs on one node both get runs with the shipped playbooks), finding 4 (a late
acknowledgement reaches the history), finding 7 (a graceful stop of the server, of its executor or
of the node agent running the step withdraws the outstanding command).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.config.settings import ExecutorSettings, load_settings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import load_playbooks, parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.protocol import CheckpointInfo
from tests.conftest import alert_payload, notification_payload
from tests.support.store_json import run_json_of
from tests.support.training import Jobs, LiveJob
from tests.support.waiting import scaled, wait_until

REPO = Path(__file__).resolve().parents[2]

FAST = ExecutorSettings(poll_interval=0.05)
"""An executor that looks for runs every 50 ms."""


@pytest.fixture
def processes(root: Path) -> Iterator[Jobs]:
    jobs = Jobs(root)
    yield jobs
    jobs.stop()


@pytest.fixture
def registry(root: Path) -> ActionRegistry:
    return default_registry(load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)}))


def starts_at(offset: float) -> str:
    """An alert's startsAt `offset` seconds from now: the checkpoints the jobs saved so far came before it."""
    return datetime.fromtimestamp(time.time() + offset, UTC).isoformat().replace("+00:00", "Z")


def fire(
    engine: Engine, job: str, starts_at: str, alertname: str = "TrainingLossSpike", later: float = 0.0, **labels: str
) -> Any:
    """The alert `alertname` of `job`, received `later` seconds from now."""
    alert = alert_payload(
        alertname,
        labels={"training_job": job, "node": "gpu-node-1", "severity": "warning", **labels},
        starts_at=starts_at,
    )
    result = engine.ingest_body(json.dumps(notification_payload(alert)).encode(), received_at=time.time() + later)
    return result.decisions[0]


# --------------------------------------------------------------------------- finding 6


def test_a_spike_in_a_second_job_on_the_same_node_gets_its_own_run_with_the_shipped_playbook(
    root: Path, processes: Jobs, registry: ActionRegistry, store: Store
) -> None:
    first, second = processes.start("job-a"), processes.start("job-b")
    shipped = load_playbooks(REPO / "playbooks", registry)
    engine = Engine(
        store=store, playbooks=PlaybookSet(p for p in shipped.playbooks if p.name == "loss-spike"), registry=registry
    )
    executor = Executor(store=store, registry=registry, retry_wait_max=0.01)

    a = fire(engine, "job-a", starts_at(0))
    assert a.decision.value == "accepted"
    assert executor.drain() == 1
    b = fire(engine, "job-b", starts_at(30))  # the same node, within job-a's 30 min cooldown
    assert b.decision.value == "accepted", b.reason
    assert executor.drain() == 1
    for decision, job in ((a, first), (b, second)):
        run = run_json_of(store, decision.run_id)
        assert run["status"] == "succeeded", run["error"]
        assert [s["result"]["applied_by_pid"] for s in run["steps"]] == [job.pid, job.pid]
    again = fire(engine, "job-a", starts_at(60))  # job-a itself is still in cooldown
    assert again.decision.value == "cooldown"


def test_a_gradient_norm_spike_makes_the_job_skip_and_the_loss_spike_after_it_rolls_it_back(
    root: Path, processes: Jobs, registry: ActionRegistry, store: Store
) -> None:
    job = processes.start("job-a")
    shipped = load_playbooks(REPO / "playbooks", registry)
    engine = Engine(
        store=store, playbooks=PlaybookSet(p for p in shipped.playbooks if p.name == "loss-spike"), registry=registry
    )
    executor = Executor(store=store, registry=registry, retry_wait_max=0.01)

    norm = fire(engine, "job-a", starts_at(0), "TrainingGradNormSpike")
    assert norm.decision.value == "accepted", norm.reason
    assert executor.drain() == 1
    skipped = run_json_of(store, norm.run_id)
    assert skipped["status"] == "succeeded", skipped["error"]
    (step,) = skipped["steps"]
    assert (step["result"]["applied_by_pid"], step["result"]["batches_skipped"]) == (job.pid, 200)

    # The loss spikes anyway 90 s later: rung 2 within the playbook's 30m cooldown (its own is 1m).
    loss = fire(engine, "job-a", starts_at(90), later=90)
    assert loss.decision.value == "accepted", loss.reason
    assert executor.drain() == 1
    rolled = run_json_of(store, loss.run_id)
    assert rolled["status"] == "succeeded", rolled["error"]
    assert [(s["action"], s["result"]["applied_by_pid"]) for s in rolled["steps"]] == [
        ("training.rollback", job.pid),
        ("training.scale_lr", job.pid),
    ]


# --------------------------------------------------------------------------- finding 4


LATE_PLAYBOOK = {
    "name": "slow-rollback",
    "match": {"alertname": "TrainingLossSpike"},
    "target": "node",
    "steps": [
        {
            "name": "rollback",
            "action": "training.rollback",
            "with": {"checkpoint": "latest", "timeout": 1.5},
            "retries": 0,
            "timeout": "3s",
        },
        {"name": "lower-lr", "action": "training.scale_lr", "with": {"factor": 0.5}, "retries": 0},
    ],
}


def test_a_late_acknowledgement_is_recorded_on_the_step_that_gave_up(
    root: Path, processes: Jobs, registry: ActionRegistry, store: Store
) -> None:
    job = processes.start("job-a", load_delay=2.5)  # claims at once, applies 2.5 s later: after the step gave up
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(LATE_PLAYBOOK, registry)]), registry=registry)
    executor = Executor(store=store, registry=registry, retry_wait_max=0.01, reconcile_interval=0.2, settings=FAST)
    decision = fire(engine, "job-a", starts_at(0))
    executor.start()
    try:
        wait_until(lambda: run_json_of(store, decision.run_id)["status"] == "failed", 10, message="the run failed")
        step = run_json_of(store, decision.run_id)["steps"][0]
        assert "may still be applying it" in step["error"]
        pending = step["result"]["pending"]
        assert pending["job"] == "job-a" and pending["taken"] is True and pending["pid"] == job.pid
        assert pending["command_id"].startswith(f"r{decision.run_id}-s0-")

        wait_until(
            lambda: "late_outcome" in run_json_of(store, decision.run_id)["steps"][0]["result"], 15, message="settled"
        )
    finally:
        executor.stop()
    run = run_json_of(store, decision.run_id)
    late = run["steps"][0]["result"]["late_outcome"]
    assert late["status"] == "applied_late" and late["applied_by_pid"] == job.pid
    assert late["step_after"] == 400 and late["command_id"] == pending["command_id"]
    assert 0 < late["late_by_s"] < 5 and late["claimed_at"] < late["applied_at"]
    assert "late outcome recorded" in run["steps"][0]["error"] and "applied_late" in run["error"]
    assert run["status"] == "failed" and run["steps"][1]["status"] != "succeeded"  # lower-lr never ran
    assert executor.reconcile_pending() == 0  # settled once


# --------------------------------------------------------------------------- finding 7


def test_a_graceful_stop_withdraws_the_outstanding_command_and_ends_the_run(
    root: Path, registry: ActionRegistry, store: Store
) -> None:
    job = LiveJob(root, "job-a").register()  # registered, busy: it does not poll
    playbook = {**LATE_PLAYBOOK, "steps": [{**LATE_PLAYBOOK["steps"][1], "with": {"factor": 0.5, "timeout": 60}}]}
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(playbook, registry)]), registry=registry)
    executor = Executor(store=store, registry=registry, settings=FAST)
    decision = fire(engine, "job-a", starts_at(0))
    executor.start()
    inbox = JobPaths(root, "job-a").inbox
    wait_until(lambda: os.listdir(inbox), 10, message="the command was sent")
    started = time.monotonic()
    executor.stop(timeout=scaled(10))
    assert time.monotonic() - started < 3
    run = run_json_of(store, decision.run_id)
    assert run["status"] == "failed" and "remediate is stopping" in run["error"]
    assert "withdrawn from the inbox before the job took it" in run["steps"][0]["error"]
    assert os.listdir(inbox) == []
    job.control.poll(501)
    assert job.optimizer.param_groups[0]["lr"] == 3e-4
    job.control.close()


def test_a_late_acknowledgement_on_another_node_is_reconciled_through_its_agent(
    root: Path, tmp_path: Path, processes: Jobs, store: Store
) -> None:
    from remediate.actions.base import InMemoryMemory
    from remediate.agent.service import AgentService
    from remediate.executor.agent_calls import StaticAgents
    from remediate.executor.dispatch import Dispatch
    from tests.support.agent import AGENT_TOKEN, agent_settings, serve_agent

    job = processes.start("job-a", load_delay=2.5)
    node_settings = agent_settings(tmp_path / "agent", node_name="gpu-node-1", training_control_root=root)
    service = AgentService(node_settings, registry=default_registry(node_settings), memory=InMemoryMemory())
    elsewhere = tmp_path / "server-root"  # the server's own control root holds no job: only the agent can answer
    elsewhere.mkdir()
    registry = default_registry(load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(elsewhere)}))
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(LATE_PLAYBOOK, registry)]), registry=registry)
    with serve_agent(service, node_settings) as url:
        dispatch = Dispatch(directory=StaticAgents({"gpu-node-1": url}), node_name="server", token=AGENT_TOKEN)
        executor = Executor(store=store, registry=registry, dispatch=dispatch, retry_wait_max=0.01)
        decision = fire(engine, "job-a", starts_at(0))
        assert executor.drain() == 1
        step = run_json_of(store, decision.run_id)["steps"][0]
        assert step["result"]["pending"]["taken"] is True and "of node gpu-node-1)" in step["error"]
        wait_until(lambda: executor.reconcile_pending() == 1, 15, message="the agent's plan reports the late outcome")
    late = run_json_of(store, decision.run_id)["steps"][0]["result"]["late_outcome"]
    assert late["status"] == "applied_late" and late["applied_by_pid"] == job.pid
    assert late["ran_on"].startswith("gpu-node-1 (agent http://127.0.0.1:")


@pytest.mark.integration
def test_sigterm_to_remediate_serve_withdraws_the_outstanding_command(root: Path, tmp_path: Path) -> None:
    """Finding 7 as it was found: the real server (gunicorn) stopped gracefully while a training step waits."""
    import requests

    from tests.support.server import TOKEN, RemediateServer

    job = LiveJob(root, "job-a").register()  # registered, busy: it does not poll
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    step = {**LATE_PLAYBOOK["steps"][1], "with": {"factor": 0.5, "timeout": 60}, "timeout": "90s"}
    (playbooks / "cut.yaml").write_text(json.dumps({**LATE_PLAYBOOK, "name": "cut", "steps": [step]}))
    server = RemediateServer(
        tmp_path / "server",
        playbooks,
        workers=1,
        env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root), "REMEDIATE_NODE_NAME": "gpu-node-1"},
    ).start()
    inbox = JobPaths(root, "job-a").inbox
    try:
        alert = alert_payload("TrainingLossSpike", labels={"training_job": "job-a", "node": "gpu-node-1"})
        answer = requests.post(
            server.webhook_url,
            json=notification_payload(alert),
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=scaled(10),
        )
        assert answer.status_code == 200, answer.text
        wait_until(lambda: os.listdir(inbox), 20, message="the command was sent")
        started = time.monotonic()
        server.stop()
        stopped_after = time.monotonic() - started
    finally:
        server.kill()
    assert stopped_after < 10
    assert os.listdir(inbox) == []
    store = Store.open(server.database_url)
    try:
        run = run_json_of(store, 1)
    finally:
        store.close()
    assert run["status"] == "failed", run
    assert "remediate is stopping" in run["steps"][0]["error"] and "withdrawn" in run["steps"][0]["error"]
    job.control.poll(501)
    assert job.optimizer.param_groups[0]["lr"] == 3e-4
    job.control.close()


# --------------------------------------------------------------------------- finding 7, on a node agent


@pytest.fixture
def node_agent(root: Path, tmp_path: Path) -> Iterator[Any]:
    """A real `remediate agent` (gunicorn) for gpu-node-1, serving the training control root."""
    from tests.support.server import NodeAgent

    agent = NodeAgent(tmp_path / "agent", "gpu-node-1", env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(root)})
    agent.start()
    yield agent
    agent.stop()


def _executor_through(agent: Any, tmp_path: Path, store: Store, playbook: dict[str, Any]) -> tuple[Engine, Executor]:
    """An engine and a started executor whose node steps for gpu-node-1 go to `agent` (the server's own
    control root holds no job: only the agent can reach it)."""
    from remediate.executor.agent_calls import StaticAgents
    from remediate.executor.dispatch import Dispatch
    from tests.support.server import AGENT_TOKEN

    elsewhere = tmp_path / "server-root"
    elsewhere.mkdir()
    registry = default_registry(load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(elsewhere)}))
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(playbook, registry)]), registry=registry)
    dispatch = Dispatch(directory=StaticAgents({"gpu-node-1": agent.url}), node_name="server", token=AGENT_TOKEN)
    executor = Executor(store=store, registry=registry, dispatch=dispatch, settings=FAST)
    return engine, executor


WAITING_PLAYBOOK = {
    **LATE_PLAYBOOK,
    "steps": [{**LATE_PLAYBOOK["steps"][1], "with": {"factor": 0.5, "timeout": 60}, "timeout": "90s"}],
}


@pytest.mark.integration
def test_sigterm_to_the_node_agent_withdraws_the_outstanding_command(
    root: Path, tmp_path: Path, store: Store, node_agent: Any
) -> None:
    """The agent stopped gracefully (SIGTERM) while its training step waits for a job that does not poll."""
    job = LiveJob(root, "job-a").register()  # registered, busy: it does not poll
    engine, executor = _executor_through(node_agent, tmp_path, store, WAITING_PLAYBOOK)
    decision = fire(engine, "job-a", starts_at(0))
    inbox = JobPaths(root, "job-a").inbox
    executor.start()
    try:
        wait_until(lambda: os.listdir(inbox), 20, message="the agent sent the command")
        started = time.monotonic()
        os.kill(node_agent.pid, signal.SIGTERM)  # to the agent's main process, as kubelet does
        wait_until(lambda: not node_agent.running, 10, message="the agent exited")
        stopped_after = time.monotonic() - started
        wait_until(lambda: run_json_of(store, decision.run_id)["status"] == "failed", 10, message="the run ended")
    finally:
        executor.stop()
    assert stopped_after < 10, f"the agent took {stopped_after:.1f}s to stop"
    assert os.listdir(inbox) == []
    step = run_json_of(store, decision.run_id)["steps"][0]
    assert "remediate is stopping" in step["error"] and "withdrawn from the inbox" in step["error"], step
    assert "of node gpu-node-1)" in step["error"]  # the agent's answer, not a lost connection
    job.control.poll(501)
    assert job.optimizer.param_groups[0]["lr"] == 3e-4
    job.control.close()


@pytest.mark.integration
def test_stopping_the_executor_stops_the_step_waiting_on_the_agent(
    root: Path, tmp_path: Path, store: Store, node_agent: Any
) -> None:
    """The server stops (Executor.stop on SIGTERM) while its step waits on the agent: the agent withdraws."""
    job = LiveJob(root, "job-a").register()
    engine, executor = _executor_through(node_agent, tmp_path, store, WAITING_PLAYBOOK)
    decision = fire(engine, "job-a", starts_at(0))
    inbox = JobPaths(root, "job-a").inbox
    executor.start()
    try:
        wait_until(lambda: os.listdir(inbox), 20, message="the agent sent the command")
        started = time.monotonic()
        executor.stop(timeout=scaled(10))
        stopped_after = time.monotonic() - started
    finally:
        executor.stop()
    assert stopped_after < 5, f"the executor took {stopped_after:.1f}s to stop"
    assert os.listdir(inbox) == []
    run = run_json_of(store, decision.run_id)
    assert run["status"] == "failed", run
    assert "remediate is stopping" in run["steps"][0]["error"] and "withdrawn" in run["steps"][0]["error"]
    assert node_agent.running  # only the step was stopped, not the agent
    assert f"call cancel run {decision.run_id} step 0 target gpu-node-1" in node_agent.log_tail(200)
    job.control.poll(501)
    assert job.optimizer.param_groups[0]["lr"] == 3e-4
    job.control.close()


# --------------------------------------------------------------------------- a hung job


CHECKPOINT_NODE_PLAYBOOK = {
    "name": "checkpoint-node",
    "match": {"alertname": "TrainingLossSpike"},
    "target": "node",
    "steps": [
        {
            "name": "checkpoint-all",
            "action": "training.checkpoint_node",
            "with": {"timeout": 2},
            "retries": 0,
            "timeout": "60s",
        }
    ],
}


def _hung_job(root: Path, name: str, silent_s: float) -> LiveJob:
    """A job whose process runs (this test's) but that stopped polling `silent_s` seconds ago."""
    hung = LiveJob(root, name).register()
    paths = JobPaths(root, name)
    data = json.loads(paths.registration.read_text())
    data["last_poll_at"] = time.time() - silent_s
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)
    return hung


@pytest.mark.parametrize("through_agent", [False, True], ids=["local", "node-agent"])
def test_a_strict_checkpoint_node_step_that_fails_keeps_every_jobs_outcome_in_the_history(
    root: Path, tmp_path: Path, processes: Jobs, store: Store, through_agent: bool
) -> None:
    """The field case: five jobs checkpointed, one hung job (alive, silent 35 s) did not. Before: the hung job
    was listed skipped and the step succeeded (past 30 s of silence), or the step failed with result null
    and the five checkpoints vanished from the history (at 25 s)."""
    from remediate.actions.base import InMemoryMemory
    from remediate.agent.service import AgentService
    from remediate.executor.agent_calls import StaticAgents
    from remediate.executor.dispatch import Dispatch
    from tests.support.agent import AGENT_TOKEN, agent_settings, serve_agent

    pids = {f"job-{i}": processes.start(f"job-{i}").pid for i in range(5)}
    _hung_job(root, "job-hung", 35.0)
    node_settings = agent_settings(tmp_path / "agent", node_name="gpu-node-1", training_control_root=root)
    server_root = tmp_path / "server-root" if through_agent else root
    server_root.mkdir(exist_ok=True)
    registry = default_registry(load_settings(env={"REMEDIATE_TRAINING_CONTROL_ROOT": str(server_root)}))
    engine = Engine(
        store=store, playbooks=PlaybookSet([parse_playbook(CHECKPOINT_NODE_PLAYBOOK, registry)]), registry=registry
    )
    service = AgentService(node_settings, registry=default_registry(node_settings), memory=InMemoryMemory())
    with serve_agent(service, node_settings) as url:
        dispatch = None
        if through_agent:
            dispatch = Dispatch(directory=StaticAgents({"gpu-node-1": url}), node_name="server", token=AGENT_TOKEN)
        executor = Executor(store=store, registry=registry, dispatch=dispatch, retry_wait_max=0.01)
        decision = fire(engine, "job-0", starts_at(0))
        assert executor.drain() == 1

    run = run_json_of(store, decision.run_id)
    assert run["status"] == "failed"
    step = run["steps"][0]
    assert "1 of 6 training job(s) on this node did not checkpoint (5 did): job-hung timed_out" in step["error"]
    result = step["result"]
    assert result is not None, "the failed step's result is missing from the history"
    assert result["outcomes"] == {**{name: "checkpointed" for name in pids}, "job-hung": "timed_out"}
    assert {r["job"]: r["applied_by_pid"] for r in result["checkpointed"]} == pids
    assert [f["job"] for f in result["failed"]] == ["job-hung"] and result["skipped"] == []


# --------------------------------------------------------------------------- control directories


SHIPPED_ROLLBACKS = [
    ("loss-spike", "TrainingLossSpike"),
    ("loss-spike", "TrainingGradNormSpike"),
    ("loss-nan", "TrainingLossNaN"),
]


@pytest.mark.parametrize(("playbook", "rule"), SHIPPED_ROLLBACKS)
def test_each_shipped_rollback_excludes_checkpoints_saved_while_its_rule_was_pending(
    playbook: str, rule: str, registry: ActionRegistry
) -> None:
    import yaml

    from remediate.config.durations import parse_duration

    rules = yaml.safe_load((REPO / "alertmanager" / "rules" / "training.rules.yml").read_text())
    pending = {r["alert"]: r["for"] for group in rules["groups"] for r in group["rules"]}[rule]
    shipped = {p.name: p for p in load_playbooks(REPO / "playbooks", registry).playbooks}[playbook]
    rollback = next(s for s in shipped.every_step() if s.action == "training.rollback")
    assert rollback.params["before_alert_s"] == parse_duration(pending).total_seconds()


def test_the_shipped_loss_spike_playbook_restores_no_checkpoint_saved_during_the_spike_even_without_a_ratio(
    root: Path, registry: ActionRegistry, store: Store
) -> None:
    """The field case: max_loss_ratio=None (the docs' curriculum advice) marked the checkpoint saved during the
    spike good (step 580, loss 2119 vs ~2), and without before_alert_s the rollback restored it."""
    job = LiveJob(root, "job-a", start_step=700)
    job.checkpoints.record(CheckpointInfo(580, 2119.0, True, "/ckpt/580", time.time() - 30))  # the pending minute
    job.start()
    try:
        shipped = load_playbooks(REPO / "playbooks", registry)
        engine = Engine(
            store=store,
            playbooks=PlaybookSet(p for p in shipped.playbooks if p.name == "loss-spike"),
            registry=registry,
        )
        decision = fire(engine, "job-a", starts_at(0))
        assert Executor(store=store, registry=registry, retry_wait_max=0.01).drain() == 1
    finally:
        job.stop()
    run = run_json_of(store, decision.run_id)
    assert run["status"] == "succeeded", run["error"]
    assert run["steps"][0]["result"]["checkpoint"]["step"] == 400 and job.loaded == [400]


def test_the_shipped_rollback_runs_while_the_kubernetes_api_is_down(
    root: Path, processes: Jobs, registry: ActionRegistry, store: Store, tmp_path: Path
) -> None:
    """The owner check of node steps read the node from the API first: with the API down the rollback failed
    at its plan (`retries: 0` in the shipped playbook). A command to a job runs without the check, and says so."""
    from remediate.executor.dispatch import Dispatch
    from remediate.kube import KubeClient
    from remediate.kube.owner import NodeOwners
    from tests.support.fake_apiserver import FakeKubeAPI

    job = processes.start("job-a")
    with FakeKubeAPI() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    # ... and now the API is gone: connections to it are refused.
    client = KubeClient(kubeconfig=kubeconfig, request_timeout=1.0)
    shipped = load_playbooks(REPO / "playbooks", registry)
    engine = Engine(
        store=store, playbooks=PlaybookSet(p for p in shipped.playbooks if p.name == "loss-spike"), registry=registry
    )
    executor = Executor(
        store=store, registry=registry, dispatch=Dispatch(owners=NodeOwners(client)), retry_wait_max=0.01
    )
    try:
        decision = fire(engine, "job-a", starts_at(0))
        assert executor.drain() == 1
    finally:
        client.close()

    run = run_json_of(store, decision.run_id)
    assert run["status"] == "succeeded", run["error"]
    assert [s["result"]["applied_by_pid"] for s in run["steps"]] == [job.pid, job.pid]
    for step in run["steps"]:
        assert step["result"]["owner_check"].startswith(
            "the owner of node gpu-node-1 could not be read: GET nodes/gpu-node-1: "
        )
