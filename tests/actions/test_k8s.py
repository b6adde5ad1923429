"""k8s.cordon / uncordon / taint / untaint / drain, branch by branch, against the test API server (real HTTP).

Actions run directly (validate -> plan -> execute, as the executor calls them) with an
in-memory circuit breaker; what they did is read back from the server's objects and from
its log of effective changes (`changes`), which is how "no change made twice" is checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import StepContext
from remediate.actions.k8s import (
    CordonAction,
    KubeOptions,
)
from remediate.actions.k8s.common import NodeOutOfScope
from remediate.breaker import BreakerLimits, BreakerOpen, memory_breaker
from remediate.errors import ActionError, ParamsError
from remediate.kube import CORDONED_BY_RUN, CORDONED_FOR_ALERT, TAINTS, KubeClient, KubeTooManyRequests
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.kube import context, kube_actions_on
from tests.support.steps import run

Ctx = Callable[..., StepContext]
MICROTIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|\+00:00)$")


def _taints(api: FakeKubeAPI, node: str) -> list[str]:
    return sorted(f"{t['key']}:{t['effect']}" for t in api.node(node)["spec"].get("taints", []))


def _annotations(api: FakeKubeAPI, node: str) -> dict[str, str]:
    return dict(api.node(node)["metadata"].get("annotations") or {})


# --------------------------------------------------------------------------- cordon


def test_cordon_marks_the_node_records_the_run_and_an_event_on_the_node(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    node = kube_api.add_node("gpu-1")
    result = run(actions["k8s.cordon"], {"note": "XID 79"}, ctx_for("gpu-1", run_id=41))

    assert result["outcome"] == "cordoned"
    assert result["breaker"]["held_nodes"] == ["gpu-1"]
    after = kube_api.node("gpu-1")
    assert after["spec"]["unschedulable"] is True
    assert after["metadata"]["annotations"][CORDONED_BY_RUN] == "41"
    assert after["metadata"]["annotations"][CORDONED_FOR_ALERT] == "f00dfeed"
    (event,) = kube_api.events_about("gpu-1")
    assert MICROTIME.match(event["eventTime"]), event["eventTime"]
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": node["metadata"]["uid"]}
    assert (event["action"], event["reason"], event["type"]) == ("Cordon", "RemediateCordoned", "Warning")
    assert event["reportingController"] == "remediate.io/remediate"
    assert event["reportingInstance"] == "test-runner"
    assert event["metadata"]["namespace"] == "default"
    assert "XID 79" in event["note"] and "run 41" in event["note"]
    assert [c.kind for c in kube_api.changes] == ["cordon", "event"]


def test_cordon_of_a_node_remediate_already_cordoned_changes_nothing(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=1))
    before = len(kube_api.changes)

    again = run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=2))

    assert again["outcome"] == "already_cordoned_by_remediate"
    assert again["cordoned_by_run"] == 1
    assert len(kube_api.changes) == before
    assert kube_api.count("PATCH", "/nodes/") == 1


def test_cordon_retried_by_the_same_run_does_not_cordon_or_announce_twice(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    first = run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=5))
    second = run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=5))

    assert first["outcome"] == second["outcome"] == "cordoned"
    assert second["event"]["created"].startswith("earlier")
    assert len(kube_api.changes_of("cordon")) == 1
    assert len(kube_api.changes_of("event")) == 1


def test_a_node_someone_else_cordoned_is_left_alone_and_never_marked(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any
) -> None:
    kube_api.add_node("gpu-1", unschedulable=True)
    result = run(actions["k8s.cordon"], {}, ctx_for("gpu-1"))

    assert result["outcome"] == "left_alone"
    assert "someone else" in result["reason"]
    assert CORDONED_BY_RUN not in _annotations(kube_api, "gpu-1")
    assert kube_api.changes == []
    assert breaker.status()["held_nodes"] == []


def test_cordon_whose_answer_was_lost_is_found_done_on_retry_not_redone(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    # The PATCH is applied, then the answer never comes (client read timeout 0.5 s).
    kube_api.inject("timeout_after", method="PATCH", path="/nodes/", times=1, delay=1.0)

    result = run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=9))

    assert result["outcome"] == "cordoned"
    assert len(kube_api.changes_of("cordon")) == 1
    # The resent PATCH carried the old resourceVersion: 409, re-read, found cordoned by this run.
    assert 409 in [code for method, _, code in kube_api.requests if method == "PATCH"]


def test_transient_errors_are_retried_and_4xx_fail_at_once_with_the_api_message(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    kube_api.inject("status", status=500, method="PATCH", times=2)
    assert run(actions["k8s.cordon"], {}, ctx_for("gpu-1"))["outcome"] == "cordoned"

    kube_api.inject("status", status=403, method="PATCH", times=1)
    with pytest.raises(ActionError, match=r"PATCH nodes/gpu-2: 403 .*injected fault") as failure:
        run(actions["k8s.cordon"], {}, ctx_for("gpu-2"))
    assert not failure.value.__class__.__name__.startswith("KubeUnavailable")
    assert kube_api.count("PATCH", "/nodes/gpu-2") == 1
    assert kube_api.node("gpu-2")["spec"].get("unschedulable") is None


def test_a_concurrent_writer_causes_a_409_and_a_fresh_decision_keeping_its_change(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")

    def someone_labels_it(api: FakeKubeAPI) -> None:
        api.update_node("gpu-1", lambda n: n["metadata"]["labels"].update({"team": "infra"}))

    kube_api.before("PATCH", "/nodes/gpu-1", someone_labels_it)
    assert run(actions["k8s.cordon"], {}, ctx_for("gpu-1"))["outcome"] == "cordoned"
    assert [code for m, _, code in kube_api.requests if m == "PATCH"] == [409, 200]
    assert kube_api.node("gpu-1")["metadata"]["labels"]["team"] == "infra"


def test_if_someone_else_cordons_between_read_and_write_remediate_does_not_claim_it(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.before("PATCH", "/nodes/gpu-1", lambda api: api.update_node("gpu-1", _set_unschedulable))

    result = run(actions["k8s.cordon"], {}, ctx_for("gpu-1"))

    assert result["outcome"] == "left_alone"
    assert CORDONED_BY_RUN not in _annotations(kube_api, "gpu-1")


def _set_unschedulable(node: dict[str, Any]) -> None:
    node["spec"]["unschedulable"] = True


@pytest.mark.parametrize(
    ("labels", "params", "expected"),
    [
        ({"Hostname": "gpu-1"}, {}, "gpu-1"),
        ({"instance": "gpu-1:9400"}, {}, "gpu-1"),
        ({"hostname": "gpu-1", "instance": "10.0.0.1:9400"}, {}, "gpu-1"),
        ({"node": "gpu-1", "Hostname": "other"}, {}, "gpu-1"),
        ({"Hostname": "other"}, {"node": "gpu-1"}, "gpu-1"),
    ],
)
def test_the_node_comes_from_the_param_or_the_first_label_in_order(
    kube_api: FakeKubeAPI,
    actions: dict[str, Any],
    labels: dict[str, str],
    params: dict[str, str],
    expected: str,
) -> None:
    kube_api.add_node("gpu-1")
    result = run(actions["k8s.cordon"], params, context(labels=labels, breaker=memory_breaker()))
    assert result["node"] == expected


def test_the_label_order_is_configurable(kube_api: FakeKubeAPI, kube_client: KubeClient) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    action = CordonAction(lambda: kube_client, KubeOptions(node_labels=("kubernetes_node", "Hostname")))
    ctx = context(labels={"node": "gpu-2", "kubernetes_node": "gpu-1"}, breaker=memory_breaker())
    assert run(action, {}, ctx)["node"] == "gpu-1"


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"Hostname": "GPU-1"}, "not a valid node name"),
        ({"Hostname": "gpu_1"}, "not a valid node name"),
        ({"Hostname": "gpu-1; rm -rf /"}, "not a valid node name"),
        ({"gpu": "3"}, "none of the labels node, kubernetes_node, Hostname, hostname, instance"),
        ({"Hostname": "gpu-9"}, "node 'gpu-9' \\(from label Hostname\\) does not exist in the cluster"),
    ],
)
def test_a_bad_or_unknown_node_fails_clearly_and_changes_nothing(
    kube_api: FakeKubeAPI, actions: dict[str, Any], labels: dict[str, str], message: str
) -> None:
    kube_api.add_node("gpu-1")
    ctx = context(labels=labels, breaker=memory_breaker())
    with pytest.raises(ActionError, match=message):
        actions["k8s.cordon"].plan({}, ctx)
    with pytest.raises(ActionError, match=message):
        actions["k8s.cordon"].execute({}, ctx)
    assert kube_api.changes == []


def test_a_node_param_is_checked_when_the_playbook_is_validated(actions: dict[str, Any]) -> None:
    with pytest.raises(ParamsError, match="not a valid node name"):
        actions["k8s.cordon"].validate({"node": "Not_A_Node"})


def test_cordon_refused_by_the_breaker_changes_nothing(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        kube_api.add_node(name)
    tight = memory_breaker(BreakerLimits(max_fraction=0.5, max_nodes=1))
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", breaker=tight, run_id=1))

    with pytest.raises(BreakerOpen, match=r"breaker open: refused to cordon node gpu-2 \(run 2\)") as refused:
        run(actions["k8s.cordon"], {}, ctx_for("gpu-2", breaker=tight, run_id=2))

    assert "cap is 1 = min(50% of 3 nodes = 1, max_nodes 1)" in str(refused.value)
    assert refused.value.status["open"] is True
    assert kube_api.node("gpu-2")["spec"].get("unschedulable") is None
    assert len(kube_api.changes_of("cordon")) == 1


def test_without_a_breaker_a_gated_action_refuses(kube_api: FakeKubeAPI, actions: dict[str, Any]) -> None:
    kube_api.add_node("gpu-1")
    with pytest.raises(ActionError, match="no circuit breaker available"):
        run(actions["k8s.cordon"], {}, context(labels={"Hostname": "gpu-1"}, breaker=None))
    assert kube_api.changes == []


# --------------------------------------------------------------------------- scope

CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}
GPU = {"nvidia.com/gpu.present": "true"}
GATED = (("k8s.cordon", {}), ("k8s.taint", {"key": "remediate.io/gpu-unhealthy"}), ("k8s.drain", {"timeout": 5.0}))


@pytest.mark.parametrize(("name", "params"), GATED)
def test_a_control_plane_node_an_alert_names_is_refused_by_plan_and_execute(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, name: str, params: dict[str, Any]
) -> None:
    """Finding 4: `Hostname=cp-1` cordoned a control-plane node."""
    kube_api.add_node("cp-1", labels=CONTROL_PLANE)
    kube_api.add_pod("ml", "web-1", "cp-1")
    action = actions[name]
    checked = action.validate(params)
    why = (
        r"node cp-1 \(from label Hostname\) is a control-plane node \(label node-role.kubernetes.io/control-plane\): "
        rf"{name} refuses it; set kube_allow_control_plane: true"
    )
    with pytest.raises(NodeOutOfScope, match=why):
        action.plan(checked, ctx_for("cp-1"))
    with pytest.raises(NodeOutOfScope, match=why):
        action.execute(checked, ctx_for("cp-1"))
    assert kube_api.changes == []
    assert kube_api.count("PATCH", "/nodes/") == kube_api.count("POST", "/eviction") == 0


def test_kube_allow_control_plane_lets_a_control_plane_node_be_cordoned(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx
) -> None:
    kube_api.add_node("cp-1", labels={"node-role.kubernetes.io/master": ""})
    with pytest.raises(NodeOutOfScope, match="control-plane node"):
        run(kube_actions_on(kube_client)["k8s.cordon"], {}, ctx_for("cp-1"))

    result = run(kube_actions_on(kube_client, allow_control_plane=True)["k8s.cordon"], {}, ctx_for("cp-1"))

    assert result["outcome"] == "cordoned"


@pytest.mark.parametrize(("name", "params"), GATED)
def test_a_node_outside_the_node_selector_is_refused_with_the_reason_in_the_plan(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, name: str, params: dict[str, Any]
) -> None:
    kube_api.add_node("gpu-1", labels=GPU)
    kube_api.add_node("cpu-1", labels={"node.kubernetes.io/instance-type": "m5.large"})
    action = kube_actions_on(kube_client, scope_selector="nvidia.com/gpu.present=true")[name]
    checked = action.validate(params)
    why = (
        r"node cpu-1 \(from label Hostname\) is out of scope: it does not match the node selector "
        rf"'nvidia.com/gpu.present=true' \(kube_node_selector, by default breaker_node_selector\): {name} acts only"
    )
    with pytest.raises(NodeOutOfScope, match=why):
        action.plan(checked, ctx_for("cpu-1"))
    with pytest.raises(NodeOutOfScope, match=why):
        action.execute(checked, ctx_for("cpu-1"))
    assert kube_api.changes == []

    assert "would" in action.plan(checked, ctx_for("gpu-1")) or name == "k8s.drain"
    action.execute(checked, ctx_for("gpu-1"))
    assert kube_api.changes_of("cordon" if name != "k8s.taint" else "taint+", "gpu-1")


def test_undo_is_not_scope_checked_so_a_node_whose_labels_changed_still_comes_back(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx
) -> None:
    """Uncordon/untaint only undo remediate's own marks: a node that left the scope since is not stranded."""
    kube_api.add_node("gpu-1", labels=GPU)
    actions = kube_actions_on(kube_client, scope_selector="nvidia.com/gpu.present=true")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=3))
    run(actions["k8s.taint"], {"key": "remediate.io/gpu-unhealthy"}, ctx_for("gpu-1", run_id=3))
    kube_api.update_node("gpu-1", lambda n: n["metadata"]["labels"].pop("nvidia.com/gpu.present"))
    kube_api.update_node("gpu-1", lambda n: n["metadata"]["labels"].update(CONTROL_PLANE))

    untainted = run(actions["k8s.untaint"], {"key": "remediate.io/gpu-unhealthy"}, ctx_for("gpu-1", run_id=4))
    uncordoned = run(actions["k8s.uncordon"], {}, ctx_for("gpu-1", run_id=4))

    assert (untainted["outcome"], uncordoned["outcome"]) == ("untainted", "uncordoned")
    assert kube_api.node("gpu-1")["spec"].get("unschedulable") is None


def test_the_scope_defaults_to_the_breakers_selector_and_a_bad_selector_fails_at_load() -> None:
    from remediate.actions.base import ActionDeps
    from remediate.config.settings import ConfigError, Settings, load_settings

    def options(**settings: Any) -> KubeOptions:
        deps = ActionDeps(settings=Settings.of(**settings).kube, gpu_backend=lambda: None, kube_client=lambda: None)  # type: ignore[arg-type]
        return CordonAction.from_deps(deps).options

    assert options().scope_selector is None
    assert options().allow_control_plane is False
    assert options(breaker_node_selector="nvidia.com/gpu.present=true").scope_selector == "nvidia.com/gpu.present=true"
    chosen = options(breaker_node_selector="nvidia.com/gpu.present=true", kube_node_selector="pool in (a100,h100)")
    assert chosen.scope_selector == "pool in (a100,h100)"
    with pytest.raises(ConfigError, match="setting 'kube_node_selector': 'gpu pool' is not a label selector"):
        load_settings(env={"REMEDIATE_KUBE_NODE_SELECTOR": "gpu pool"})


def test_the_cordon_plan_reads_the_node_and_the_breaker_and_changes_nothing(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    plan = actions["k8s.cordon"].plan({}, ctx_for("gpu-1"))

    assert plan["found"] is True
    assert plan["from"] == "label Hostname"
    assert plan["current"]["unschedulable"] is False
    assert plan["current"]["taints"] == ["nvidia.com/gpu:NoSchedule"]
    assert plan["would"].startswith("cordon")
    assert plan["breaker"]["state"] == "closed"
    assert plan["breaker"]["would_be"].startswith("allowed")
    assert kube_api.changes == []


# --------------------------------------------------------------------------- uncordon


def test_uncordon_undoes_remediates_cordon_and_releases_the_node(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=1))
    result = run(actions["k8s.uncordon"], {}, ctx_for("gpu-1", run_id=2))

    assert result["outcome"] == "uncordoned"
    assert result["cordoned_by_run"] == 1
    assert result["breaker_released"] is True
    assert kube_api.node("gpu-1")["spec"].get("unschedulable") is None
    assert not any(k.startswith("remediate.io/") for k in _annotations(kube_api, "gpu-1"))
    assert [e["reason"] for e in kube_api.events_about("gpu-1")] == ["RemediateCordoned", "RemediateUncordoned"]
    assert breaker.status()["held_nodes"] == []


def test_uncordon_leaves_a_node_someone_else_cordoned(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1", unschedulable=True)
    result = run(actions["k8s.uncordon"], {}, ctx_for("gpu-1"))

    assert result["outcome"] == "left_alone"
    assert "cordoned by someone else" in result["reason"]
    assert kube_api.node("gpu-1")["spec"]["unschedulable"] is True
    assert kube_api.changes == []


def test_uncordon_only_for_the_alert_that_cordoned_unless_scope_any(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=1, fingerprint="alert-a"))

    other = run(actions["k8s.uncordon"], {}, ctx_for("gpu-1", run_id=2, fingerprint="alert-b"))
    assert other["outcome"] == "left_alone"
    assert "another alert (alert-a)" in other["reason"]
    assert kube_api.node("gpu-1")["spec"]["unschedulable"] is True

    anyway = run(actions["k8s.uncordon"], {"scope": "any"}, ctx_for("gpu-1", run_id=3, fingerprint="alert-b"))
    assert anyway["outcome"] == "uncordoned"


def test_uncordon_of_a_node_uncordoned_by_hand_only_drops_remediates_leftover_marks(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", run_id=1))
    kube_api.update_node("gpu-1", lambda n: n["spec"].pop("unschedulable"))  # kubectl uncordon

    result = run(actions["k8s.uncordon"], {}, ctx_for("gpu-1", run_id=2))

    assert result["outcome"] == "left_alone"
    assert result["reason"].startswith("not cordoned")
    assert CORDONED_BY_RUN not in _annotations(kube_api, "gpu-1")
    assert kube_api.changes_of("uncordon") == []
    assert breaker.status()["held_nodes"] == []


def test_uncordon_is_never_refused_by_an_open_breaker(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    for name in ("gpu-1", "gpu-2"):
        kube_api.add_node(name)
    tight = memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=1))
    run(actions["k8s.cordon"], {}, ctx_for("gpu-1", breaker=tight, run_id=1))
    with pytest.raises(BreakerOpen):
        run(actions["k8s.cordon"], {}, ctx_for("gpu-2", breaker=tight, run_id=2))
    assert tight.status()["open"] is True

    assert run(actions["k8s.uncordon"], {}, ctx_for("gpu-1", breaker=tight, run_id=3))["outcome"] == "uncordoned"


# --------------------------------------------------------------------------- taint / untaint

XID_TAINT = {"key": "remediate.io/gpu-xid", "value": "79", "effect": "NoSchedule"}
FOREIGN = [
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "training", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
]


def test_taint_adds_one_taint_and_keeps_every_other(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1", taints=FOREIGN)
    result = run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=3))

    assert result["outcome"] == "tainted"
    assert result["taint"] == "remediate.io/gpu-xid=79:NoSchedule"
    assert _taints(kube_api, "gpu-1") == [
        "dedicated:NoExecute",
        "nvidia.com/gpu:NoSchedule",
        "remediate.io/gpu-xid:NoSchedule",
    ]
    foreign_after = [t for t in kube_api.node("gpu-1")["spec"]["taints"] if t["key"] == "dedicated"]
    assert foreign_after[0]["timeAdded"] in ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00")
    assert [(c.kind, c.detail) for c in kube_api.changes_of("taint+")] == [
        ("taint+", "remediate.io/gpu-xid:NoSchedule")
    ]
    assert kube_api.changes_of("taint-") == []
    assert '"run": 3' in _annotations(kube_api, "gpu-1")[TAINTS]
    assert [e["action"] for e in kube_api.events_about("gpu-1")] == ["Taint"]


def test_a_taint_added_by_someone_between_read_and_write_survives(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1", taints=FOREIGN[:1])

    def someone_taints(api: FakeKubeAPI) -> None:
        api.update_node("gpu-1", lambda n: n["spec"]["taints"].append({"key": "maintenance", "effect": "NoSchedule"}))

    kube_api.before("PATCH", "/nodes/gpu-1", someone_taints)
    run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1"))

    assert _taints(kube_api, "gpu-1") == [
        "maintenance:NoSchedule",
        "nvidia.com/gpu:NoSchedule",
        "remediate.io/gpu-xid:NoSchedule",
    ]
    assert [code for m, _, code in kube_api.requests if m == "PATCH"] == [409, 200]


def test_taint_already_there_is_a_no_op_and_a_foreign_one_is_left_alone(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2", taints=[{"key": "remediate.io/gpu-xid", "effect": "NoSchedule"}])
    run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=1))

    assert run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=2))["outcome"] == "already_tainted_by_remediate"
    assert run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=1))["outcome"] == "tainted"  # same run
    assert run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-2", run_id=3))["outcome"] == "left_alone"
    assert len(kube_api.changes_of("taint+")) == 1
    assert len(kube_api.changes_of("event")) == 1


def test_a_noexecute_taint_carries_a_timezone_aware_time_added(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.taint"], {"key": "remediate.io/gpu-xid", "effect": "NoExecute"}, ctx_for("gpu-1"))
    (taint,) = kube_api.node("gpu-1")["spec"]["taints"]
    assert taint["timeAdded"].endswith("Z")


def test_taint_params_are_checked_and_key_and_effect_cannot_come_from_a_label(actions: dict[str, Any]) -> None:
    taint = actions["k8s.taint"]
    with pytest.raises(ParamsError, match="prefix"):
        taint.validate({"key": "Bad_Prefix/x"})
    with pytest.raises(ParamsError, match="must be one of"):
        taint.validate({"key": "a", "effect": "NoWay"})
    with pytest.raises(ParamsError, match="at most 63"):
        taint.validate({"key": "a", "value": "x" * 64})
    problems = taint.schema.check_static(
        {"key": "{{ labels.k }}", "effect": "{{ labels.e }}", "value": "{{ labels.v }}"}
    )
    assert len(problems) == 2 and all("must be written in the playbook" in p for p in problems)


def test_untaint_removes_only_remediates_taints(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx, breaker: Any
) -> None:
    kube_api.add_node("gpu-1", taints=[*FOREIGN, {"key": "remediate.io/gpu-xid", "effect": "NoExecute"}])
    run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=1))

    result = run(actions["k8s.untaint"], {"key": "remediate.io/gpu-xid"}, ctx_for("gpu-1", run_id=2))

    assert result["outcome"] == "untainted"
    assert result["removed"] == ["remediate.io/gpu-xid=79:NoSchedule"]
    assert result["kept"] == ["remediate.io/gpu-xid:NoExecute: put there by someone else"]
    assert _taints(kube_api, "gpu-1") == [
        "dedicated:NoExecute",
        "nvidia.com/gpu:NoSchedule",
        "remediate.io/gpu-xid:NoExecute",
    ]
    assert TAINTS not in _annotations(kube_api, "gpu-1")
    assert result["breaker_released"] is True
    assert breaker.status()["held_nodes"] == []


def test_untaint_with_nothing_of_ours_changes_nothing(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1", taints=[{"key": "remediate.io/gpu-xid", "effect": "NoSchedule"}])
    kube_api.add_node("gpu-2")
    assert run(actions["k8s.untaint"], {"key": "remediate.io/gpu-xid"}, ctx_for("gpu-1"))["outcome"] == "left_alone"
    assert run(actions["k8s.untaint"], {"key": "remediate.io/gpu-xid"}, ctx_for("gpu-2"))["outcome"] == "not_tainted"
    assert kube_api.changes == []


def test_untaint_scope_alert_keeps_a_taint_added_for_another_alert(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    run(actions["k8s.taint"], XID_TAINT, ctx_for("gpu-1", run_id=1, fingerprint="a"))
    kept = run(
        actions["k8s.untaint"], {"key": XID_TAINT["key"], "effect": "NoSchedule"}, ctx_for("gpu-1", fingerprint="b")
    )
    assert kept["outcome"] == "left_alone"
    assert "for another alert" in kept["kept"][0]
    gone = run(actions["k8s.untaint"], {"key": XID_TAINT["key"], "scope": "any"}, ctx_for("gpu-1", fingerprint="b"))
    assert gone["outcome"] == "untainted"


# --------------------------------------------------------------------------- drain


def _workload(api: FakeKubeAPI, node: str) -> None:
    api.add_pod("ml", "trainer-7d9f-abcde", node, labels={"app": "trainer"})
    api.add_pod("ml", "db-0", node, owner="StatefulSet", owner_name="db", labels={"app": "db"}, replace_on_delete=True)
    api.add_pod("kube-system", "dcgm-exporter-x1", node, owner="DaemonSet", owner_name="dcgm-exporter")
    api.add_pod("kube-system", f"kube-proxy-{node}", node, owner="Node", mirror=True)
    api.add_pod("ml", "job-done", node, owner=None, phase="Succeeded")
    api.add_pod("ml", "elsewhere-1", "gpu-2", labels={"app": "trainer"})


def test_drain_cordons_evicts_skips_daemonsets_and_mirror_pods_and_waits_until_gone_or_replaced(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    _workload(kube_api, "gpu-1")
    db_uid = kube_api.pod("ml", "db-0")["metadata"]["uid"]

    result = run(actions["k8s.drain"], {"grace_period_seconds": 5, "timeout": 10}, ctx_for("gpu-1", run_id=8))

    assert result["cordon"]["outcome"] == "cordoned"
    assert sorted(e["pod"] for e in result["evicted"]) == ["ml/db-0", "ml/job-done", "ml/trainer-7d9f-abcde"]
    assert {s["pod"]: s["reason"].split(" ")[0] for s in result["skipped"]} == {
        "kube-system/dcgm-exporter-x1": "managed",
        "kube-system/kube-proxy-gpu-1": "mirror",
    }
    assert result["blocked"] == [] and result["still_terminating"] == [] and result["complete"] is True
    assert kube_api.pod("ml", "trainer-7d9f-abcde") is None
    replaced = kube_api.pod("ml", "db-0")
    assert replaced is not None and replaced["metadata"]["uid"] != db_uid  # gone or replaced
    assert kube_api.pod("ml", "elsewhere-1") is not None  # other nodes untouched
    assert sorted(c.target for c in kube_api.changes_of("evict")) == ["ml/db-0", "ml/job-done", "ml/trainer-7d9f-abcde"]
    assert [e["reason"] for e in kube_api.events_about("gpu-1")] == ["RemediateCordoned", "RemediateDrained"]
    # Each eviction carried the grace period; the pods were listed once by the plan, once by execute.
    assert {c.detail.split(" ")[1] for c in kube_api.changes_of("evict")} == {"grace=5"}
    assert kube_api.count("POST", r"/pods/.*/eviction$") == 3
    assert kube_api.count("GET", r"/api/v1/pods$") == 2


def test_drain_lists_pods_with_the_node_field_selector(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    _workload(kube_api, "gpu-1")
    plan = actions["k8s.drain"].plan(actions["k8s.drain"].validate({}), ctx_for("gpu-1"))
    assert all(p["pod"] != "ml/elsewhere-1" for p in plan["would_evict"])


def test_a_pdb_that_blocks_then_allows_is_retried_with_backoff(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    for index in range(2):
        kube_api.add_pod("ml", f"web-{index}", "gpu-1", labels={"app": "web"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=1, heal_after=0.3)

    result = run(actions["k8s.drain"], {"pdb_retry_interval": 0.1, "timeout": 10}, ctx_for("gpu-1"))

    assert sorted(e["pod"] for e in result["evicted"]) == ["ml/web-0", "ml/web-1"]
    assert result["complete"] is True
    assert 429 in [code for m, p, code in kube_api.requests if m == "POST" and p.endswith("/web-1/eviction")]
    assert len(kube_api.changes_of("evict")) == 2


def test_a_pdb_still_being_processed_answers_429_and_the_drain_retries_until_it_is(
    kube_api: FakeKubeAPI, kube_client: KubeClient, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    """The API answers 429 while a PDB's status is older than its spec."""
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "web-0", "gpu-1", labels={"app": "web"})
    kube_client.get_node("gpu-1")  # the official client is loaded (~1 s): the PDB is unprocessed for the drain's 2 s
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=1, unprocessed_for=2.0)

    result = run(actions["k8s.drain"], {"pdb_retry_interval": 0.1, "timeout": 10}, ctx_for("gpu-1"))

    assert [e["pod"] for e in result["evicted"]] == ["ml/web-0"] and result["complete"] is True
    answers = [code for m, p, code in kube_api.requests if m == "POST" and p.endswith("/web-0/eviction")]
    assert answers[0] == 429 and answers[-1] == 201
    assert len(kube_api.changes_of("evict")) == 1


def test_an_unprocessed_pdb_answers_the_apiservers_429_with_its_causes(
    kube_api: FakeKubeAPI, kube_client: KubeClient
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "web-0", "gpu-1", labels={"app": "web"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=3, unprocessed_for=60)

    with pytest.raises(KubeTooManyRequests) as refused:
        kube_client.evict_pod("ml", "web-0", None)

    status = refused.value.status
    assert status is not None and status.causes[0]["reason"] == "DisruptionBudget"
    assert status.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status.causes[0]["message"] == "The disruption budget web-pdb is still being processed by the server."


def test_a_pdb_that_never_allows_times_out_listing_the_blocked_pods(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    kube_api.add_pod("ml", "web-0", "gpu-1", labels={"app": "web"})
    kube_api.add_pod("ml", "api-0", "gpu-1", labels={"app": "api"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=0)
    kube_api.add_pod("ml", "web-1", "gpu-2", labels={"app": "web"})

    with pytest.raises(ActionError) as failure:
        run(actions["k8s.drain"], {"pdb_retry_interval": 0.05, "timeout": 0.4}, ctx_for("gpu-1"))
    message = str(failure.value)
    assert "incomplete" in message and "evicted 1 (ml/api-0)" in message
    assert "ml/web-0: The disruption budget web-pdb needs 2 healthy pods and has 2 currently" in message
    assert kube_api.node("gpu-1")["spec"]["unschedulable"] is True

    # allow_incomplete: the same drain (gpu-2) succeeds and its result lists what is blocked.
    result = run(
        actions["k8s.drain"],
        {"pdb_retry_interval": 0.05, "timeout": 0.3, "allow_incomplete": True},
        ctx_for("gpu-2", run_id=99),
    )
    assert result["complete"] is False
    assert result["blocked"] == [
        {"pod": "ml/web-1", "reason": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}
    ]
    assert [e["reason"] for e in kube_api.events_about("gpu-2")][-1] == "RemediateDrainIncomplete"


def test_drain_refuses_unmanaged_and_emptydir_pods_before_evicting_anything_unless_allowed(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "bare", "gpu-1", owner=None)
    kube_api.add_pod("ml", "cache-1", "gpu-1", emptydir=True)
    kube_api.add_pod("ml", "ok-1", "gpu-1")

    with pytest.raises(ActionError, match="refused before evicting anything") as failure:
        run(actions["k8s.drain"], {}, ctx_for("gpu-1"))
    assert "ml/bare not managed by a controller" in str(failure.value)
    assert "ml/cache-1 uses emptyDir" in str(failure.value)
    assert kube_api.changes_of("evict") == []

    result = run(actions["k8s.drain"], {"force": True, "delete_emptydir_data": True}, ctx_for("gpu-1"))
    assert sorted(e["pod"] for e in result["evicted"]) == ["ml/bare", "ml/cache-1", "ml/ok-1"]


def test_a_pod_gone_before_its_eviction_counts_as_done(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "short-1", "gpu-1")
    kube_api.before("POST", "/short-1/eviction", lambda api: api.pods.pop(("ml", "short-1")))

    result = run(actions["k8s.drain"], {}, ctx_for("gpu-1"))

    assert result["already_gone"] == ["ml/short-1"]
    assert result["complete"] is True


def test_a_pod_under_two_pdbs_is_blocked_not_spun_on(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "web-0", "gpu-1", labels={"app": "web", "tier": "front"})
    kube_api.add_pdb("ml", "pdb-a", {"app": "web"}, disruptions_allowed=1)
    kube_api.add_pdb("ml", "pdb-b", {"tier": "front"}, disruptions_allowed=1)

    plan = actions["k8s.drain"].plan(actions["k8s.drain"].validate({}), ctx_for("gpu-1"))
    assert plan["would_evict"][0]["blocked_by"].startswith("more than one PodDisruptionBudget")

    result = run(
        actions["k8s.drain"], {"timeout": 0.3, "pdb_retry_interval": 0.05, "allow_incomplete": True}, ctx_for("gpu-1")
    )
    assert "more than one PodDisruptionBudget" in result["blocked"][0]["reason"]


def test_the_drain_plan_names_pods_to_evict_and_skip_and_the_pdbs_that_would_block(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    _workload(kube_api, "gpu-1")
    kube_api.add_pod("ml", "trainer-7d9f-fghij", "gpu-1", labels={"app": "trainer"})
    kube_api.add_pdb("ml", "trainer-pdb", {"app": "trainer"}, disruptions_allowed=1)

    plan = actions["k8s.drain"].plan(actions["k8s.drain"].validate({}), ctx_for("gpu-1"))

    assert plan["would_cordon"] is True
    evict = {p["pod"]: p for p in plan["would_evict"]}
    assert sorted(evict) == ["ml/db-0", "ml/job-done", "ml/trainer-7d9f-abcde", "ml/trainer-7d9f-fghij"]
    assert evict["ml/trainer-7d9f-abcde"]["pdbs"] == ["ml/trainer-pdb"]
    assert evict["ml/trainer-7d9f-abcde"]["blocked_by"] is None
    assert evict["ml/trainer-7d9f-fghij"]["blocked_by"].startswith("PodDisruptionBudget ml/trainer-pdb allows no more")
    assert plan["pdbs_that_would_block"] == ["ml/trainer-pdb"]
    assert sorted(s["pod"] for s in plan["would_skip"]) == [
        "kube-system/dcgm-exporter-x1",
        "kube-system/kube-proxy-gpu-1",
    ]
    assert plan["refused"] == []
    assert plan["breaker"]["would_be"].startswith("allowed")
    assert kube_api.changes == []


def test_the_drain_plan_forecasts_pending_finished_and_terminating_pods_as_evictable_despite_their_pdb(
    kube_api: FakeKubeAPI, kube_client: KubeClient, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    """The forecast said a Pending pod would be blocked by its PDB; the API evicts it."""
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "web-pending", "gpu-1", labels={"app": "web"}, phase="Pending")
    kube_api.add_pod("ml", "web-failed", "gpu-1", labels={"app": "web"}, phase="Failed")
    kube_api.add_pod("ml", "web-running", "gpu-1", labels={"app": "web"})
    kube_api.add_pod("ml", "web-terminating", "gpu-1", labels={"app": "web"})
    kube_client.get_node("gpu-1")  # the official client is loaded (~1 s): the pod terminates for the plan's 3 s
    kube_api.start_deletion("ml", "web-terminating", seconds=3.0)
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=1)

    plan = actions["k8s.drain"].plan(actions["k8s.drain"].validate({}), ctx_for("gpu-1"))

    evict = {p["pod"]: p for p in plan["would_evict"]}
    for name, why in (("web-pending", "phase Pending"), ("web-failed", "phase Failed"), ("web-terminating", "already")):
        assert evict[f"ml/{name}"]["blocked_by"] is None, name
        assert evict[f"ml/{name}"]["no_pdb_check"].startswith(why)
        assert evict[f"ml/{name}"]["pdbs"] == ["ml/web-pdb"]
    # They use up none of the budget: the one disruption it allows is the running pod's.
    assert evict["ml/web-running"]["blocked_by"] is None and "no_pdb_check" not in evict["ml/web-running"]
    assert plan["pdbs_that_would_block"] == []

    result = run(actions["k8s.drain"], {"timeout": 20}, ctx_for("gpu-1"))

    assert result["complete"] is True and result["blocked"] == []
    evictions = [code for m, p, code in kube_api.requests if m == "POST" and p.endswith("/eviction")]
    assert evictions == [201, 201, 201, 201]


def test_drain_without_cordon_leaves_the_node_schedulable(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "w-1", "gpu-1")
    result = run(actions["k8s.drain"], {"cordon": False}, ctx_for("gpu-1"))
    assert "cordon" not in result
    assert kube_api.node("gpu-1")["spec"].get("unschedulable") is None
    assert result["breaker"]["held_nodes"] == ["gpu-1"]


def test_a_drain_run_again_after_a_crash_evicts_nothing_twice(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "slow-1", "gpu-1")
    kube_api.deletion_seconds = 0.5  # still terminating when the step is run again
    drain = kube_actions_on(kube_client)["k8s.drain"]
    first = run(drain, {"wait_for_delete": False}, ctx_for("gpu-1", run_id=4))
    second = run(drain, {"timeout": 5}, ctx_for("gpu-1", run_id=4))

    assert [e["pod"] for e in first["evicted"]] == ["ml/slow-1"]
    assert [e["pod"] for e in second["evicted"]] == ["ml/slow-1"]  # evicting a terminating pod changes nothing
    assert len(kube_api.changes_of("evict")) == 1
    assert len(kube_api.changes_of("cordon")) == 1


def test_the_family_under_test_is_every_k8s_action_the_registry_ships(actions: dict[str, Any]) -> None:
    """The properties below hold for each action of `actions`: a k8s action left out of it would skip them."""
    assert sorted(actions) == [name for name in default_registry().names() if name.startswith("k8s.")]


def test_every_kube_action_runs_in_the_cluster_only_handoff_is_not_idempotent_and_three_are_gated(
    actions: dict[str, Any],
) -> None:
    """Node changes start from a fresh read, so a retry after a crash changes nothing twice; k8s.handoff posts to
    a sink, which may have received it already, so it is never sent again (it is not idempotent)."""
    assert all(a.where.value == "cluster" for a in actions.values())
    assert sorted(n for n, a in actions.items() if not a.idempotent) == ["k8s.handoff"]
    assert sorted(n for n, a in actions.items() if a.breaker_gated) == ["k8s.cordon", "k8s.drain", "k8s.taint"]


def test_a_drain_plan_without_access_to_pdbs_says_so_and_still_plans(
    kube_api: FakeKubeAPI, actions: dict[str, Any], ctx_for: Ctx
) -> None:
    kube_api.add_node("gpu-1")
    kube_api.add_pod("ml", "w-1", "gpu-1")
    kube_api.inject("status", status=403, path="poddisruptionbudgets")
    plan = actions["k8s.drain"].plan(actions["k8s.drain"].validate({}), ctx_for("gpu-1"))
    assert [p["pod"] for p in plan["would_evict"]] == ["ml/w-1"]
    assert plan["notes"][0].startswith("cannot read PodDisruptionBudgets")
    assert "403" in plan["notes"][0]


# Each node write with what must already be on the node for it to write (None: nothing).
NODE_WRITES = {
    "k8s.cordon": (None, {}),
    "k8s.uncordon": ("k8s.cordon", {}),
    "k8s.taint": (None, {"key": "remediate.io/gpu-xid"}),
    "k8s.untaint": ("k8s.taint", {"key": "remediate.io/gpu-xid"}),
}


@pytest.mark.parametrize("name", sorted(NODE_WRITES))
def test_a_node_that_changes_before_every_write_fails_the_step_retryable_and_the_retry_reads_afresh(
    kube_api: FakeKubeAPI, kube_client: KubeClient, ctx_for: Ctx, name: str
) -> None:

    from remediate.errors import RetryableActionError

    actions = kube_actions_on(kube_client, conflict_attempts=3)
    kube_api.add_node("gpu-1", taints=[{"key": "team.example/maintenance", "effect": "NoSchedule"}])
    setup, params = NODE_WRITES[name]
    if setup:
        run(actions[setup], params, ctx_for("gpu-1", run_id=1))
    before = kube_api.node("gpu-1")["spec"]
    events = len(kube_api.events_about("gpu-1"))
    patches = kube_api.count("PATCH", "/nodes/gpu-1")

    def someone_labels_it(api: FakeKubeAPI) -> None:
        api.update_node("gpu-1", lambda n: n["metadata"]["labels"].update({"team": "infra"}))

    kube_api.before("PATCH", "/nodes/gpu-1", someone_labels_it, times=3)
    with pytest.raises(RetryableActionError, match="3 conflicts in a row, 409"):
        run(actions[name], params, ctx_for("gpu-1", run_id=2))
    assert [code for m, _, code in kube_api.requests if m == "PATCH"][patches:] == [409, 409, 409]
    assert kube_api.node("gpu-1")["spec"] == before
    assert len(kube_api.events_about("gpu-1")) == events

    # The executor's retry of the step starts from a fresh read and makes the change once.
    assert run(actions[name], params, ctx_for("gpu-1", run_id=2))["outcome"] == name.removeprefix("k8s.") + "ed"
    assert [code for m, _, code in kube_api.requests if m == "PATCH"][patches:] == [409, 409, 409, 200]
    assert len(kube_api.events_about("gpu-1")) == events + 1
    assert "team.example/maintenance:NoSchedule" in _taints(kube_api, "gpu-1")
