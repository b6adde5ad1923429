"""slurm.drain and slurm.resume against a real slurmctld and slurmd (tests/support/slurm.py): the reason an
operator reads in `sinfo -R`, one change however often a step runs, a person's drain never taken over nor
resumed, scope, node names that never reach a command line, slurmctld down, and plans that change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from remediate.actions.base import InMemoryMemory
from remediate.actions.slurm.common import SlurmNodeOutOfScope
from remediate.breaker import BreakerLimits, BreakerOpen, CircuitBreaker, memory_breaker
from remediate.errors import ActionError, ParamsError, RetryableActionError
from remediate.slurm import REASON_MAX, SlurmUnavailable
from tests.support.slurm import SlurmCluster, slurm_actions, step_context
from tests.support.steps import run


@pytest.fixture
def actions(slurm: SlurmCluster) -> dict[str, Any]:
    return slurm_actions(slurm)


def test_drain_sets_a_reason_an_operator_reads_in_sinfo_and_scontrol(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    ctx = step_context("gpu-01", labels={"gpu": "3"}, breaker=breaker)
    result = run(actions["slurm.drain"], {"note": "xid 79"}, ctx)
    reason = "remediate run 42: GPUXidCritical GPU 3 (xid 79)"
    assert result["outcome"] == "drained" and result["reason"] == reason
    assert "gpu-01" in result["breaker"]["held_nodes"]
    print("sinfo -R:\n" + slurm.run("sinfo", "-R").stdout + "sinfo -R -o '%60E %9u %N':\n" + slurm.reasons())
    assert slurm.reasons().split() == [*reason.split(), "root", "gpu-01"]
    shown = slurm.show_node("gpu-01")
    assert "+DRAIN" in shown and f"Reason={reason} [root@" in shown


def test_a_drain_run_twice_changes_the_node_once(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    drain = actions["slurm.drain"]
    first = run(drain, {}, step_context("gpu-02", breaker=breaker))
    changed_at = slurm.client().node("gpu-02").reason_changed_at
    again = run(drain, {}, step_context("gpu-02", breaker=breaker))
    assert (first["outcome"], again["outcome"], again.get("earlier")) == ("drained", "drained", "drained already")
    assert slurm.client().node("gpu-02").reason_changed_at == changed_at  # no second update
    other_run = run(drain, {}, step_context("gpu-02", run_id=43, breaker=breaker))
    assert other_run["outcome"] == "already_drained_by_remediate" and other_run["drained_by_run"] == 42
    assert slurm.client().node("gpu-02").reason == "remediate run 42: GPUXidCritical"


def test_a_drain_set_by_a_person_is_left_alone_and_resume_refuses_it(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    slurm.drain_by_hand("gpu-03", "bad DIMM, ticket 1234")
    before = slurm.node_states()
    ctx = step_context("gpu-03", breaker=breaker)
    plan = actions["slurm.drain"].plan({}, ctx)
    assert plan["can_act"] is False and "bad DIMM, ticket 1234" in plan["why_not"] and "by root" in plan["why_not"]
    result = actions["slurm.drain"].execute({}, ctx)
    assert result["outcome"] == "left_alone"
    assert (result["slurm_reason"], result["set_by"]) == ("bad DIMM, ticket 1234", "root")
    assert breaker.status(7)["held_nodes"] == []  # nothing claimed for a node remediate did not change
    for scope in ("alert", "any"):
        resumed = run(actions["slurm.resume"], {"scope": scope}, ctx)
        assert resumed["outcome"] == "left_alone" and "bad DIMM" in resumed["reason"]
    assert slurm.node_states() == before
    assert "bad DIMM, ticket 1234" in slurm.reasons()


def test_a_node_a_person_set_down_keeps_their_reason(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    slurm.run("scontrol", "update", "NodeName=gpu-06", "State=DOWN", "Reason=dead PSU")
    try:
        result = run(actions["slurm.drain"], {}, step_context("gpu-06", breaker=breaker))
        assert result["outcome"] == "left_alone" and "out of service (down) by root" in result["reason"]
        node = slurm.client().node("gpu-06")
        assert (node.state, node.drained, node.reason) == ("down", False, "dead PSU")
    finally:
        slurm.run("scontrol", "update", "NodeName=gpu-06", "State=RESUME")


def test_resume_undoes_only_the_drain_remediate_made_for_the_alert(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    memory = InMemoryMemory()  # the store's, shared by the firing run and the resolved run
    run(actions["slurm.drain"], {}, step_context("gpu-04", run_id=50, breaker=breaker, memory=memory))
    assert breaker.status(7)["held_nodes"] == ["gpu-04"]
    other_alert = step_context("gpu-04", run_id=51, fingerprint="0ther", breaker=breaker, memory=memory)
    refused = run(actions["slurm.resume"], {}, other_alert)
    assert refused["outcome"] == "left_alone" and "another alert" in refused["reason"]
    no_record = step_context("gpu-04", run_id=51, breaker=breaker)  # a memory that never saw the drain
    assert "no record" in run(actions["slurm.resume"], {}, no_record)["reason"]
    assert slurm.client().node("gpu-04").drained

    resolved = step_context("gpu-04", run_id=52, breaker=breaker, memory=memory)
    result = run(actions["slurm.resume"], {}, resolved)
    assert result["outcome"] == "resumed" and result["drained_by_run"] == 50 and result["breaker_released"]
    node = slurm.client().node("gpu-04")
    assert not node.drained and node.reason == ""
    assert breaker.status(7)["held_nodes"] == []
    assert run(actions["slurm.resume"], {}, resolved)["reason"] == "not drained: nothing to undo"

    # scope: any resumes remediate's drain of another alert, and still never a person's.
    run(actions["slurm.drain"], {}, step_context("gpu-04", run_id=53, breaker=breaker))
    assert run(actions["slurm.resume"], {"scope": "any"}, other_alert)["outcome"] == "resumed"


def test_a_node_outside_the_configured_partitions_is_refused(slurm: SlurmCluster, breaker: CircuitBreaker) -> None:
    scoped = slurm_actions(slurm, partitions=("train",))
    before = slurm.node_states()
    ctx = step_context("gpu-05", breaker=breaker)  # in `debug`
    for call in (scoped["slurm.drain"].plan, scoped["slurm.drain"].execute):
        with pytest.raises(SlurmNodeOutOfScope, match=r"gpu-05 \(from label Hostname\) is out of scope.*debug.*train"):
            call({}, ctx)
    assert slurm.node_states() == before and breaker.status(7)["held_nodes"] == []
    assert run(scoped["slurm.drain"], {}, step_context("gpu-01", breaker=breaker))["outcome"] == "drained"
    # The breaker's fraction counts the nodes in scope: this host and gpu-01 .. gpu-04.
    assert scoped["slurm.drain"].plan({}, step_context("gpu-02", breaker=breaker))["breaker"]["cluster_nodes"] == 5
    # Resume is never refused by scope: a drain made before the scope changed still comes back.
    unscoped = slurm_actions(slurm)
    memory = InMemoryMemory()
    run(unscoped["slurm.drain"], {}, step_context("gpu-06", run_id=60, breaker=breaker, memory=memory))
    resumed = run(scoped["slurm.resume"], {}, step_context("gpu-06", run_id=61, breaker=breaker, memory=memory))
    assert resumed["outcome"] == "resumed"


def test_an_unknown_node_is_a_plan_error_naming_the_name_and_where_it_came_from(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    ctx = step_context("gpu-99", breaker=breaker)
    for name in ("slurm.drain", "slurm.resume"):
        with pytest.raises(ActionError, match=r"node 'gpu-99' \(from label Hostname\) is not a node of the Slurm"):
            actions[name].plan({}, ctx)
    with pytest.raises(ActionError, match=r"node 'gpu-98' \(from param node\)"):
        actions["slurm.drain"].plan({"node": "gpu-98"}, ctx)


def test_a_fully_qualified_host_name_finds_the_node_by_its_short_name(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    """dcgm-exporter's Hostname is often the FQDN; Slurm's NodeName the short name: one target."""
    ctx = step_context("gpu-01.cluster.example", breaker=breaker)
    assert run(actions["slurm.drain"], {}, ctx)["node"] == "gpu-01"
    assert "remediate run 42" in slurm.show_node("gpu-01")
    unknown = step_context("gpu-99.cluster.example", breaker=breaker)
    with pytest.raises(ActionError, match=r"no NodeName or NodeHostName 'gpu-99.cluster.example' or 'gpu-99'"):
        actions["slurm.drain"].plan({}, unknown)


@pytest.mark.parametrize(
    "label", ["gpu-01;scontrol shutdown", "$(reboot)", "gpu-[01-04]", "gpu-01,gpu-02", "gpu-01 State=DOWN", "-h"]
)
def test_a_label_that_is_not_one_node_name_never_reaches_a_command_line(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker, label: str
) -> None:
    before = slurm.node_states()
    ctx = step_context(label, breaker=breaker)
    for name in ("slurm.drain", "slurm.resume"):
        for call in (actions[name].plan, actions[name].execute):
            with pytest.raises(ActionError, match=r"node name from label Hostname .* not a single Slurm node name"):
                call({"scope": "any"} if name == "slurm.resume" else {}, ctx)
    with pytest.raises(ParamsError, match="not a single Slurm node name"):
        actions["slurm.drain"].validate({"node": label})
    assert slurm.node_states() == before  # `gpu-[01-04]` would have drained four nodes


def test_slurmctld_stopped_fails_the_step_retryable_and_changes_nothing(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    before = slurm.node_states()
    slurm.stop_controller()
    ctx = step_context("gpu-01", breaker=breaker)
    for call in (actions["slurm.drain"].plan, actions["slurm.drain"].execute, actions["slurm.resume"].execute):
        with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller") as caught:
            call({"scope": "alert"}, ctx)
        assert isinstance(caught.value, RetryableActionError)
    assert breaker.status(7)["held_nodes"] == []
    slurm.start_controller()
    assert slurm.node_states() == before
    assert actions["slurm.drain"].execute({}, ctx)["outcome"] == "drained"  # the executor's retry


def test_the_plans_change_nothing(slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker) -> None:
    memory = InMemoryMemory()
    ctx = step_context("gpu-01", breaker=breaker, memory=memory)
    before = slurm.node_states()
    plan = actions["slurm.drain"].plan({"note": "xid 79"}, ctx)
    assert plan["would"] == "drain the node with reason 'remediate run 42: GPUXidCritical (xid 79)'"
    assert plan["current"]["state"].startswith("IDLE") and plan["current"]["reason"] is None
    assert plan["breaker"]["would_be"].startswith("allowed")
    assert actions["slurm.resume"].plan({"scope": "alert"}, ctx)["would"] == "not drained: nothing to undo"
    assert slurm.node_states() == before and breaker.status(7)["held_nodes"] == [] and memory.values == {}

    actions["slurm.drain"].execute({}, ctx)
    drained = slurm.node_states()
    assert actions["slurm.drain"].plan({}, ctx)["would"] == "nothing: drained already"
    assert actions["slurm.resume"].plan({"scope": "alert"}, ctx)["would"].startswith("resume: run 42 of remediate")
    assert slurm.node_states() == drained


def test_the_breaker_refuses_a_drain_past_its_cap(slurm: SlurmCluster, actions: dict[str, Any]) -> None:
    breaker = memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=1))
    run(actions["slurm.drain"], {}, step_context("gpu-01", breaker=breaker))
    ctx = step_context("gpu-02", run_id=43, breaker=breaker)
    assert actions["slurm.drain"].plan({}, ctx)["breaker"]["would_be"].startswith("refused")
    with pytest.raises(BreakerOpen):
        actions["slurm.drain"].execute({}, ctx)
    assert not slurm.client().node("gpu-02").drained


def test_the_reason_keeps_to_safe_characters_and_slurms_length(
    slurm: SlurmCluster, actions: dict[str, Any], breaker: CircuitBreaker
) -> None:
    note = 'xid 79\n"quoted" $(reboot) `id`; a=b ' * 20
    result = run(actions["slurm.drain"], {"note": note}, step_context("gpu-01", breaker=breaker))
    stored = slurm.client().node("gpu-01").reason
    assert stored == result["reason"] and len(stored) <= REASON_MAX and stored.endswith("...")
    assert stored.startswith("remediate run 42: GPUXidCritical (xid 79 _quoted_ _(reboot) _id__ a_b xid 79")
    assert len(slurm.show_node("gpu-01").splitlines()) == 1  # one line: `scontrol -o` stays parseable


def test_a_small_partition_keeps_its_share_where_the_whole_cluster_would_allow_the_drain(
    slurm: SlurmCluster, actions: dict[str, Any]
) -> None:
    # Half of the nodes: 3 of the cluster's 7, 2 of train's 5, 1 of debug's 2 (gpu-05, gpu-06).
    breaker = memory_breaker(BreakerLimits(max_fraction=0.5, max_nodes=100))
    memory = InMemoryMemory()
    drained = run(actions["slurm.drain"], {}, step_context("gpu-05", run_id=70, breaker=breaker, memory=memory))
    assert drained["breaker"]["groups"] == [{"group": "partition debug", "nodes": 2, "held": 1, "recent": 1, "cap": 1}]
    before = slurm.node_states()
    ctx = step_context("gpu-06", run_id=71, breaker=breaker)
    plan = actions["slurm.drain"].plan({}, ctx)["breaker"]
    excess = "2 held / 2 recent of the 2 nodes of partition debug > cap 1"
    assert plan["would_be"] == f"refused: it would trip the breaker ({excess})"
    assert (plan["cluster_nodes"], plan["cap"], plan["held_nodes"]) == (7, 3, ["gpu-05"])  # the cluster: room for 2
    other = actions["slurm.drain"].plan({}, step_context("gpu-01", run_id=72, breaker=breaker))["breaker"]
    assert other["would_be"] == "allowed: 2 of at most 3 nodes held, 1 of at most 2 in partition train"
    with pytest.raises(BreakerOpen, match="would make 2 of the 2 nodes of partition debug held by") as refused:
        actions["slurm.drain"].execute({}, ctx)
    assert "the cap is 1 = min(50% of 2 nodes of partition debug = 1, max_nodes 100)" in str(refused.value)
    assert slurm.node_states() == before and not slurm.client().node("gpu-06").drained
    # The undo is never refused, open breaker or not.
    resumed = run(actions["slurm.resume"], {}, step_context("gpu-05", run_id=73, breaker=breaker, memory=memory))
    assert resumed["outcome"] == "resumed" and breaker.status()["open"] is True
