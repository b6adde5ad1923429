"""The server's calls to agents share a bounded pool: connections are kept for a bounded number of agents and a
bounded number per agent, reused between calls; a non-idempotent execute gets a connection of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from remediate.actions.base import InMemoryMemory, StepContext
from remediate.agent.service import AgentService
from remediate.executor.agent_calls import (
    AGENT_CONNECTIONS_PER_HOST,
    AGENT_HOSTS_KEPT,
    AgentConnections,
    AgentRunner,
    StaticAgents,
)
from remediate.executor.dispatch import Dispatch
from remediate.intake.alerts import alert_ref
from tests.support.agent import AGENT_TOKEN, Echo, agent_settings, registry_with, serve_agent

NODES = ("node-a", "node-b", "node-c")


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real agent for each of NODES on loopback: node -> its URL."""
    with ExitStack() as stack:
        urls = {}
        for node in NODES:
            settings = agent_settings(tmp_path / node, node_name=node)
            service = AgentService(settings, registry=registry_with(Echo()), memory=InMemoryMemory())
            stack.callback(service.close)
            urls[node] = stack.enter_context(serve_agent(service, settings))
        yield urls


def ctx_for(node: str) -> StepContext:
    return StepContext(
        run_id=7,
        step_index=0,
        playbook="p",
        target=node,
        alert=alert_ref({"alertname": "A", "labels": {"Hostname": node}}),
        deadline=time.monotonic() + 10,
        memory=InMemoryMemory(),
    )


def made(connections: AgentConnections, url: str) -> int:
    """Connections opened so far to the agent at `url` by the pool (0 when its pool was dropped or never made)."""
    pools = connections.session.get_adapter(url).poolmanager.pools
    host, port = url.removeprefix("http://").split(":")
    # urllib3's RecentlyUsedContainer refuses iteration (not thread-safe): its keys() is the way.
    keys = [key for key in pools.keys() if (key.key_host, key.key_port) == (host, int(port))]  # noqa: SIM118
    return sum(pools[key].num_connections for key in keys)


def test_calls_to_one_agent_reuse_a_kept_connection_and_few_agents_are_kept(agents: dict[str, str]) -> None:
    connections = AgentConnections(hosts=2, per_host=1)
    echo = Echo()
    runners = {node: AgentRunner(node, StaticAgents(agents), AGENT_TOKEN, connections=connections) for node in NODES}

    for _ in range(5):
        assert runners["node-a"].plan(echo, {"word": "hi", "fail": "no", "sleep": 0.0}, ctx_for("node-a"))
    assert made(connections, agents["node-a"]) == 1  # five calls, one connection

    for node in ("node-b", "node-c"):
        runners[node].plan(echo, {"word": "hi", "fail": "no", "sleep": 0.0}, ctx_for(node))
    adapter = connections.session.get_adapter(agents["node-a"])
    # Two agents kept: node-a's (the least recently used) pool and its connection were dropped.
    assert len(adapter.poolmanager.pools) == 2
    assert made(connections, agents["node-a"]) == 0 and made(connections, agents["node-c"]) == 1


def test_a_non_idempotent_execute_goes_on_a_connection_of_its_own(agents: dict[str, str]) -> None:
    connections = AgentConnections()
    echo = Echo()
    runner = AgentRunner("node-b", StaticAgents(agents), AGENT_TOKEN, connections=connections)
    params = {"word": "hi", "fail": "no", "sleep": 0.0}

    runner.plan(echo, params, ctx_for("node-b"))
    assert runner.execute(echo, params, ctx_for("node-b"))["echoed"] == "hi"
    runner.plan(echo, params, ctx_for("node-b"))

    # The plans shared one kept connection; the execute (Echo is not idempotent) used none of the pool's.
    assert made(connections, agents["node-b"]) == 1


def test_the_dispatch_hands_every_runner_the_same_bounded_pool(agents: dict[str, str]) -> None:
    dispatch = Dispatch(directory=StaticAgents(agents), token=AGENT_TOKEN)
    first, second = (dispatch.runner_for(Echo(), node) for node in ("node-a", "node-b"))

    assert isinstance(first, AgentRunner) and isinstance(second, AgentRunner)
    assert first.connections is second.connections is dispatch.connections
    assert (dispatch.connections.hosts, dispatch.connections.per_host) == (AGENT_HOSTS_KEPT, 4)
    adapter = dispatch.connections.session.get_adapter("http://10.0.0.7:9096")
    assert adapter.poolmanager.pools._maxsize == AGENT_HOSTS_KEPT  # type: ignore[attr-defined]
    assert adapter._pool_maxsize == AGENT_CONNECTIONS_PER_HOST  # type: ignore[attr-defined]
