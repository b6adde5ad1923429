"""remediate.kube: building the client (kubeconfig, in-cluster, never $KUBECONFIG on its own), lazy import, error
translation at the boundary, and the pure rules (names, selectors, pod verdicts, PDB forecasts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remediate.errors import ActionError, RetryableActionError
from remediate.kube import (
    KubeClient,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    LabelSelector,
    NodeNameError,
    PdbInfo,
    PodInfo,
    SelectorError,
    check_node_name,
    check_taint_key,
    classify_pod,
    parse_label_selector,
    pdb_forecast,
    resolve_node_name,
    translate,
)
from remediate.kube.errors import error_for_status, parse_status
from remediate.kube.model import DrainOptions, OwnerRef, SelectorRequirement, check_taint_value
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.waiting import scaled

ORDER = ("node", "kubernetes_node", "Hostname", "hostname", "instance")


def test_importing_remediate_does_not_import_the_kubernetes_client() -> None:
    code = (
        "import sys, remediate.cli, remediate.actions, remediate.server, remediate.kube;"
        "from remediate.actions import default_registry; default_registry();"
        "print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=scaled(60))
    assert out.stdout.strip() == "False"


def test_the_client_reads_the_kubeconfig_given(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    kube_api.add_node("n1")
    given = KubeClient(kubeconfig=kubeconfig)
    assert [n.name for n in given.list_nodes()] == ["n1"]
    assert given.source == f"kubeconfig {kubeconfig} -> {kube_api.url}"
    given.close()


def test_kubeconfig_and_the_home_kube_config_are_never_read_on_their_own(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laptop's current context may be production; acting on it needs the setting, said explicitly."""
    kube_api.add_node("n1")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(kubeconfig.read_text())  # both reach the cluster: neither is used
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(
        KubeConfigError, match=r"no Kubernetes cluster configured: set kubeconfig / REMEDIATE_KUBECONFIG"
    ):
        KubeClient().get_node("n1")
    assert kube_api.count("GET", r"/api/v1/nodes/n1") == 0


def test_a_context_of_the_kubeconfig_can_be_chosen(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    path = kube_api.write_kubeconfig(tmp_path / "kc", context="prod")
    kube_api.add_node("n1")
    with pytest.raises(KubeConfigError, match="staging"):
        KubeClient(kubeconfig=path, context="staging").list_nodes()
    chosen = KubeClient(kubeconfig=path, context="prod")
    assert len(chosen.list_nodes()) == 1
    chosen.close()


def test_without_any_configuration_the_error_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match=r"no Kubernetes cluster configured.*REMEDIATE_KUBECONFIG"):
        KubeClient().get_node("n1")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match="in-cluster service account"):
        KubeClient().get_node("n1")  # no token file outside a pod


def test_an_unreachable_api_is_a_retryable_error(tmp_path: Path) -> None:
    api = FakeKubeAPI()
    path = api.write_kubeconfig(tmp_path / "kc")
    api.close()  # nothing listens there any more
    client = KubeClient(kubeconfig=path, request_timeout=0.5)
    with pytest.raises(KubeUnavailable, match="GET nodes/n1: the API did not answer"):
        client.get_node("n1")
    client.close()


@pytest.mark.parametrize(
    ("code", "reason", "kind", "retryable"),
    [
        (500, "InternalError", KubeUnavailable, True),
        (503, "ServiceUnavailable", KubeUnavailable, True),
        (504, "Timeout", KubeUnavailable, True),
        (404, "NotFound", KubeNotFound, False),
        (409, "Conflict", KubeConflict, False),
        (429, "TooManyRequests", KubeTooManyRequests, False),
        (403, "Forbidden", KubeError, False),
        (422, "Invalid", KubeError, False),
    ],
)
def test_api_statuses_become_named_errors_with_the_api_message(
    code: int, reason: str, kind: type[Exception], retryable: bool
) -> None:
    body = f'{{"kind":"Status","status":"Failure","message":"the words of the API","reason":"{reason}","code":{code}}}'
    error = error_for_status("PATCH nodes/n1", parse_status(code, body))
    assert type(error) is kind
    assert isinstance(error, RetryableActionError) is retryable
    assert isinstance(error, ActionError)
    assert str(error) == f"PATCH nodes/n1: {code} {reason}: the words of the API"


def test_the_official_clients_exceptions_are_translated_and_chained() -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import ProtocolError, ReadTimeoutError

    api = ApiException(status=429, reason="Too Many Requests")
    api.body = (
        '{"reason":"TooManyRequests","message":"Cannot evict pod","details":{"causes":'
        '[{"reason":"DisruptionBudget","message":"needs 2"}]}}'
    )
    blocked = translate(api, "POST pods/a/b/eviction")
    assert isinstance(blocked, KubeTooManyRequests) and blocked.status.causes[0]["reason"] == "DisruptionBudget"
    assert isinstance(translate(ReadTimeoutError(None, "/", "read timed out"), "GET"), KubeUnavailable)
    assert isinstance(translate(ProtocolError("Connection aborted."), "GET"), KubeUnavailable)
    assert isinstance(translate(ConnectionResetError(), "GET"), KubeUnavailable)
    assert isinstance(translate(ValueError("bad model"), "GET"), KubeError)
    odd = translate(ApiException(status=502, reason="Bad Gateway"), "GET")  # a proxy's HTML page, no Status
    assert isinstance(odd, KubeUnavailable) and "502" in str(odd)


# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("gpu-node-1", True),
        ("ip-10-0-0-1.ec2.internal", True),
        ("10.0.0.7", True),
        ("Gpu-Node", False),
        ("gpu_node", False),
        ("-gpu", False),
        ("gpu.", False),
        ("", False),
        ("a" * 254, False),
        ("gpu node", False),
        ("../etc", False),
        ("gpu-node-1\n", False),
    ],
)
def test_node_names_must_be_dns_1123_subdomains(name: str, ok: bool) -> None:
    assert (check_node_name(name) is None) is ok


def test_node_resolution_takes_the_first_label_in_order_and_strips_the_port() -> None:
    assert resolve_node_name({"instance": "gpu-1:9100"}, ORDER).name == "gpu-1"
    ref = resolve_node_name({"hostname": "b", "Hostname": "a", "instance": "c:1"}, ORDER)
    assert (ref.name, ref.source) == ("a", "label Hostname")
    assert resolve_node_name({"Hostname": "a"}, ORDER, explicit="z").source == "param node"
    with pytest.raises(NodeNameError, match="none of the labels"):
        resolve_node_name({"gpu": "1"}, ORDER)
    with pytest.raises(NodeNameError, match="from label instance"):
        resolve_node_name({"instance": "[fd00::1]:9100"}, ORDER)


def test_taint_keys_follow_the_qualified_name_rules() -> None:
    assert check_taint_key("remediate.io/gpu-unhealthy") is None
    assert check_taint_key("dedicated") is None
    assert check_taint_key("Bad.Prefix/x") is not None
    assert check_taint_key("a/" + "x" * 64) is not None
    assert check_taint_key("/x") is not None
    assert check_taint_key("dedicated\n") is not None
    assert check_taint_key("a.io\n/x") is not None
    assert check_taint_value("gpu\n") is not None


def _pod(name: str, **kwargs: object) -> PodInfo:
    defaults: dict[str, object] = {"owners": (OwnerRef("ReplicaSet", "rs", True),), "phase": "Running"}
    defaults.update(kwargs)
    return PodInfo(namespace="ml", name=name, uid=f"u-{name}", node_name="n1", **defaults)  # type: ignore[arg-type]


def test_pods_are_classified_as_kubectl_drain_does() -> None:
    options = DrainOptions()
    assert classify_pod(_pod("rs"), options).action == "evict"
    assert classify_pod(_pod("ds", owners=(OwnerRef("DaemonSet", "d", True),)), options).action == "skip"
    assert classify_pod(_pod("static", annotations={"kubernetes.io/config.mirror": "x"}), options).action == "skip"
    assert classify_pod(_pod("bare", owners=()), options).action == "refuse"
    assert classify_pod(_pod("bare", owners=()), DrainOptions(force=True)).action == "evict"
    assert classify_pod(_pod("done", owners=(), phase="Succeeded"), options).action == "evict"
    assert classify_pod(_pod("cache", has_emptydir=True), options).action == "refuse"
    assert classify_pod(_pod("cache", has_emptydir=True), DrainOptions(delete_emptydir_data=True)).action == "evict"
    # An owner that is not the controller does not make a pod managed.
    assert classify_pod(_pod("x", owners=(OwnerRef("ReplicaSet", "rs", False),)), options).action == "refuse"


def test_label_selectors_and_pdb_forecasts() -> None:
    selector = LabelSelector(
        {"app": "web"},
        (SelectorRequirement("tier", "In", ("a", "b")), SelectorRequirement("canary", "DoesNotExist")),
    )
    assert selector.matches({"app": "web", "tier": "a"})
    assert not selector.matches({"app": "web", "tier": "c"})
    assert not selector.matches({"app": "web", "tier": "a", "canary": "1"})
    assert LabelSelector().matches({"anything": "x"})
    everything = PdbInfo("ml", "all", LabelSelector(), 1, 2, 2, 2)
    nothing = PdbInfo("ml", "none", None, 0, 0, 0, 0)
    pods = [_pod("a", labels={"app": "web"}), _pod("b", labels={"app": "web"})]
    forecast = pdb_forecast(pods, [everything, nothing])
    assert forecast["ml/a"] == {"pdbs": ["ml/all"], "blocked_by": None}
    assert forecast["ml/b"]["blocked_by"].startswith("PodDisruptionBudget ml/all allows no more disruptions")


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("nvidia.com/gpu.present=true", {"nvidia.com/gpu.present": "true"}, True),
        ("nvidia.com/gpu.present==true", {"nvidia.com/gpu.present": "false"}, False),
        ("pool in (a100, h100),!cordon-exempt", {"pool": "h100"}, True),
        ("pool in (a100, h100),!cordon-exempt", {"pool": "h100", "cordon-exempt": ""}, False),
        ("pool notin (cpu)", {}, True),
        ("zone!=eu-1", {"zone": "eu-1"}, False),
        ("zone!=eu-1", {}, True),
        ("nvidia.com/gpu.present", {"nvidia.com/gpu.present": "anything"}, True),
        ("", {}, True),
    ],
)
def test_label_selector_strings_match_as_the_apiservers_do(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(text).matches(labels) is matches


@pytest.mark.parametrize("text", ["gpu pool", "a=b=c", "in (x)", "Bad Key=1", "a in b"])
def test_a_label_selector_that_does_not_parse_says_which_part(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_pending_finished_and_terminating_pods_are_forecast_without_a_pdb_check() -> None:
    none_allowed = PdbInfo("ml", "web", LabelSelector({"app": "web"}), 0, 2, 2, 2)
    pods = [
        _pod("pending", labels={"app": "web"}, phase="Pending"),
        _pod("done", labels={"app": "web"}, phase="Succeeded"),
        _pod("going", labels={"app": "web"}, terminating=True),
        _pod("running", labels={"app": "web"}, phase="Running"),
    ]
    forecast = pdb_forecast(pods, [none_allowed])
    assert [forecast[f"ml/{p}"]["blocked_by"] is None for p in ("pending", "done", "going", "running")] == [
        True,
        True,
        True,
        False,
    ]
    assert forecast["ml/pending"]["no_pdb_check"] == (
        "phase Pending: the eviction API deletes it without a PodDisruptionBudget check"
    )


def test_a_client_knows_whether_a_cluster_is_configured_without_loading_the_kubernetes_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not KubeClient().configured
    assert KubeClient(kubeconfig=tmp_path / "kubeconfig").configured
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # what the kubelet sets in every pod
    assert KubeClient().configured
