"""The test API server behaves as the Kubernetes API server does, seen through the official client itself.

These pin down each behaviour the k8s.* tests rely on (listed in fake_apiserver.py's docstring),
with the official `kubernetes` client configured from a kubeconfig exactly as for a real cluster,
and with raw HTTP where the client would not send the request (a naive event time, a stale patch).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from remediate.actions.k8s import CordonAction
from remediate.breaker import memory_breaker
from remediate.kube import KubeClient, KubeError
from tests.support.fake_apiserver import FakeKubeAPI, Rbac
from tests.support.helm import ChartRbac, Helm, chart_rbac
from tests.support.kube import FAST, context
from tests.support.waiting import scaled


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _raw(
    api: FakeKubeAPI, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> requests.Response:
    return requests.request(
        method,
        api.url + path,
        data=None if body is None else json.dumps(body),
        headers={"Authorization": f"Bearer {api.token}", "Content-Type": content_type},
        timeout=scaled(5),
    )


def test_the_client_authenticates_with_the_kubeconfig_token_and_others_get_401(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_node("n1")
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    anonymous = requests.get(kube_api.url + "/api/v1/nodes", timeout=scaled(5))
    assert anonymous.status_code == 401 and anonymous.json()["reason"] == "Unauthorized"


def test_unknown_objects_are_404_status_with_details(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        core.read_node("nope")
    assert missing.value.status == 404
    assert _status(missing.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "nodes"},
        "code": 404,
    }
    assert _raw(kube_api, "GET", "/api/v1/widgets").status_code == 404


def test_a_strategic_merge_patch_of_taints_replaces_the_whole_list(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_node("n1", taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}])
    patched = core.patch_node("n1", {"spec": {"taints": [{"key": "c", "effect": "NoSchedule"}]}})
    assert [t.key for t in patched.spec.taints] == ["c"]
    assert kube_api.requests[-1][0] == "PATCH"
    # Maps merge, and null deletes a key.
    core.patch_node("n1", {"metadata": {"annotations": {"x": "1", "y": "2"}}})
    after = core.patch_node("n1", {"metadata": {"annotations": {"x": None}}, "spec": {"unschedulable": True}})
    assert after.metadata.annotations == {"y": "2"} and after.spec.unschedulable is True


def test_json_merge_patch_and_json_patch_as_the_client_sends_them(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_node("n1", taints=[{"key": "a", "effect": "NoSchedule"}])
    merged = core.patch_node("n1", {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json")
    assert merged.spec.unschedulable is True and [t.key for t in merged.spec.taints] == ["a"]
    appended = core.patch_node(
        "n1", [{"op": "add", "path": "/spec/taints/-", "value": {"key": "b", "effect": "NoSchedule"}}]
    )
    assert [t.key for t in appended.spec.taints] == ["a", "b"]
    with pytest.raises(ApiException) as failed:
        core.patch_node("n1", [{"op": "test", "path": "/spec/unschedulable", "value": False}])
    assert failed.value.status == 422
    assert _raw(kube_api, "PATCH", "/api/v1/nodes/n1", {"spec": {}}, "application/apply-patch+yaml").status_code == 415


def test_a_stale_resource_version_is_a_409_conflict_and_every_write_bumps_it(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_node("n1")
    first = core.read_node("n1").metadata.resource_version
    second = core.patch_node(
        "n1", {"metadata": {"resourceVersion": first, "labels": {"a": "b"}}}
    ).metadata.resource_version
    assert int(second) > int(first)
    with pytest.raises(ApiException) as stale:
        core.patch_node("n1", {"metadata": {"resourceVersion": first}, "spec": {"unschedulable": True}})
    assert stale.value.status == 409
    body = _status(stale.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; please apply your changes to '
        "the latest version and try again"
    )
    assert core.read_node("n1").spec.unschedulable is None


def test_invalid_taints_are_422_and_undecodable_values_400(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.add_node("n1")
    with pytest.raises(ApiException) as invalid:
        core.patch_node(
            "n1",
            {
                "spec": {
                    "taints": [
                        {"key": "a", "effect": "Sometimes"},
                        {"key": "b", "effect": "NoSchedule"},
                        {"key": "b", "effect": "NoSchedule"},
                    ]
                }
            },
        )
    assert invalid.value.status == 422
    causes = {c["field"]: c["reason"] for c in _status(invalid.value)["details"]["causes"]}
    assert causes == {"spec.taints[0].effect": "FieldValueNotSupported", "spec.taints[2]": "FieldValueDuplicate"}
    bad = _raw(
        kube_api, "PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": "yes"}}, "application/merge-patch+json"
    )
    assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"
    naive = _raw(
        kube_api,
        "PATCH",
        "/api/v1/nodes/n1",
        {"spec": {"taints": [{"key": "a", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00"}]}},
        "application/strategic-merge-patch+json",
    )
    assert naive.status_code == 400 and 'cannot parse "" as "Z07:00"' in naive.json()["message"]


def test_pods_are_listed_by_node_with_the_field_selector_across_namespaces(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_pod("a", "p1", "n1", labels={"app": "x"})
    kube_api.add_pod("b", "p2", "n1")
    kube_api.add_pod("a", "p3", "n2", labels={"app": "x"})
    on_n1 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1").items
    assert sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in on_n1) == ["a/p1", "b/p2"]
    assert [p.metadata.name for p in core.list_namespaced_pod("a", label_selector="app=x,app in (x)").items] == [
        "p1",
        "p3",
    ]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=n1").items] == [
        "p3"
    ]
    with pytest.raises(ApiException) as unsupported:
        core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=default")
    assert unsupported.value.status == 400
    assert _status(unsupported.value)["message"] == "field label not supported: spec.schedulerName"


def _evict(core: client.CoreV1Api, namespace: str, name: str, grace: int | None = None) -> Any:
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=client.V1DeleteOptions(grace_period_seconds=grace) if grace is not None else None,
    )
    return core.create_namespaced_pod_eviction(name, namespace, body)


def test_an_eviction_a_pdb_forbids_is_429_with_the_exact_status_body(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.add_pod("ml", "web-0", "n1", labels={"app": "web"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=0, current_healthy=3, desired_healthy=3)
    with pytest.raises(ApiException) as blocked:
        _evict(core, "ml", "web-0")
    assert blocked.value.status == 429
    assert blocked.value.headers.get("Retry-After") is None
    assert _status(blocked.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web-pdb needs 3 healthy pods and has 3 currently",
                }
            ]
        },
        "code": 429,
    }
    assert kube_api.pod("ml", "web-0") is not None


def test_an_allowed_eviction_is_201_terminates_the_pod_and_uses_the_budget(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    kube_api.deletion_seconds = 1.0  # long enough to see the pod terminating on a loaded machine
    kube_api.add_pod("ml", "web-0", "n1", labels={"app": "web"})
    kube_api.add_pod("ml", "web-1", "n1", labels={"app": "web"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=1)
    answer = _evict(core, "ml", "web-0", grace=7)
    assert answer.kind == "Status"
    terminating = core.read_namespaced_pod("web-0", "ml")
    assert (
        terminating.metadata.deletion_timestamp is not None and terminating.metadata.deletion_grace_period_seconds == 7
    )
    # Evicting it again while it terminates succeeds and changes nothing (no second disruption).
    _evict(core, "ml", "web-0")
    assert len(kube_api.changes_of("evict")) == 1
    with pytest.raises(ApiException) as budget_used:
        _evict(core, "ml", "web-1")
    assert budget_used.value.status == 429
    time.sleep(1.1)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("web-0", "ml")
    assert gone.value.status == 404
    with pytest.raises(ApiException) as evict_gone:
        _evict(core, "ml", "web-0")
    assert evict_gone.value.status == 404


def test_a_pod_under_two_pdbs_is_500_and_a_name_mismatch_is_400(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.add_pod("ml", "web-0", "n1", labels={"app": "web", "tier": "front"})
    kube_api.add_pdb("ml", "a", {"app": "web"}, disruptions_allowed=5)
    kube_api.add_pdb("ml", "b", {"tier": "front"}, disruptions_allowed=5)
    with pytest.raises(ApiException) as two:
        _evict(core, "ml", "web-0")
    assert two.value.status == 500 and "more than one PodDisruptionBudget" in _status(two.value)["message"]
    mismatch = _raw(kube_api, "POST", "/api/v1/namespaces/ml/pods/web-0/eviction", {"metadata": {"name": "other"}})
    assert mismatch.status_code == 400


def test_a_replaced_pod_keeps_its_name_with_a_new_uid(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.add_pod("db", "db-0", "n1", owner="StatefulSet", replace_on_delete=True)
    old = core.read_namespaced_pod("db-0", "db").metadata.uid
    _evict(core, "db", "db-0")
    time.sleep(0.1)
    new = core.read_namespaced_pod("db-0", "db")
    assert new.metadata.uid != old and new.spec.node_name is None


def test_pdbs_are_listed_as_policy_v1(kube_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    kube_api.add_pdb("ml", "a", {"app": "web"}, disruptions_allowed=1)
    kube_api.add_pdb("other", "b", None, disruptions_allowed=0)
    policy = client.PolicyV1Api(api_client)
    everywhere = policy.list_pod_disruption_budget_for_all_namespaces().items
    assert sorted(p.metadata.name for p in everywhere) == ["a", "b"]
    (only,) = policy.list_namespaced_pod_disruption_budget("ml").items
    assert only.status.disruptions_allowed == 1 and only.spec.selector.match_labels == {"app": "web"}


def _event(**overrides: Any) -> client.EventsV1Event:
    values: dict[str, Any] = {
        "metadata": client.V1ObjectMeta(name="n1.test", namespace="default"),
        "event_time": datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
        "action": "Cordon",
        "reason": "Test",
        "type": "Normal",
        "reporting_controller": "remediate.io/remediate",
        "reporting_instance": "pod-1",
        "regarding": client.V1ObjectReference(kind="Node", name="n1", uid="u-1", api_version="v1"),
    }
    values.update(overrides)
    return client.EventsV1Event(**values)


def test_events_need_a_timezone_aware_micro_time(kube_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    events = client.EventsV1Api(api_client)
    created = events.create_namespaced_event("default", _event())
    assert created.event_time == datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    with pytest.raises(ApiException) as naive:
        events.create_namespaced_event(
            "default",
            _event(metadata=client.V1ObjectMeta(name="n1.naive"), event_time=datetime(2026, 1, 1, 12, 0, 0, 123456)),
        )
    assert naive.value.status == 400
    assert _status(naive.value)["message"] == (
        'Event in version "v1" cannot be handled as a Event: parsing time "2026-01-01T12:00:00.123456" as '
        '"2006-01-02T15:04:05.000000Z07:00": cannot parse "" as "Z07:00"'
    )
    with pytest.raises(ApiException) as no_fraction:
        events.create_namespaced_event(
            "default",
            _event(metadata=client.V1ObjectMeta(name="n1.whole"), event_time=datetime(2026, 1, 1, tzinfo=UTC)),
        )
    assert no_fraction.value.status == 400 and 'as ".000000"' in _status(no_fraction.value)["message"]


def test_events_missing_required_fields_are_422_listing_each(
    kube_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    events = client.EventsV1Api(api_client)
    with pytest.raises(ApiException) as invalid:
        events.create_namespaced_event(
            "default", _event(reporting_controller=None, action=None, type="Info", note="x" * 1025)
        )
    assert invalid.value.status == 422
    body = _status(invalid.value)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(
        'Event.events.k8s.io "n1.test" is invalid: [reportingController: Required value, '
    )
    assert {c["field"] for c in body["details"]["causes"]} == {"reportingController", "action", "type", "note"}
    # Events about a node (cluster-scoped) belong in `default`; a name that exists is 409 AlreadyExists.
    with pytest.raises(ApiException) as elsewhere:
        events.create_namespaced_event("ml", _event(metadata=client.V1ObjectMeta(name="n1.x", namespace="ml")))
    assert elsewhere.value.status == 422
    events.create_namespaced_event("default", _event())
    with pytest.raises(ApiException) as exists:
        events.create_namespaced_event("default", _event())
    assert exists.value.status == 409 and _status(exists.value)["reason"] == "AlreadyExists"
    mismatch = _raw(
        kube_api,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        {"metadata": {"name": "e", "namespace": "ml"}},
    )
    assert mismatch.status_code == 400
    listed = events.list_namespaced_event("default", field_selector="regarding.name=n1").items
    assert [e.metadata.name for e in listed] == ["n1.test"]


def test_faults_answer_5xx_drop_time_out_or_reset_and_then_stop(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    kube_api.add_node("n1")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    configuration.retries = False
    with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        kube_api.inject("status", status=503, times=1)
        with pytest.raises(ApiException) as unavailable:
            core.read_node("n1")
        assert unavailable.value.status == 503
        kube_api.inject("reset", times=1)
        with pytest.raises(Exception, match=r"Connection aborted|reset"):
            core.read_node("n1")
        kube_api.inject("timeout_after", method="PATCH", times=1, delay=0.5)
        with pytest.raises(Exception, match="timed out"):
            core.patch_node("n1", {"spec": {"unschedulable": True}}, _request_timeout=0.2)
        assert core.read_node("n1").spec.unschedulable is True  # done, though the answer never came
        kube_api.inject("timeout_before", method="PATCH", times=1, delay=0.5)
        with pytest.raises(Exception, match="timed out"):
            core.patch_node("n1", {"spec": {"unschedulable": None}}, _request_timeout=0.2)
        assert core.read_node("n1").spec.unschedulable is True  # not done
        assert core.read_node("n1").metadata.name == "n1"  # faults used up


def test_a_failure_rate_is_seeded_and_applies_to_that_share_of_requests(kube_api: FakeKubeAPI) -> None:
    kube_api.add_node("n1")
    fault = kube_api.inject("status", status=500, rate=0.3)
    codes = [_raw(kube_api, "GET", "/api/v1/nodes/n1").status_code for _ in range(200)]
    assert 40 <= codes.count(500) <= 80 and codes.count(500) == fault.fired
    assert set(codes) == {200, 500}


def test_a_pdb_still_being_processed_is_429_with_retry_after_and_the_apiservers_body(
    kube_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    """checkAndDecrement in eviction.go: status.observedGeneration < metadata.generation -> 429, Retry-After 10."""
    kube_api.add_pod("ml", "web-0", "n1", labels={"app": "web"})
    kube_api.add_pdb("ml", "web-pdb", {"app": "web"}, disruptions_allowed=5, unprocessed_for=0.5)
    with pytest.raises(ApiException) as blocked:
        _evict(core, "ml", "web-0")
    assert blocked.value.status == 429
    assert blocked.value.headers.get("Retry-After") == "10"
    assert _status(blocked.value)["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web-pdb is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
    time.sleep(0.6)  # the disruption controller catches up
    _evict(core, "ml", "web-0")
    assert kube_api.pdbs[("ml", "web-pdb")]["status"]["disruptionsAllowed"] == 4


# --------------------------------------------------------------------------- RBAC

SA_USER = "system:serviceaccount:gpu-ops:rel-remediate"


def test_with_the_charts_rbac_what_it_grants_works_and_anything_else_is_the_apiservers_403(
    kube_api: FakeKubeAPI, core: client.CoreV1Api, default_chart_rbac: ChartRbac
) -> None:
    kube_api.add_node("n1")
    kube_api.add_pod("ml", "web-0", "n1", labels={"app": "web"})
    kube_api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
    assert default_chart_rbac.service_account == ("gpu-ops", "rel-remediate")

    # Granted: what remediate's code calls (the ClusterRole, the Role in its namespace, the events Role).
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["web-0"]
    core.list_namespaced_pod("gpu-ops")
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "n1.test", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000001Z",
        "action": "Cordon",
        "reason": "RemediateCordoned",
        "type": "Warning",
        "reportingController": "remediate.io/remediate",
        "reportingInstance": "test",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    assert _raw(kube_api, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", event).status_code == 201
    assert requests.get(
        kube_api.url + "/version", headers={"Authorization": f"Bearer {kube_api.token}"}, timeout=scaled(5)
    ).ok

    # Not granted: the same Event anywhere but `default`, deleting a pod, reading a DaemonSet.
    elsewhere = {**event, "metadata": {"name": "n1.test", "namespace": "ml"}}
    denied = _raw(kube_api, "POST", "/apis/events.k8s.io/v1/namespaces/ml/events", elsewhere)
    assert denied.status_code == 403
    assert denied.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'events.events.k8s.io is forbidden: User "{SA_USER}" cannot create resource "events" in API '
        'group "events.k8s.io" in the namespace "ml"',
        "reason": "Forbidden",
        "details": {"group": "events.k8s.io", "kind": "events"},
        "code": 403,
    }
    with pytest.raises(ApiException) as deleting:
        core.delete_namespaced_pod("web-0", "ml")
    assert deleting.value.status == 403
    assert _status(deleting.value)["message"] == (
        f'pods "web-0" is forbidden: User "{SA_USER}" cannot delete resource "pods" in API group "" '
        'in the namespace "ml"'
    )
    assert _status(deleting.value)["details"] == {"name": "web-0", "kind": "pods"}
    daemonset = _raw(kube_api, "GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/dcgm-exporter")
    assert daemonset.status_code == 403
    assert (
        'cannot get resource "daemonsets" in API group "apps" in the namespace "kube-system"'
        in (daemonset.json()["message"])
    )
    assert kube_api.pod("ml", "web-0") is not None and kube_api.changes_of("delete") == []


def test_without_the_charts_kubernetes_actions_rbac_a_cordon_fails_with_403(
    kube_api: FakeKubeAPI, kube_client: KubeClient, helm: Helm
) -> None:
    """A gap between chart and code fails: here the chart grants only nodes `get` (the owner check of node
    steps), nothing else the k8s.* actions need: the breaker's node count is refused."""
    rbac = chart_rbac(helm, {"rbac": {"kubernetesActions": False}})
    kube_api.add_node("gpu-1")
    kube_api.authorize_as(rbac.objects, rbac.service_account)
    cordon = CordonAction(lambda: kube_client, FAST)

    with pytest.raises(KubeError) as refused:
        cordon.plan({}, context(labels={"Hostname": "gpu-1"}, breaker=memory_breaker()))

    assert refused.value.code == 403
    assert str(refused.value) == (
        f'LIST nodes: 403 Forbidden: nodes is forbidden: User "{SA_USER}" cannot list resource "nodes" in API '
        'group "" at the cluster scope'
    )
    assert kube_api.changes == []


def test_rbac_rules_apply_where_their_binding_says() -> None:
    cluster_role = {
        "kind": "ClusterRole",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]}],
    }
    role = {
        "kind": "Role",
        "metadata": {"name": "one-node", "namespace": "ml"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"], "resourceNames": ["only-this"]}],
    }
    sa = {"kind": "ServiceAccount", "name": "sa", "namespace": "ops"}
    objects = [
        cluster_role,
        role,
        # A RoleBinding to a ClusterRole grants its rules in the binding's namespace only.
        {
            "kind": "RoleBinding",
            "metadata": {"name": "b1", "namespace": "ml"},
            "subjects": [sa],
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "b2", "namespace": "ml"},
            "subjects": [sa],
            "roleRef": {"kind": "Role", "name": "one-node"},
        },
        # Bound to someone else: grants this ServiceAccount nothing.
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b3"},
            "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": "ops"}],
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
        },
    ]
    rbac = Rbac.of(objects, ("ops", "sa"))

    def allowed(method: str, path: str) -> bool:
        return rbac.check(method, path) is None

    assert allowed("GET", "/api/v1/namespaces/ml/pods/web-0")
    assert allowed("GET", "/api/v1/namespaces/ml/pods/web-0/log")
    assert not allowed("GET", "/api/v1/namespaces/other/pods/web-0")
    assert not allowed("GET", "/api/v1/pods")  # list, and cluster-wide
    assert not allowed("POST", "/api/v1/namespaces/ml/pods/web-0/eviction")  # a subresource is its own resource
    assert allowed("DELETE", "/apis/apps/v1/namespaces/ml/deployments/only-this")
    assert not allowed("DELETE", "/apis/apps/v1/namespaces/ml/deployments/another")
    assert allowed("GET", "/version")


# --------------------------------------------------------------------------- TokenReview


def test_a_token_review_names_the_pod_bound_service_account_for_a_shared_audience(
    kube_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    kube_api.add_node("node-a")
    pod = kube_api.add_pod("ns", "agent-x", "node-a", owner="DaemonSet", service_account="agent")
    token = kube_api.issue_token("ns", "agent-x", audiences=("remediate-agent", "other"))
    auth = client.AuthenticationV1Api(api_client)

    def review(token: str, audiences: list[str] | None) -> client.V1TokenReviewStatus:
        spec = client.V1TokenReviewSpec(token=token, audiences=audiences)
        return auth.create_token_review(client.V1TokenReview(spec=spec)).status

    good = review(token, ["remediate-agent"])
    assert good.authenticated is True
    assert good.audiences == ["remediate-agent"]
    assert good.user.username == "system:serviceaccount:ns:agent"
    assert "system:serviceaccounts:ns" in good.user.groups
    assert good.user.extra["authentication.kubernetes.io/pod-name"] == ["agent-x"]
    assert good.user.extra["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert good.user.extra["authentication.kubernetes.io/node-name"] == ["node-a"]

    # No audience named: the API server's own, which this token is not for.
    for status in (review(token, None), review(token, ["someone-else"]), review("made-up", ["remediate-agent"])):
        assert not status.authenticated
        assert status.error.startswith("[invalid bearer token, ")
    assert 'token audiences ["remediate-agent", "other"] is invalid for the target audiences' in (
        review(token, None).error
    )
    with pytest.raises(ApiException) as empty:
        review("", ["remediate-agent"])
    assert empty.value.status == 400

    # Bound to the pod: once it is gone (or replaced under its name), the token is invalid.
    kube_api.pods.pop(("ns", "agent-x"))
    kube_api.add_pod("ns", "agent-x", "node-a", owner="DaemonSet", service_account="agent")
    assert (
        review(token, ["remediate-agent"]).error == "[invalid bearer token, service account token has been invalidated]"
    )


def _job(name: str, restart: str = "Never") -> dict[str, Any]:
    pod = {"nodeName": "n1", "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"template": {"spec": pod}}}


def test_a_job_is_created_once_refused_when_invalid_and_finished_with_its_pod_and_log(
    kube_api: FakeKubeAPI, api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    batch = client.BatchV1Api(api_client)
    created = batch.create_namespaced_job("ml", _job("burn-1"))
    assert created.metadata.uid and created.status.conditions is None
    with pytest.raises(ApiException) as again:
        batch.create_namespaced_job("ml", _job("burn-1"))
    assert again.value.status == 409 and _status(again.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as invalid:
        batch.create_namespaced_job("ml", _job("burn-2", restart="Always"))
    causes = _status(invalid.value)["details"]["causes"]
    assert invalid.value.status == 422 and [c["field"] for c in causes] == ["spec.template.spec.restartPolicy"]
    pod_name = kube_api.finish_job("ml", "burn-1", succeeded=True, log='{"figure": 1}\n')
    done = batch.read_namespaced_job("burn-1", "ml")
    assert [(c.type, c.status) for c in done.status.conditions] == [("Complete", "True")] and done.status.succeeded == 1
    (pod,) = core.list_namespaced_pod("ml", label_selector="batch.kubernetes.io/job-name=burn-1").items
    assert pod.metadata.name == pod_name and pod.spec.node_name == "n1" and pod.status.phase == "Succeeded"
    assert (
        pod.metadata.owner_references[0].kind == "Job" and pod.metadata.owner_references[0].uid == created.metadata.uid
    )
    assert core.read_namespaced_pod_log(pod_name, "ml") == '{"figure": 1}\n'
