"""One node, one target, whatever name an alert gives it, and a Slurm hand-off that node steps respect: against
the real slurmctld (tests/support/slurm.py) and a real agent on loopback.

A Slurm node has two names, its NodeName (what scontrol takes, and a job's SLURMD_NODENAME: the step metrics'
`node`) and its NodeHostName (the host: dcgm-exporter's `Hostname`, often fully qualified, and the agent's
name). gpu-06 is given the NodeHostName gpu06-ib here (`scontrol update NodeHostName=`), so the names differ as
on a site whose hosts are named apart from Slurm's nodes. Then: slurm.drain finds the node by either name; a
node step for either name is signed for, and sent to, the agent the agents map knows (its NodeHostName); none
known: the error names every name tried. A node handed to breakfix by Slurm's reason refuses node steps naming
its owner and how it comes back; an undo still runs; with slurmctld away the owner is unknown: a step that
keeps the node in service runs and says so, any other fails retryable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.actions.base import InMemoryMemory
from remediate.agent.service import AgentService
from remediate.config.schedulers import Scheduler
from remediate.errors import ActionError, RetryableActionError
from remediate.executor.dispatch import Dispatch
from remediate.kube.owner import NodeOwnedElsewhere
from remediate.slurm import handoff_reason
from tests.support.agent import Echo, agent_settings, registry_with, serve_agent
from tests.support.slurm import SlurmCluster, slurm_actions, step_context

NODE, HOST = "gpu-06", "gpu06-ib"
HANDED = handoff_reason("breakfix", 42, why="XID 79 still reported after a reset")


class KeepsInService(Echo):
    name = "test.keeps_in_service"
    runs_if_owner_unknown = True


class Undo(Echo):
    name = "test.undo"
    undoes = True


@pytest.fixture
def named_apart(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    slurm.run("scontrol", "update", f"NodeName={NODE}", f"NodeHostName={HOST}")
    yield slurm
    if "slurmctld" not in slurm.procs:
        slurm.start_controller()
    slurm.run("scontrol", "update", f"NodeName={NODE}", f"NodeHostName={NODE}")


UNDO, KEEPS = Undo(), KeepsInService()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[str, Echo]]:
    """The agent of host gpu06-ib (its own name for itself, as `remediate agent` on that host has)."""
    echo = Echo()
    settings = agent_settings(tmp_path, node_name=HOST)
    service = AgentService(settings, registry=registry_with(echo, UNDO, KEEPS), memory=InMemoryMemory())
    with serve_agent(service, settings) as url:
        yield url, echo


def dispatch_for(cluster: SlurmCluster, agents: dict[str, str]) -> Dispatch:
    settings = agent_settings(
        Path("/nonexistent"), node_name=None, agents=agents, schedulers=(Scheduler.SLURM,), slurm_conf=cluster.conf
    )
    return Dispatch.from_settings(settings, slurm=cluster.node_cache())


def test_a_node_step_reaches_the_agent_by_any_name_of_its_node(
    named_apart: SlurmCluster, agent: tuple[str, Echo]
) -> None:
    url, echo = agent
    dispatch = dispatch_for(named_apart, {HOST: url})
    for target in (NODE, HOST, f"{HOST}.cluster.example", f"{NODE}.cluster.example"):
        runner = dispatch.runner_for(echo, target)
        result = runner.execute(echo, {"word": "x"}, step_context(target))
        assert result["echoed"] == "x", target
        assert runner.ran_on == f"{HOST} (agent {url})"
    assert [call[2].target for call in echo.calls] == [HOST] * 4
    # The Slurm step of the same alert acts on the same node, by its NodeName.
    drain = slurm_actions(named_apart)["slurm.drain"]
    plan = drain.plan({}, step_context(f"{HOST}.cluster.example"))
    assert plan["node"] == NODE


def test_a_name_no_agent_has_fails_naming_every_name_tried(named_apart: SlurmCluster) -> None:
    dispatch = dispatch_for(named_apart, {"gpu-01": "http://127.0.0.1:1"})
    with pytest.raises(ActionError) as error:
        dispatch.runner_for(Echo(), f"{HOST}.cluster.example").plan(
            Echo(), {"word": "x"}, step_context(f"{HOST}.cluster.example")
        )
    assert str(error.value) == (
        f"no agent configured for node '{HOST}.cluster.example' (the agents map knows: gpu-01); "
        f"nor for its other names '{HOST}', '{NODE}'"
    )


def test_a_node_handed_off_in_slurm_refuses_node_steps_until_its_owner_resumes_it(
    named_apart: SlurmCluster, agent: tuple[str, Echo]
) -> None:
    url, echo = agent
    named_apart.run("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={HANDED}")
    dispatch = dispatch_for(named_apart, {HOST: url})
    plan = dispatch.runner_for(echo, HOST).plan(echo, {"word": "x"}, step_context(HOST))
    assert plan["can_act"] is False
    assert plan["why_not"].startswith(f"{HOST} is owned by breakfix since ")
    assert plan["why_not"].endswith(
        f": {HANDED}: test.echo refuses to change it until the owner releases it "
        f"(`scontrol update NodeName={NODE} State=RESUME`)"
    )
    with pytest.raises(NodeOwnedElsewhere, match="owned by breakfix"):
        dispatch.runner_for(echo, NODE).execute(echo, {"word": "x"}, step_context(NODE))
    assert dispatch.runner_for(UNDO, HOST).execute(UNDO, {"word": "x"}, step_context(HOST))["echoed"] == "x"
    assert echo.calls == []
    # Resumed by its owner: remediate acts again.
    named_apart.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
    assert dispatch.runner_for(echo, HOST).execute(echo, {"word": "x"}, step_context(HOST))["echoed"] == "x"


def test_with_slurmctld_away_only_a_step_that_keeps_the_node_in_service_runs(
    named_apart: SlurmCluster, agent: tuple[str, Echo]
) -> None:
    url, echo = agent
    dispatch = dispatch_for(named_apart, {HOST: url})
    named_apart.stop_controller()
    with pytest.raises(RetryableActionError, match=f"the owner of node {HOST} could not be read: .*scontrol"):
        dispatch.runner_for(echo, HOST).execute(echo, {"word": "x"}, step_context(HOST))
    assert echo.calls == []
    result = dispatch.runner_for(KEEPS, HOST).execute(KEEPS, {"word": "x"}, step_context(HOST))
    assert result["echoed"] == "x"
    assert "keeps the node in service, so it ran without that check" in result["owner_check"]
