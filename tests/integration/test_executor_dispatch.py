"""The executor with a Dispatch: node steps of other nodes run on their agent (real HTTP on loopback),
cluster steps and this node's steps run here, and /runs/<id> (run_detail) says where each step ran."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.base import ActionRegistry, InMemoryMemory
from remediate.actions.log import LogAction
from remediate.agent.service import AgentService
from remediate.agentwire.protocol import EXECUTE, STEP_PATHS
from remediate.executor.agent_calls import StaticAgents
from remediate.executor.dispatch import Dispatch
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, notification_payload
from tests.support.agent import AGENT_TOKEN, Echo, agent_settings, serve_agent
from tests.support.realsystems import free_port
from tests.support.service import ServiceProxy
from tests.support.store_json import history_json_of, run_json_of

T0 = 1_767_225_600.0

PLAYBOOK = {
    "name": "echo-on-node",
    "match": {"alertname": "Hot"},
    "target": "node",
    "cooldown": "0s",
    "steps": [
        {"name": "echo", "action": "test.echo", "with": {"word": "{{ labels.word }}"}, "retries": 2},
        {"name": "note", "action": "log", "with": {"message": "echoed on {{ labels.Hostname }}"}},
    ],
}


@pytest.fixture
def node_b(tmp_path: Path) -> Iterator[tuple[str, Echo]]:
    echo = Echo()
    settings = agent_settings(tmp_path / "node-b", node_name="node-b")
    service = AgentService(settings, registry=ActionRegistry([echo]), memory=InMemoryMemory())
    with serve_agent(service, settings) as url:
        yield url, echo


@pytest.fixture
def run_alert(store: Store) -> Callable[..., dict[str, Any]]:
    """run_alert(agents, node=..., word=...) -> the run's detail after the executor drained it."""
    local_echo = Echo()
    registry = ActionRegistry([local_echo, LogAction()])
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, registry)])
    counter = iter(range(1000))

    def run(agents: dict[str, str], *, node: str, word: str = "hello", retries: int = 2) -> dict[str, Any]:
        dispatch = Dispatch(
            directory=StaticAgents(agents), node_name="node-a", token=AGENT_TOKEN, retries=retries, retry_wait_max=0.01
        )
        executor = Executor(store=store, registry=registry, dispatch=dispatch, retry_wait_max=0.01)
        engine = Engine(store=store, playbooks=playbooks, registry=registry)
        payload = notification_payload(
            alert_payload("Hot", labels={"Hostname": node, "word": word}, fingerprint=f"{next(counter):016x}")
        )
        engine.ingest_body(json.dumps(payload).encode(), received_at=T0)
        assert executor.drain() == 1
        run_id = max(r["run_id"] for r in _runs(store))
        return run_json_of(store, run_id)

    run.local_echo = local_echo  # type: ignore[attr-defined]
    return run


def _runs(store: Store) -> list[dict[str, Any]]:
    from remediate.store import HistoryQuery

    entries, _ = history_json_of(store, HistoryQuery(limit=1000))
    return [e for e in entries if e["run_id"] is not None]


def test_a_node_step_for_another_node_runs_on_its_agent_and_the_run_says_where(
    run_alert: Callable[..., dict[str, Any]], node_b: tuple[str, Echo]
) -> None:
    url, remote_echo = node_b

    run = run_alert({"node-b": url}, node="node-b", word="remote")

    assert run["status"] == "succeeded", run
    echo, note = run["steps"]
    assert echo["where"] == "node"
    assert echo["plan"] == {"would_echo": "remote", "remembered": None, "ran_on": f"node-b (agent {url})"}
    assert echo["result"]["echoed"] == "remote"
    assert echo["result"]["ran_on"] == f"node-b (agent {url})"
    assert [c[0] for c in remote_echo.calls] == ["plan", "execute"]
    assert run_alert.local_echo.calls == []  # type: ignore[attr-defined]
    assert "ran_on" not in note["result"]  # a cluster step runs here, as always


def test_a_node_step_for_the_servers_own_node_runs_here(
    run_alert: Callable[..., dict[str, Any]], node_b: tuple[str, Echo]
) -> None:
    url, remote_echo = node_b

    run = run_alert({"node-b": url}, node="node-a", word="local")

    assert run["status"] == "succeeded", run
    assert run["steps"][0]["result"]["ran_on"] == "node-a (server)"
    assert remote_echo.calls == []
    assert [c[0] for c in run_alert.local_echo.calls] == ["plan", "execute"]  # type: ignore[attr-defined]


def test_an_unreachable_agent_fails_the_step_with_that_reason(run_alert: Callable[..., dict[str, Any]]) -> None:
    url = f"http://127.0.0.1:{free_port()}"

    run = run_alert({"node-b": url}, node="node-b", retries=1)

    assert run["status"] == "failed"
    step = run["steps"][0]
    assert step["status"] == "failed"
    assert step["error"].startswith("plan failed: agent of node node-b unreachable (2 tries): agent " + url)
    assert run_alert.local_echo.calls == []  # type: ignore[attr-defined]  # never falls back to this node


def test_an_agent_that_goes_away_after_the_plan_makes_execute_retry_then_fail(
    run_alert: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    echo = Echo()
    settings = agent_settings(tmp_path / "flaky", node_name="node-b")
    service = AgentService(settings, registry=ActionRegistry([echo]), memory=InMemoryMemory())
    with serve_agent(service, settings) as url:
        original_plan = echo.plan

        def plan_then_vanish(params: Any, ctx: Any) -> Any:
            result = original_plan(params, ctx)
            service.actions.clear()  # the agent "forgets" the action: executes now fail with 422
            return result

        echo.plan = plan_then_vanish  # type: ignore[method-assign]
        run = run_alert({"node-b": url}, node="node-b")

    assert run["status"] == "failed"
    step = run["steps"][0]
    assert "does not run on a node agent" in step["error"]
    assert [a["outcome"] for a in step["attempts"]] == ["failed"]  # permanent: not retried


def test_a_retryable_error_on_the_agent_is_retried_by_the_step(
    run_alert: Callable[..., dict[str, Any]], node_b: tuple[str, Echo]
) -> None:
    url, remote_echo = node_b
    calls = {"n": 0}
    original = remote_echo.execute

    def busy_once(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            return original({**params, "fail": "retryable"}, ctx)
        return original(params, ctx)

    remote_echo.execute = busy_once  # type: ignore[method-assign]
    run = run_alert({"node-b": url}, node="node-b")

    assert run["status"] == "succeeded", run
    attempts = run["steps"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["retryable_error", "succeeded"]
    assert f"device busy (on agent {url} of node node-b)" in attempts[0]["error"]


class ForwardThen503(ServiceProxy):
    """A relay in front of one agent that passes every request on and, for an execute, drops the agent's
    answer for a bare 503 of its own (an ingress or sidecar that lost the upstream connection mid-answer)."""

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        answer = super().forward(method, path, headers, body)
        if path == STEP_PATHS[EXECUTE]:
            return 503, {"Content-Type": "text/plain"}, b"upstream connect error or disconnect/reset\n"
        return answer


def test_a_relay_that_forwards_an_execute_then_answers_503_does_not_make_the_agent_run_it_again(
    run_alert: Callable[..., dict[str, Any]], node_b: tuple[str, Echo]
) -> None:
    """The agent ran the step; the server only saw an unsigned 503. Sending it again (the call's own retries,
    then the step's) ran a step that is not idempotent once per try: it is left for a person instead."""
    url, remote_echo = node_b

    with ForwardThen503([url]) as relay:
        run = run_alert({"node-b": relay.url}, node="node-b", word="once", retries=3)

    assert [kind for kind, _, _ in remote_echo.calls] == ["plan", "execute"]
    assert [(path, status) for path, _, status in relay.served] == [
        (STEP_PATHS["plan"], 200),
        (STEP_PATHS[EXECUTE], 200),  # what the agent answered; the relay said 503
    ]
    assert run["status"] == "failed"
    step = run["steps"][0]
    assert [a["outcome"] for a in step["attempts"]] == ["maybe_applied"]
    assert "HTTP 503 from a proxy (not the agent's answer); the step may have run there" in step["error"]


def test_on_a_single_host_a_run_for_another_node_fails_and_nothing_runs_here(store: Store) -> None:
    """Finding 13: without agents, a node step for node-b ran on this host (node-a): wrong GPUs, disks, jobs."""
    from remediate.config.settings import Settings

    echo = Echo()
    registry = ActionRegistry([echo, LogAction()])
    playbooks = PlaybookSet([parse_playbook(PLAYBOOK, registry)])
    dispatch = Dispatch.from_settings(Settings.of(node_name="node-a"))
    executor = Executor(store=store, registry=registry, dispatch=dispatch, retry_wait_max=0.01)
    engine = Engine(store=store, playbooks=playbooks, registry=registry)
    for index, (node, word) in enumerate((("node-b", "other"), ("node-a", "own"))):
        payload = notification_payload(
            alert_payload("Hot", labels={"Hostname": node, "word": word}, fingerprint=f"{index:016x}")
        )
        engine.ingest_body(json.dumps(payload).encode(), received_at=T0)
    assert executor.drain() == 2

    runs = {r["target"]: run_json_of(store, r["run_id"]) for r in _runs(store)}
    other, own = runs["node-b"], runs["node-a"]
    assert other["status"] == "failed"
    step = other["steps"][0]
    assert step["status"] == "failed"
    assert "node 'node-b' is not this host (node_name 'node-a'" in step["error"]
    assert (step["plan"], step["attempts"]) == (None, [])  # refused at plan: never executed, never retried
    assert own["status"] == "succeeded", own
    assert own["steps"][0]["result"]["ran_on"] == "node-a (server)"
    assert [(kind, params["word"]) for kind, params, _ in echo.calls] == [("plan", "own"), ("execute", "own")]


def test_a_run_on_step_runs_on_the_agent_of_the_node_its_label_names_the_others_on_the_target(
    store: Store, tmp_path: Path
) -> None:
    """The fail-slow ladder's target is the slow rank's node, but its restart must reach rank 0's
    node (`control_node`), where the job registered: a `run_on` step goes to that node's agent (whose check
    "a step for another node" passes: the step names that node), the run's other node steps to the target's."""
    echoes = {node: Echo() for node in ("node-a", "node-c")}
    playbook = {
        **PLAYBOOK,
        "steps": [
            {"name": "before", "action": "test.echo", "with": {"word": "before"}},
            {
                "name": "restart",
                "action": "test.echo",
                "with": {"word": "restart"},
                "run_on": {"labels": ["control_node"]},
            },
            {"name": "after", "action": "test.echo", "with": {"word": "after"}},
        ],
    }
    registry = ActionRegistry([Echo(), LogAction()])
    engine = Engine(store=store, playbooks=PlaybookSet([parse_playbook(playbook, registry)]), registry=registry)
    with contextlib.ExitStack() as stack:
        urls = {}
        for node, echo in echoes.items():
            settings = agent_settings(tmp_path / node, node_name=node)
            service = AgentService(settings, registry=ActionRegistry([echo]), memory=InMemoryMemory())
            urls[node] = stack.enter_context(serve_agent(service, settings))
        dispatch = Dispatch(directory=StaticAgents(urls), node_name="server", token=AGENT_TOKEN, retry_wait_max=0.01)
        executor = Executor(store=store, registry=registry, dispatch=dispatch, retry_wait_max=0.01)
        labels = {"Hostname": "node-a", "control_node": "node-c"}
        engine.ingest_body(
            json.dumps(notification_payload(alert_payload("Hot", labels=labels))).encode(), received_at=T0
        )
        assert executor.drain() == 1

    (entry,) = _runs(store)
    run = run_json_of(store, entry["run_id"])
    assert (run["status"], run["target"]) == ("succeeded", "node-a"), run
    assert [(s["name"], s["node"]) for s in run["steps"]] == [("before", None), ("restart", "node-c"), ("after", None)]
    assert [s["result"]["ran_on"] for s in run["steps"]] == [
        f"node-a (agent {urls['node-a']})",
        f"node-c (agent {urls['node-c']})",
        f"node-a (agent {urls['node-a']})",
    ]
    ran = {
        node: [(kind, params["word"], ctx.target) for kind, params, ctx in echo.calls] for node, echo in echoes.items()
    }
    assert ran == {
        "node-a": [("plan", "before", "node-a"), ("execute", "before", "node-a"),
                   ("plan", "after", "node-a"), ("execute", "after", "node-a")],
        "node-c": [("plan", "restart", "node-c"), ("execute", "restart", "node-c")],
    }  # fmt: skip
