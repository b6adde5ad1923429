"""slurm.handoff against a real slurmctld and slurmd (tests/support/slurm.py) and a real HTTP sink: a node
remediate drained is posted to the sink, then its reason names the owner (`scontrol show node`, `sinfo -R`) and
it stays drained; once only; never a person's drain nor a node in service; from then on slurm.resume and
slurm.requeue leave it and slurm.drain reports it, each naming the owner, and the breaker keeps counting it until
the owner resumes it; a sink that is not configured fails the step before anything is posted or changed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.actions.base import InMemoryMemory, StepContext
from remediate.actions.notify_sink import NotifyAction, SinkNotConfiguredError, unconfigured_sinks
from remediate.actions.slurm import SlurmHandoffAction, SlurmHandoffRefused, SlurmOptions
from remediate.breaker import BreakerLimits, CircuitBreaker, memory_breaker
from remediate.config.schedulers import Scheduler
from remediate.config.settings import Settings
from remediate.config.values import to_sinks
from remediate.errors import ParamsError
from remediate.live import LiveSet
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.slurm import SlurmNodeCache
from tests.support.realsystems import WebhookRecorder
from tests.support.slurm import SlurmCluster, slurm_actions, step_context
from tests.support.steps import run
from tests.support.waiting import wait_until

HANDED = "breakfix: XID 79 still reported after a reset (from remediate run 42)"


@pytest.fixture
def sink() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/tickets") as recorder:
        yield recorder


@pytest.fixture
def cache(slurm: SlurmCluster) -> SlurmNodeCache:
    return slurm.node_cache()


@pytest.fixture
def actions(slurm: SlurmCluster, cache: SlurmNodeCache) -> dict[str, Any]:
    return slurm_actions(slurm, cache=cache)


def handoff_on(cache: SlurmNodeCache, sinks: dict[str, Any]) -> SlurmHandoffAction:
    notify = NotifyAction(to_sinks(sinks))
    return SlurmHandoffAction(lambda: cache, SlurmOptions(), lambda: notify)


@pytest.fixture
def handoff(cache: SlurmNodeCache, sink: WebhookRecorder) -> SlurmHandoffAction:
    return handoff_on(cache, {"breakfix": {"type": "webhook", "url": sink.url}})


def drained(slurm: SlurmCluster, actions: dict[str, Any], node: str, ctx: StepContext) -> None:
    assert run(actions["slurm.drain"], {"note": "xid 79"}, ctx)["outcome"] == "drained"
    assert slurm.client().node(node).drained_by_run == ctx.run_id


def test_a_node_remediate_drained_is_posted_to_the_sink_then_its_reason_names_the_owner(
    slurm: SlurmCluster, actions: dict[str, Any], handoff: SlurmHandoffAction, sink: WebhookRecorder,
    breaker: CircuitBreaker,
) -> None:  # fmt: skip
    ctx = step_context("gpu-01", breaker=breaker)
    drained(slurm, actions, "gpu-01", ctx)
    params = {"sink": "breakfix", "why": "XID 79 still reported after a reset", "message": "take {{ labels.Hostname }}"}
    before = slurm.node_states()

    plan = handoff.plan(handoff.validate(params), ctx)
    assert plan["can_act"] is True and plan["reason"] == HANDED
    assert plan["would"] == f"post to sink breakfix, then set the reason of gpu-01 to {HANDED!r} (it stays drained)"
    assert sink.requests == [] and slurm.node_states() == before

    result = run(handoff, params, ctx)

    assert result["outcome"] == "handed_off" and result["owner"] == "breakfix" and result["reason"] == HANDED
    assert result["drained_by_run"] == 42 and result["resume_with"] == "scontrol update NodeName=gpu-01 State=RESUME"
    (posted,) = sink.requests
    assert posted.json["run_id"] == 42 and posted.json["message"] == "take gpu-01"
    assert posted.json["alert"]["labels"]["Hostname"] == "gpu-01"  # the evidence: the alert as it fired
    shown = slurm.show_node("gpu-01")
    assert "+DRAIN" in shown and f"Reason={HANDED} [root@" in shown
    default = slurm.run("sinfo", "-R", "-h").stdout  # the reason cut at 20 characters: the owner comes first
    wide = slurm.run("sinfo", "-R", "-h", "-o", "%100E %9u %N").stdout
    print(f"sinfo -R after the hand-off:\n{default}{wide}")
    assert default.startswith("breakfix: XID 79 sti ") and wide.split() == [*HANDED.split(), "root", "gpu-01"]
    node = slurm.client().node("gpu-01")
    assert node.handed_to == ("breakfix", 42) and node.drained_by_run is None


def test_a_handoff_run_again_posts_nothing_and_changes_nothing(
    slurm: SlurmCluster, actions: dict[str, Any], handoff: SlurmHandoffAction, sink: WebhookRecorder
) -> None:
    ctx = step_context("gpu-02", breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=9)))
    drained(slurm, actions, "gpu-02", ctx)
    run(handoff, {"sink": "breakfix"}, ctx)
    after = slurm.node_states()
    reason = "breakfix: GPUXidCritical, handed off by playbook gpu-xid-quarantine (from remediate run 42)"
    assert after["gpu-02"][:2] == (True, reason)  # the default `why`: the alert and the playbook

    for again in (ctx, step_context("gpu-02", run_id=43)):  # the same run's retry, a later alert's run
        plan = handoff.plan(handoff.validate({"sink": "breakfix"}), again)
        assert plan["can_act"] is True and plan["would"].startswith("nothing: already handed to breakfix by run 42: ")
        result = run(handoff, {"sink": "breakfix"}, again)
        assert (result["outcome"], result["handed_by_run"], result["slurm_reason"]) == ("already_owned", 42, reason)

    assert len(sink.requests) == 1 and slurm.node_states() == after  # no second post, no second update


def test_a_node_drained_by_a_person_or_not_drained_is_refused_and_nothing_is_posted(
    slurm: SlurmCluster, actions: dict[str, Any], handoff: SlurmHandoffAction, sink: WebhookRecorder
) -> None:
    slurm.drain_by_hand("gpu-03", "bad DIMM, ticket 1234")
    before = slurm.node_states()
    params = handoff.validate({"sink": "breakfix"})
    cases = {
        "gpu-03": r"node gpu-03 is drained by root with reason 'bad DIMM, ticket 1234', not by remediate: not handed",
        "gpu-04": r"node gpu-04 is not drained by remediate \(IDLE.*\): drain it first \(slurm.drain\), then hand",
    }
    for node, why in cases.items():
        ctx = step_context(node)
        plan = handoff.plan(params, ctx)
        assert plan["can_act"] is False and plan["would"] == "nothing"
        with pytest.raises(SlurmHandoffRefused, match=why) as refused:
            handoff.execute(params, ctx)
        assert plan["why_not"] == str(refused.value)
    assert sink.requests == [] and slurm.node_states() == before


def test_a_node_handed_to_one_owner_is_not_handed_to_another(
    slurm: SlurmCluster, actions: dict[str, Any], handoff: SlurmHandoffAction, sink: WebhookRecorder
) -> None:
    ctx = step_context("gpu-01", breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=9)))
    drained(slurm, actions, "gpu-01", ctx)
    run(handoff, {"sink": "breakfix", "owner": "dc-ops"}, ctx)
    after = slurm.node_states()
    with pytest.raises(SlurmHandoffRefused, match=r"handed to dc-ops by run 42: .*not handed to breakfix as well"):
        run(handoff, {"sink": "breakfix"}, step_context("gpu-01", run_id=43))
    assert len(sink.requests) == 1 and slurm.node_states() == after


def test_resume_leaves_a_handed_off_node_to_its_owner_drain_reports_it_and_the_breaker_keeps_counting_it(
    slurm: SlurmCluster, actions: dict[str, Any], handoff: SlurmHandoffAction, cache: SlurmNodeCache,
    breaker: CircuitBreaker,
) -> None:  # fmt: skip
    memory = InMemoryMemory()  # the store's: the drain's alert remembered, as resume's scope alert reads it
    ctx = step_context("gpu-04", breaker=breaker, memory=memory)
    drained(slurm, actions, "gpu-04", ctx)
    run(handoff, {"sink": "breakfix", "why": "XID 79 still reported after a reset"}, ctx)
    after = slurm.node_states()
    note = f"handed to breakfix by run 42: {HANDED!r}"

    for scope in ("alert", "any"):
        resumed = run(actions["slurm.resume"], {"scope": scope}, step_context("gpu-04", breaker=breaker, memory=memory))
        assert resumed["outcome"] == "left_alone" and resumed["breaker_released"] is False
        assert resumed["reason"].startswith(f"left alone: {note}; breakfix has it now and resumes it")
        assert (
            "someone" not in resumed["reason"] and "scontrol update NodeName=gpu-04 State=RESUME" in resumed["reason"]
        )
    plan = actions["slurm.drain"].plan({}, step_context("gpu-04", run_id=43, breaker=breaker))
    assert plan["can_act"] is False and plan["why_not"].startswith(note)
    redrain = run(actions["slurm.drain"], {}, step_context("gpu-04", run_id=43, breaker=breaker))
    assert (redrain["outcome"], redrain["owner"], redrain["handed_by_run"]) == ("left_alone", "breakfix", 42)
    requeue = run(actions["slurm.requeue"], {}, step_context("gpu-04", run_id=43, breaker=breaker))
    assert requeue["outcome"] == "left_alone" and requeue["reason"].startswith(note)
    assert slurm.node_states() == after

    # Still out of service by remediate's doing: the breaker's census and its claim keep counting it.
    wait_until(lambda: cache.nodes()["gpu-04"].reason == HANDED, 10, message="the cache read after the hand-off")
    assert "gpu-04" in cache.census().held
    assert breaker.status(7)["held_nodes"] == ["gpu-04"]
    assert "gpu-04" in actions["slurm.drain"].plan({}, step_context("gpu-01", run_id=44, breaker=breaker))[
        "breaker"]["held_nodes"]  # fmt: skip

    slurm.run("scontrol", "update", "NodeName=gpu-04", "State=RESUME")  # the owner gives it back
    assert run(actions["slurm.drain"], {}, step_context("gpu-04", run_id=45, breaker=breaker))["outcome"] == "drained"


def test_a_sink_that_is_not_configured_fails_the_step_before_any_change(
    slurm: SlurmCluster, actions: dict[str, Any], cache: SlurmNodeCache
) -> None:
    ctx = step_context("gpu-01", breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=9)))
    drained(slurm, actions, "gpu-01", ctx)
    before = slurm.node_states()
    action = handoff_on(cache, {})
    params = action.validate({"sink": "breakfix"})

    plan = action.plan(params, ctx)
    assert plan["can_act"] is False and plan["why_not"].startswith("sink 'breakfix' is not configured")
    with pytest.raises(SinkNotConfiguredError, match=r"set sinks\.breakfix"):
        action.execute(params, ctx)
    assert slurm.node_states() == before and slurm.client().node("gpu-01").drained_by_run == 42


def test_the_owner_is_checked_when_the_playbook_is_validated(cache: SlurmNodeCache) -> None:
    action = handoff_on(cache, {})
    with pytest.raises(ParamsError, match=r"owner.*remediate itself"):
        action.validate({"sink": "breakfix", "owner": "remediate"})
    with pytest.raises(ParamsError, match=r"owner.*letters, digits"):
        action.validate({"sink": "breakfix", "owner": "break fix"})
    assert action.validate({"sink": "breakfix", "owner": "dc-ops"})["owner"] == "dc-ops"


def test_the_servers_handoff_posts_through_its_notify_action_so_a_reload_of_the_sinks_applies(
    slurm: SlurmCluster, actions: dict[str, Any], sink: WebhookRecorder
) -> None:
    ctx = step_context("gpu-02", breaker=memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=9)))
    drained(slurm, actions, "gpu-02", ctx)
    registry = default_registry(
        Settings.of(schedulers=(Scheduler.SLURM,), slurm_conf=slurm.conf), slurm=slurm.node_cache()
    )
    handoff = registry.get("slurm.handoff")
    params = handoff.validate({"sink": "breakfix"})
    assert handoff.plan(params, ctx)["can_act"] is False

    LiveSet(PlaybookSet([]), to_sinks({"breakfix": {"type": "webhook", "url": sink.url}})).apply_to(registry)

    assert handoff.plan(params, ctx)["can_act"] is True
    assert handoff.execute(params, ctx)["outcome"] == "handed_off"
    assert len(sink.requests) == 1 and slurm.client().node("gpu-02").handed_to == ("breakfix", 42)


KEEP_OUT = """
name: xid-slurm-keep-out
match: {alertname: GPUXidCritical}
target: node
steps:
  - action: slurm.drain
  - action: slurm.handoff
    with: {sink: breakfix, why: "XID {{ labels.xid }} still reported"}
"""


def test_a_playbook_handing_off_to_a_sink_that_is_not_configured_is_named_at_start(slurm: SlurmCluster) -> None:
    registry = default_registry(
        Settings.of(schedulers=(Scheduler.SLURM,), slurm_conf=slurm.conf), slurm=slurm.node_cache()
    )
    playbook = parse_playbook(yaml.safe_load(KEEP_OUT), registry, source="pb.yaml")
    line = unconfigured_sinks([playbook], ())
    assert line is not None and line.startswith("sinks NOT configured: breakfix (used by xid-slurm-keep-out)")
    assert unconfigured_sinks([playbook], to_sinks({"breakfix": {"type": "webhook", "url": "http://t/x"}})) is None
