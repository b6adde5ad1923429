"""k8s.handoff and one owner per node, against the test API server (real HTTP, the official client) and a real
HTTP sink: the hand-off posts through `notify` and marks the node; remediate's cordon, taint and drain of a
node owned elsewhere refuse naming the owner (their plans say can_act false); the undo of remediate's own
cordon and taint still runs; a release (the annotation removed) lets remediate act again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import StepContext, StepView
from remediate.actions.k8s import HandoffAction
from remediate.actions.k8s.common import NodeOwnedElsewhere
from remediate.actions.k8s.handoff import NodeOwnedByAnother
from remediate.actions.notify_sink import NotifyAction, SinkNotConfiguredError
from remediate.config.settings import Settings
from remediate.config.values import to_sinks
from remediate.errors import ParamsError
from remediate.kube import OWNER, OWNER_SINCE, OWNER_WHY, KubeClient, release_patch
from remediate.live import LiveSet
from remediate.playbooks.model import PlaybookSet
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.kube import FAST
from tests.support.realsystems import WebhookRecorder
from tests.support.steps import run

Ctx = Callable[..., StepContext]
OWNED = {OWNER: "breakfix-tickets", OWNER_SINCE: "2026-11-27T10:00:00Z", OWNER_WHY: "XID 79 after a GPU reset"}
GATED = [
    ("k8s.cordon", {}),
    ("k8s.taint", {"key": "remediate.io/gpu-unhealthy"}),
    ("k8s.drain", {"timeout": 5}),
]


@pytest.fixture
def sink() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/tickets") as recorder:
        yield recorder


def handoff_on(client: KubeClient, sinks: dict[str, Any]) -> HandoffAction:
    notify = NotifyAction(to_sinks(sinks))
    return HandoffAction(lambda: client, FAST, lambda: notify)


def test_handoff_posts_the_evidence_to_the_sink_then_marks_the_node_owned_once(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    kube_api.add_node("gpu-07")
    action = handoff_on(kube_client, {"breakfix": {"type": "webhook", "url": sink.url}})
    params = {"sink": "breakfix", "why": "XID 79 still reported after a reset", "message": "take {{ labels.Hostname }}"}

    plan = action.plan(action.validate(params), ctx_for("gpu-07", run_id=12))
    assert plan["can_act"] is True and "mark gpu-07 owned by breakfix" in plan["would"]
    assert sink.requests == [] and kube_api.count("PATCH", "/nodes/") == 0

    result = run(action, params, ctx_for("gpu-07", run_id=12))

    assert result["outcome"] == "handed_off" and result["owner"] == "breakfix"
    annotations = kube_api.node("gpu-07")["metadata"]["annotations"]
    assert annotations[OWNER] == "breakfix"
    assert annotations[OWNER_WHY] == "XID 79 still reported after a reset (remediate run 12)"
    assert annotations[OWNER_SINCE].endswith("Z")
    (posted,) = sink.requests
    assert posted.json["run_id"] == 12 and posted.json["message"] == "take gpu-07"
    assert posted.json["alert"]["labels"]["Hostname"] == "gpu-07"  # the evidence: the alert as it fired
    (event,) = kube_api.events_about("gpu-07")
    assert event["reason"] == "RemediateHandedOff" and "handed to breakfix" in event["note"]

    again = run(action, params, ctx_for("gpu-07", run_id=13))

    assert again["outcome"] == "already_owned"
    assert len(sink.requests) == 1 and kube_api.count("PATCH", "/nodes/") == 1
    assert "already" in action.plan(action.validate(params), ctx_for("gpu-07"))["would"]


def test_a_node_another_system_owns_is_not_handed_to_a_second_one(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)
    action = handoff_on(kube_client, {"breakfix": {"type": "webhook", "url": sink.url}})
    params = action.validate({"sink": "breakfix"})

    plan = action.plan(params, ctx_for("gpu-07"))
    assert plan["can_act"] is False
    assert plan["why_not"].startswith("gpu-07 is owned by breakfix-tickets since 2026-11-27T10:00:00Z: XID 79")
    with pytest.raises(NodeOwnedByAnother, match="owned by breakfix-tickets"):
        action.execute(params, ctx_for("gpu-07"))
    assert sink.requests == [] and kube_api.node("gpu-07")["metadata"]["annotations"][OWNER] == "breakfix-tickets"


def test_without_the_sink_the_handoff_says_so_posts_nothing_and_leaves_the_node_unowned(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-07")
    action = handoff_on(kube_client, {})
    params = action.validate({"sink": "breakfix"})

    plan = action.plan(params, ctx_for("gpu-07"))
    assert plan["can_act"] is False and plan["why_not"].startswith("sink 'breakfix' is not configured")
    with pytest.raises(SinkNotConfiguredError, match=r"set sinks\.breakfix"):
        action.execute(params, ctx_for("gpu-07"))
    assert OWNER not in (kube_api.node("gpu-07")["metadata"].get("annotations") or {})


def test_the_owner_is_checked_when_the_playbook_is_validated(kube_client: KubeClient) -> None:
    action = handoff_on(kube_client, {})
    with pytest.raises(ParamsError, match=r"owner.*remediate itself"):
        action.validate({"sink": "breakfix", "owner": "remediate"})
    assert action.validate({"sink": "breakfix", "owner": "tickets"})["owner"] == "tickets"


@pytest.mark.parametrize(("name", "params"), GATED)
def test_a_change_of_a_node_owned_elsewhere_refuses_naming_the_owner_and_its_plan_cannot_act(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any, name: str, params: dict[str, Any]
) -> None:
    kube_api.add_node("gpu-07", annotations=OWNED)
    action = actions[name]
    checked = action.validate(params)
    why = (
        "gpu-07 is owned by breakfix-tickets since 2026-11-27T10:00:00Z: XID 79 after a GPU reset: "
        f"{name} refuses to change it until the owner releases it"
    )

    plan = action.plan(checked, ctx_for("gpu-07"))
    assert plan["can_act"] is False and plan["why_not"].startswith(why)
    with pytest.raises(NodeOwnedElsewhere) as refused:
        action.execute(checked, ctx_for("gpu-07"))

    assert str(refused.value).startswith(why) and "remediate node release gpu-07" in str(refused.value)
    assert kube_api.changes == []
    assert breaker.status()["held_nodes"] == []


def test_a_node_remediate_itself_owns_is_changed_as_usual(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-07", annotations={OWNER: "remediate"})
    assert run(actions["k8s.cordon"], {}, ctx_for("gpu-07"))["outcome"] == "cordoned"


def test_the_undo_of_remediates_own_cordon_and_taint_runs_on_an_owned_node_and_a_release_lets_it_act_again(
    kube_api: FakeKubeAPI, kube_client: KubeClient, actions: dict[str, Any], ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    kube_api.add_node("gpu-07")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-07", run_id=3))
    run(actions["k8s.taint"], {"key": "remediate.io/gpu-unhealthy"}, ctx_for("gpu-07", run_id=3))
    handoff = handoff_on(kube_client, {"breakfix": {"type": "webhook", "url": sink.url}})
    run(handoff, {"sink": "breakfix"}, ctx_for("gpu-07", run_id=3))
    why = "GPUXidCritical: handed off by playbook gpu-xid-quarantine (remediate run 3)"  # the default `why`
    assert kube_api.node("gpu-07")["metadata"]["annotations"][OWNER_WHY] == why

    untainted = run(actions["k8s.untaint"], {"key": "remediate.io/gpu-unhealthy"}, ctx_for("gpu-07", run_id=4))
    uncordoned = run(actions["k8s.uncordon"], {}, ctx_for("gpu-07", run_id=4))

    assert (untainted["outcome"], uncordoned["outcome"]) == ("untainted", "uncordoned")
    assert kube_api.node("gpu-07")["spec"].get("unschedulable") is None
    with pytest.raises(NodeOwnedElsewhere, match="owned by breakfix"):
        run(actions["k8s.cordon"], {}, ctx_for("gpu-07", run_id=5))

    kube_client.patch_node("gpu-07", release_patch())  # the owner removes the annotation

    assert run(actions["k8s.cordon"], {}, ctx_for("gpu-07", run_id=6))["outcome"] == "cordoned"
    assert not {OWNER, OWNER_SINCE, OWNER_WHY} & set(kube_api.node("gpu-07")["metadata"]["annotations"])


def test_the_servers_handoff_posts_through_its_notify_action_so_a_reload_of_the_sinks_applies(
    kube_api: FakeKubeAPI, kubeconfig: Path, ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    kube_api.add_node("gpu-07")
    registry = default_registry(Settings.of(kubeconfig=kubeconfig))
    handoff = registry.get("k8s.handoff")
    params = handoff.validate({"sink": "breakfix"})
    assert handoff.plan(params, ctx_for("gpu-07"))["can_act"] is False

    LiveSet(PlaybookSet([]), to_sinks({"breakfix": {"type": "webhook", "url": sink.url}})).apply_to(registry)

    assert handoff.plan(params, ctx_for("gpu-07"))["can_act"] is True
    assert handoff.execute(params, ctx_for("gpu-07"))["outcome"] == "handed_off"
    assert len(sink.requests) == 1


def test_after_failed_hands_off_only_when_the_gate_step_failed(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    """An `always` hand-off after a re-admission gate: a gate that passed hands nothing over (the node went back),
    a gate that failed hands the node to breakfix."""
    kube_api.add_node("gpu-07")
    action = handoff_on(kube_client, {"breakfix": {"type": "webhook", "url": sink.url}})
    params = {"sink": "breakfix", "after_failed": "gate", "message": "kept out"}

    def after(status: str) -> StepContext:
        return replace(ctx_for("gpu-07", run_id=21), steps=(StepView(1, "gate", "gpu.health", status),))

    assert run(action, params, after("succeeded")) == {
        "outcome": "not_needed", "would": "nothing: step gate succeeded, not failed", "can_act": True,
        "after_failed": "gate",
    }  # fmt: skip
    assert action.plan(action.validate(params), after("skipped"))["would"] == "nothing: step gate skipped, not failed"
    assert sink.requests == [] and OWNER not in kube_api.node("gpu-07")["metadata"].get("annotations", {})

    assert run(action, params, after("failed"))["outcome"] == "handed_off"
    assert kube_api.node("gpu-07")["metadata"]["annotations"][OWNER] == "breakfix"
    assert len(sink.requests) == 1


def test_after_failed_may_name_several_steps_and_hands_off_when_any_of_them_failed(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, sink: WebhookRecorder
) -> None:
    """The shipped gate's soak and burn-in: `[gate, burnin, k8s-burnin]` (the step of a scheduler the site does not
    run is not in the run): a burn-in that failed after a soak that passed hands the node off too."""
    kube_api.add_node("gpu-07")
    action = handoff_on(kube_client, {"breakfix": {"type": "webhook", "url": sink.url}})
    params = {"sink": "breakfix", "after_failed": ["gate", "burnin", "k8s-burnin"], "message": "kept out"}

    def after(gate: str, burnin: str) -> StepContext:
        steps = (StepView(1, "gate", "gpu.health", gate), StepView(2, "k8s-burnin", "k8s.burnin", burnin))
        return replace(ctx_for("gpu-07", run_id=22), steps=steps)

    passed = run(action, params, after("succeeded", "succeeded"))
    assert passed["outcome"] == "not_needed" and passed["after_failed"] == ["gate", "burnin", "k8s-burnin"]
    assert passed["would"] == (
        "nothing: step gate succeeded, step burnin not in this run, step k8s-burnin succeeded, none failed"
    )
    assert sink.requests == [] and OWNER not in kube_api.node("gpu-07")["metadata"].get("annotations", {})

    assert run(action, params, after("succeeded", "failed"))["outcome"] == "handed_off"
    assert kube_api.node("gpu-07")["metadata"]["annotations"][OWNER] == "breakfix"
    assert len(sink.requests) == 1


@pytest.mark.parametrize("written", [{"gate": True}, ["gate", ""], 3])
def test_after_failed_that_is_neither_a_step_name_nor_a_list_of_them_is_refused_at_load(
    kube_client: KubeClient, written: object
) -> None:
    action = handoff_on(kube_client, {})
    errors = action.schema.check_static({"sink": "breakfix", "after_failed": written})
    assert any("parameter 'after_failed'" in error for error in errors), errors
