"""The Helm chart helm/remediate: lint, render with several values sets, and check what comes out.

Every rendered object must deserialize into the official Kubernetes client's models and pass
kubernetes-validate's strict schema check for Kubernetes 1.30 (built-in kinds; the Prometheus
Operator's CRDs are checked by hand and with promtool). The configs the chart writes must load
through remediate's own settings loader, its playbooks through the playbook loader, and its
copies of the shipped playbooks and rules must equal the repository's (scripts/sync-generated).
"""

from __future__ import annotations

import filecmp
import re
import shutil
import subprocess
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes.client import ApiClient

from remediate.actions import default_registry
from remediate.config.durations import parse_duration
from remediate.config.settings import Settings, read_config_file
from remediate.disk.policy import load_policies
from remediate.kube import EVENT_NAMESPACE
from remediate.playbooks.loading import load_directory
from tests.support.helm import CHART, IMAGE_REPOSITORY, NAMESPACE, RELEASE, Helm, by_kind

ROOT = CHART.parents[1]
FULLNAME = f"{RELEASE}-remediate"

POLICIES = [
    {
        "name": "data-scratch",
        "mountpoint": "/data",
        "roots": ["/data/scratch", "/data/cache"],
        "patterns": ["*"],
        "min_age": "2d",
    },
    {"name": "tmp", "mountpoint": "/", "roots": ["/var/tmp", "/data/cache"], "patterns": ["*.tmp"]},
]
EXTRA_PLAYBOOK = {
    "name": "my-node-notready",
    "match": {"alertname": ["MyNodeDown", "MyNodeFlapping"]},
    "target": "node",
    "steps": [{"action": "log", "with": {"message": "{{ labels.alertname }} on {{ labels.node }}"}}],
}
FULL = {
    "mode": "enforce",
    "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}},
    "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kps"}},
    "alertmanagerConfig": {"enabled": True, "additionalLabels": {"alertmanagerConfig": "remediate"}},
    "networkPolicy": {"enabled": True},
    "grafana": {"dashboards": {"enabled": True, "folder": "GPU fleet"}},
    "auth": {"createReadToken": True},
    "persistence": {"storageClass": "fast-ssd", "size": "5Gi"},
    "server": {
        "config": {"notify_timeout": "20s", "stale_after": "2m"},
        "secretMounts": [{"secretName": "oncall-webhook", "mountPath": "/etc/remediate/oncall"}],
    },
    "playbooks": {"exclude": ["notify-oncall"], "extra": {"my-node-notready.yaml": EXTRA_PLAYBOOK}},
    "agent": {
        "runtimeClassName": "nvidia",
        "priorityClassName": "system-node-critical",
        "cleanupPolicies": POLICIES,
        "gpu": {"powerFloorWatts": 250},
        "config": {"node_aliases": ["gpu-01.example"]},
    },
}
EXTERNAL_DB = {
    "replicaCount": 2,
    "database": {"url": "postgresql+psycopg://remediate:pw@pg.db.svc/remediate"},
    "agent": {"enabled": False},
    "rbac": {"kubernetesActions": False},
}
EXISTING_SECRETS = {
    "auth": {"existingSecret": "my-tokens"},
    "database": {"existingSecret": "my-db", "existingSecretKey": "url"},
    "serviceAccount": {"create": False, "name": "remediate-sa"},
}
VALUE_SETS = {"defaults": {}, "full": FULL, "external-db": EXTERNAL_DB, "existing-secrets": EXISTING_SECRETS}
CRDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> dict[str, list[dict[str, Any]]]:
    return {name: helm.objects(values) for name, values in VALUE_SETS.items()}


def container(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (only,) = by_kind(objects, kind)["spec"]["template"]["spec"]["containers"]
    return only


def configmap_file(objects: list[dict[str, Any]], name: str, key: str = "config.yaml") -> Any:
    return yaml.safe_load(by_kind(objects, "ConfigMap", name)["data"][key])


# --------------------------------------------------------------------------- lint and validity


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm_lint_strict_passes(helm: Helm, values: str) -> None:
    result = helm.lint(VALUE_SETS[values])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_rendered_object_is_a_valid_kubernetes_object(
    rendered: dict[str, list[dict[str, Any]]], values: str
) -> None:
    client = ApiClient()
    for obj in rendered[values]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == RELEASE, name
        if kind in CRDS:
            assert obj["apiVersion"].startswith("monitoring.coreos.com/"), name
            continue
        group_version = obj["apiVersion"].rsplit("/", 1)[-1]
        model = client._ApiClient__deserialize(obj, f"{group_version.capitalize()}{kind}")  # type: ignore[attr-defined]
        assert model.metadata.name == name
        kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_the_default_install_renders_the_expected_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = Counter(o["kind"] for o in rendered["defaults"])
    assert kinds == {
        "ServiceAccount": 2,
        "Secret": 1,
        "ConfigMap": 3,
        "PersistentVolumeClaim": 1,
        "ClusterRole": 2,  # the Kubernetes actions'; tokenreviews for the agents' credentials
        "ClusterRoleBinding": 2,
        "Role": 3,  # agent discovery in the release namespace, Events in default, k8s.burnin's Jobs
        "RoleBinding": 3,
        "Service": 1,
        "Deployment": 1,
        "DaemonSet": 1,
        "NetworkPolicy": 2,  # server and agent, on by default
        "Pod": 1,  # helm test
    }


def test_skip_tests_leaves_the_helm_test_pod_out_of_a_template_for_kubectl_apply(helm: Helm) -> None:
    """`helm template | kubectl apply` created the helm test pod (docs: --skip-tests)."""
    (test_pod,) = [o for o in helm.objects() if o["kind"] == "Pod"]
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert not [o for o in helm.objects(extra=("--skip-tests",)) if o["kind"] == "Pod"]
    assert "--skip-tests | kubectl apply" in (ROOT / "docs" / "install.md").read_text()


def test_invalid_values_are_refused(helm: Helm) -> None:
    bad_mode = helm.lint({"mode": "yolo"})
    assert bad_mode.returncode != 0
    assert "mode must be one of the following" in bad_mode.stdout + bad_mode.stderr
    bad_root = helm.lint({"agent": {"cleanupPolicies": [{**POLICIES[0], "roots": ["data"]}]}})
    assert bad_root.returncode != 0
    typo = helm.lint({"agnet": {"enabled": False}})
    assert typo.returncode != 0
    assert "agnet" in typo.stdout + typo.stderr
    short_token = helm.lint({"auth": {"operatorToken": "fifteen-chars-x"}})  # the server would refuse it
    assert short_token.returncode != 0
    assert "operatorToken" in short_token.stdout + short_token.stderr
    sqlite_replicas = helm.template({"replicaCount": 2}, check=False)
    assert sqlite_replicas.returncode != 0
    assert "replicaCount > 1 needs an external database" in sqlite_replicas.stderr


def test_the_image_is_a_value_users_set_and_leaving_it_unset_is_refused_naming_it(helm: Helm) -> None:
    for unset in (None, {"image": {"repository": ""}}):
        result = helm.template(unset, base=False, check=False)
        assert result.returncode != 0, result.stdout[:200]
        assert "image.repository is not set" in result.stderr, result.stderr
    images = {
        c["image"]
        for o in helm.objects({"image": {"tag": "1.2.3"}})
        if o["kind"] in ("Deployment", "DaemonSet", "Pod")
        for c in [
            *o["spec"].get("template", o)["spec"].get("initContainers", []),
            *o["spec"].get("template", o)["spec"]["containers"],
        ]
    }
    assert images == {f"{IMAGE_REPOSITORY}:1.2.3"}


def test_with_an_existing_secret_two_renders_are_identical_for_gitops(helm: Helm) -> None:
    """Argo CD and Flux render with `helm template` (no cluster: `lookup` is empty), and every render
    generating new tokens would be a diff forever; with auth.existingSecret nothing is generated."""
    values = {"auth": {"existingSecret": "remediate-tokens"}}
    first, second = helm.template(values).stdout, helm.template(values).stdout
    assert first == second
    assert not [o for o in helm.objects(values) if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-tokens")]
    # without it, the tokens are generated per render: what the paragraph in docs/install.md warns of
    assert helm.template().stdout != helm.template().stdout


# --------------------------------------------------------------------------- RBAC


def rules(obj: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (group, resource, tuple(sorted(rule["verbs"])))
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


# Every Kubernetes API call remediate makes, by the official client's method name, and the RBAC rule
# (group, resource, verb) it needs. `test_every_api_call_in_the_code_is_in_this_table` reads the code;
# the chart's rules must be exactly what this table derives: nothing missing, nothing unused.
CLUSTER_CALLS = {
    "read_node": ("", "nodes", "get"),  # cordon/taint/drain: the node before and after; every node step: its owner
    "list_node": ("", "nodes", "list"),  # the breaker: how many nodes there are
    "patch_node": ("", "nodes", "patch"),  # cordon, uncordon, taint, untaint
    "list_pod_for_all_namespaces": ("", "pods", "list"),  # drain: the node's pods
    "read_namespaced_pod": ("", "pods", "get"),  # drain: waiting for an evicted pod to go
    "create_namespaced_pod_eviction": ("", "pods/eviction", "create"),  # drain
    "list_pod_disruption_budget_for_all_namespaces": ("policy", "poddisruptionbudgets", "list"),  # drain plan
}
EVENT_CALLS = {
    "create_namespaced_event": ("events.k8s.io", "events", "create"),  # an Event on the node per change
}
NAMESPACE_CALLS = {
    "list_namespaced_pod": ("", "pods", "list"),  # agent discovery, in the release namespace
    "read_namespaced_pod": ("", "pods", "get"),  # an agent's credential: the pod its token is bound to
    "read_namespaced_daemon_set": ("apps", "daemonsets", "get"),  # ... and the UID of the DaemonSet it names
}
BURNIN_CALLS = {
    "create_namespaced_job": ("batch", "jobs", "create"),  # k8s.burnin: its Job, in the release namespace
    "read_namespaced_job": ("batch", "jobs", "get"),  # ... read until it finished
    "read_namespaced_pod_log": ("", "pods/log", "get"),  # ... and its pod's log, the figure
}
AGENT_CREDENTIAL_CALLS = {
    "create_token_review": ("authentication.k8s.io", "tokenreviews", "create"),  # who an agent's token is
}
CLUSTER_WATCHES = {
    "list_node": ("", "nodes", "watch"),  # the node cache (kube/nodecache.py): list_node(watch=True)
}
API_CLIENT_FILES = (
    "remediate/kube/client.py",
    "remediate/kube/agents.py",
    "remediate/kube/nodecache.py",
    "remediate/kube/jobs.py",
)


def derived_rules(*calls: dict[str, tuple[str, str, str]]) -> set[tuple[str, str, tuple[str, ...]]]:
    verbs: dict[tuple[str, str], set[str]] = {}
    for group, resource, verb in (rule for table in calls for rule in table.values()):
        verbs.setdefault((group, resource), set()).add(verb)
    return {(group, resource, tuple(sorted(v))) for (group, resource), v in verbs.items()}


def test_every_api_call_in_the_code_is_in_this_table() -> None:
    import re

    import remediate

    package = Path(remediate.__file__).parent
    # Only these files talk to the official client: any other would have its calls unchecked here.
    users = {
        str(path.relative_to(package.parent))
        for path in package.rglob("*.py")
        if re.search(
            r"\b(CoreV1Api|PolicyV1Api|EventsV1Api|AppsV1Api|BatchV1Api|CoordinationV1Api|AuthenticationV1Api)\b"
            r"|core_api\(",
            path.read_text(),
        )
    }
    assert users == set(API_CLIENT_FILES)
    called = set()
    for name in API_CLIENT_FILES:
        text = (package.parent / name).read_text()
        receivers = r"(?:\bcore|\bpolicy|\bevents|\bbatch|\.api\(\)|\._core\(\)|V1Api\(api\))"
        called |= set(re.findall(receivers + r"\.([a-z_]+)\(", text))
    assert called == (
        set(CLUSTER_CALLS) | set(EVENT_CALLS) | set(NAMESPACE_CALLS) | set(AGENT_CREDENTIAL_CALLS) | set(BURNIN_CALLS)
    )
    watched = {
        name
        for file in API_CLIENT_FILES
        for name in re.findall(r"\.([a-z_]+)\(\s*watch=True", (package.parent / file).read_text())
    }
    assert watched == set(CLUSTER_WATCHES)
    # Events are written in one namespace only, which the chart's Role for them names.
    assert re.findall(r"create_namespaced_event\(\s*(\w+)", (package / "kube" / "client.py").read_text()) == [
        "EVENT_NAMESPACE"
    ]


def test_rbac_is_exactly_what_the_actions_and_agent_discovery_need(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Finding 15: core events create/patch, events.k8s.io patch, daemonsets get and leases were granted unused."""
    objects = rendered["defaults"]
    assert rules(by_kind(objects, "ClusterRole", FULLNAME)) == derived_rules(CLUSTER_CALLS, CLUSTER_WATCHES)
    credentials = by_kind(objects, "ClusterRole", f"{FULLNAME}-agent-credentials")
    assert rules(credentials) == derived_rules(AGENT_CREDENTIAL_CALLS)
    role = by_kind(objects, "Role", FULLNAME)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules(role) == derived_rules(NAMESPACE_CALLS)
    # The agent DaemonSet only: its UID is what the enrollment compares with an agent pod's ownerReference.
    (daemonsets,) = [rule for rule in role["rules"] if rule["resources"] == ["daemonsets"]]
    assert daemonsets["resourceNames"] == [by_kind(objects, "DaemonSet")["metadata"]["name"]]
    # Events create was granted in every namespace; the code writes them in `default`.
    events = by_kind(objects, "Role", f"{FULLNAME}-events")
    assert events["metadata"]["namespace"] == EVENT_NAMESPACE
    assert rules(events) == derived_rules(EVENT_CALLS)
    burnin = by_kind(objects, "Role", f"{FULLNAME}-burnin")
    assert burnin["metadata"]["namespace"] == NAMESPACE
    # Its pods are found by the release namespace's pods list (NAMESPACE_CALLS), granted by the Role above.
    assert rules(burnin) == derived_rules(BURNIN_CALLS)
    for binding_kind, role_kind, name in (
        ("ClusterRoleBinding", "ClusterRole", FULLNAME),
        ("ClusterRoleBinding", "ClusterRole", f"{FULLNAME}-agent-credentials"),
        ("RoleBinding", "Role", FULLNAME),
        ("RoleBinding", "Role", f"{FULLNAME}-events"),
        ("RoleBinding", "Role", f"{FULLNAME}-burnin"),
    ):
        binding = by_kind(objects, binding_kind, name)
        assert binding["metadata"].get("namespace") == role_namespace(objects, role_kind, name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    # Nothing is bound to the agent's service account.
    bound = {s["name"] for o in objects if o["kind"].endswith("Binding") for s in o["subjects"]}
    assert bound == {FULLNAME}


def role_namespace(objects: list[dict[str, Any]], kind: str, name: str) -> str | None:
    return by_kind(objects, kind, name)["metadata"].get("namespace")


def test_without_kubernetes_actions_and_agents_the_only_rbac_is_nodes_get_for_the_owner_check(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """`kubernetesActions: false` granted nothing on nodes, and every node step failed at its owner check
    (`GET nodes/X: 403`): nodes `get` alone is granted then, read-only."""
    objects = rendered["external-db"]
    rbac = [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    name = f"{FULLNAME}-node-reader"
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rbac) == [
        ("ClusterRole", name),
        ("ClusterRoleBinding", name),
    ]
    assert rules(by_kind(objects, "ClusterRole", name)) == derived_rules({"read_node": CLUSTER_CALLS["read_node"]})
    binding = by_kind(objects, "ClusterRoleBinding", name)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    assert not [o for o in objects if o["kind"] == "DaemonSet"]
    # With the Kubernetes actions, their ClusterRole has nodes get already: no second one.
    assert not [o for o in rendered["defaults"] if o["metadata"]["name"] == name]


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_namespaced_object_names_the_release_namespace(
    rendered: dict[str, list[dict[str, Any]]], values: str
) -> None:
    """Finding 15: `helm template | kubectl apply` put every object into kubectl's current namespace."""
    kinds = {o["kind"] for o in rendered[values]}
    assert kinds & CLUSTER_SCOPED or values == "external-db"
    for obj in rendered[values]:
        where = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert where is None, obj["metadata"]["name"]
        elif obj["metadata"]["name"] == f"{FULLNAME}-events":
            assert (obj["kind"], where) in (("Role", EVENT_NAMESPACE), ("RoleBinding", EVENT_NAMESPACE))
        else:
            assert where == NAMESPACE, (obj["kind"], obj["metadata"]["name"])


# --------------------------------------------------------------------------- pods


def test_the_server_runs_unprivileged_with_probes_and_its_config(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["defaults"]
    deployment = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    server = container(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "hostPID" not in pod
    assert pod["serviceAccountName"] == FULLNAME
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert server["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert server["args"] == ["serve", "--config", "/etc/remediate/config.yaml"]
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert server["ports"] == [{"name": "http", "containerPort": 9095, "protocol": "TCP"}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-data"
    assert volumes["secrets"]["secret"]["secretName"] == f"{FULLNAME}-tokens"
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    assert {"/etc/remediate/playbooks", "/etc/remediate/secrets", "/var/lib/remediate", "/tmp"} <= mounts
    service = by_kind(objects, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_the_install_pages_figures_for_the_server_are_what_the_chart_renders(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """docs/install.md said the memory limit is 1Gi while the chart rendered 768Mi.
    The figures of the Deployment's row are read from the page and compared with the default render."""
    page = (ROOT / "docs/install.md").read_text(encoding="utf-8")
    (row,) = [line for line in page.splitlines() if line.startswith("| Deployment `remediate-")]
    documented = {
        "replicas": re.search(r"(\d+) replicas?\b", row),
        "uid": re.search(r"\buid (\d+)", row),
        "memory limit": re.search(r"memory limit (\d+[KMG]i)\b", row),
        "memory request": re.search(r"\brequest (\d+[KMG]i)\b", row),
    }
    assert all(documented.values()), f"docs/install.md's Deployment row lost a figure: {documented}"
    objects = rendered["defaults"]
    deployment = by_kind(objects, "Deployment")
    renders = {
        "replicas": str(deployment["spec"]["replicas"]),
        "uid": str(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]),
        "memory limit": container(objects, "Deployment")["resources"]["limits"]["memory"],
        "memory request": container(objects, "Deployment")["resources"]["requests"]["memory"],
    }
    assert {name: match.group(1) for name, match in documented.items() if match} == renders


def test_the_agent_runs_on_gpu_nodes_with_only_the_capabilities_its_actions_need(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Finding 13: KILL and hostPID served only the training wake-up, which never reaches a job in another
    pod (it registers its own pod's host name and PID namespace): dropped by default, each a value."""
    objects = rendered["defaults"]
    daemonset = by_kind(objects, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    agent = container(objects, "DaemonSet")
    assert pod["hostPID"] is False
    assert pod["securityContext"]["runAsUser"] == 0  # added capabilities reach root processes only
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == f"{FULLNAME}-agent"
    assert "hostNetwork" not in pod
    assert "runtimeClassName" not in pod
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert agent["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "FOWNER", "SYS_ADMIN"]},
    }
    assert agent["args"] == ["agent", "--config", "/etc/remediate/config.yaml"]
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "agent"}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "agent"}
    assert "resources" in agent and "limits" not in agent["resources"].get("requests", {})
    assert "nvidia.com/gpu" not in str(agent["resources"])  # it must not take a GPU from the jobs
    env = {e["name"]: e for e in agent["env"]}
    assert env["REMEDIATE_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"]["hostPath"] == {"path": "/var/lib/remediate-agent", "type": "DirectoryOrCreate"}
    assert volumes["training-control"]["hostPath"] == {"path": "/run/remediate/training", "type": "DirectoryOrCreate"}
    # The init container asks the server for this node's credential with the pod's own projected
    # token (test_no_agent_side_object_references_a_secret); only it mounts that token.
    (init,) = pod["initContainers"]
    assert init["args"] == [
        "agent-credential",
        "$(REMEDIATE_NODE_NAME)",
        "--server",
        f"http://{FULLNAME}.{NAMESPACE}.svc:9095",
        "--service-account-token-file",
        "/var/run/secrets/remediate/token",
        "--output",
        "/etc/remediate/secrets/node-credential",
    ]
    assert {m["name"] for m in init["volumeMounts"]} == {"service-account-token", "credential"}
    assert "service-account-token" not in {m["name"] for m in agent["volumeMounts"]}
    assert volumes["credential"]["emptyDir"]["medium"] == "Memory"
    # The agent's service account has no token and no permissions.
    agent_sa = by_kind(objects, "ServiceAccount", f"{FULLNAME}-agent")
    assert agent_sa["automountServiceAccountToken"] is False


def test_each_agent_capability_and_host_pids_is_a_value(helm: Helm) -> None:
    def agent_security(values: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        objects = helm.objects({"agent": values})
        return by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]["hostPID"], container(objects, "DaemonSet")[
            "securityContext"
        ]

    wake_up, security = agent_security({"hostPID": True, "capabilities": {"KILL": True}})
    assert wake_up is True
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "FOWNER", "KILL", "SYS_ADMIN"]}
    off = {"SYS_ADMIN": False, "DAC_OVERRIDE": False, "FOWNER": False, "KILL": False}
    _, none = agent_security({"capabilities": off})
    assert none["capabilities"] == {"drop": ["ALL"]}
    assert none["allowPrivilegeEscalation"] is False and none["privileged"] is False


def test_host_pids_and_host_paths_belong_to_the_agent_only(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for values, objects in rendered.items():
        for obj in objects:
            spec = obj.get("spec", {}).get("template", {}).get("spec") or (obj["spec"] if obj["kind"] == "Pod" else {})
            if obj["kind"] == "DaemonSet":
                continue
            assert not spec.get("hostPID"), (values, obj["metadata"]["name"])
            assert not any("hostPath" in v for v in spec.get("volumes", [])), (values, obj["metadata"]["name"])


def test_cleanup_policy_roots_are_mounted_from_the_host_at_the_same_paths(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = rendered["full"]
    pod = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    agent = container(objects, "DaemonSet")
    host_paths = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    roots = {name: spec["path"] for name, spec in host_paths.items() if name.startswith("cleanup-root-")}
    assert sorted(roots.values()) == ["/data/cache", "/data/scratch", "/var/tmp"]
    assert all(host_paths[name]["type"] == "Directory" and mounts[name] == path for name, path in roots.items())
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    # The policies file the agent reads is the one remediate's loader accepts.
    policies = tmp_path / "policies.yaml"
    policies.write_text(by_kind(objects, "ConfigMap", f"{FULLNAME}-agent-config")["data"]["cleanup-policies.yaml"])
    assert load_policies(policies).names() == ["data-scratch", "tmp"]


# --------------------------------------------------------------------------- configs, playbooks, secrets


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_the_config_files_load_with_remediates_own_settings_loader(
    rendered: dict[str, list[dict[str, Any]]], values: str, tmp_path: Path
) -> None:
    objects = rendered[values]
    server_file = tmp_path / "server.yaml"
    server_file.write_text(by_kind(objects, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    server = Settings.of(**read_config_file(server_file))
    assert server.server.bind == "0.0.0.0:9095"
    assert server.auth.token_file == Path("/etc/remediate/secrets/token")
    assert server.auth.token_roles == ("webhook",)  # AlertManager's token: it cannot approve, pause or reset
    assert server.auth.operator_token_file == Path("/etc/remediate/secrets/operator-token")
    if server.agent.selector:
        daemonset = by_kind(objects, "DaemonSet")["metadata"]["name"]
        assert server.agent.daemonset == daemonset  # discovery refuses pods this DaemonSet does not control
    assert server.agent.node_name is None  # in a cluster every node step goes to an agent
    if values == "full":
        assert server.engine.mode == "enforce"
        assert server.notify.timeout == 20.0
        assert server.auth.read_token_file == Path("/etc/remediate/secrets/read-token")
    if values in ("external-db", "existing-secrets"):
        assert server.store.url == Settings().store.url  # not in the file: from the Secret, by env
        env = {e["name"]: e for e in container(objects, "Deployment")["env"]}
        ref = env["REMEDIATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == (
            {"name": "my-db", "key": "url"}
            if values == "existing-secrets"
            else {
                "name": f"{FULLNAME}-tokens",
                "key": "database-url",
            }
        )
    else:
        assert server.store.url == "sqlite:////var/lib/remediate/remediate.db"
    if values == "external-db":
        assert server.agent.selector is None
        return
    assert server.agent.namespace == NAMESPACE
    # The server's selector finds exactly the agent DaemonSet's pods.
    daemonset = by_kind(objects, "DaemonSet")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    selector = dict(part.split("=") for part in (server.agent.selector or "").split(","))
    assert selector == daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert not selector.items() <= by_kind(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()

    agent_file = tmp_path / "agent.yaml"
    agent_file.write_text(by_kind(objects, "ConfigMap", f"{FULLNAME}-agent-config")["data"]["config.yaml"])
    agent = Settings.of(**read_config_file(agent_file))
    assert agent.agent.bind == "0.0.0.0:9096"
    assert agent.agent.token_file is None  # never the master: only this node's credential (init container)
    assert agent.agent.node_token_file == Path("/etc/remediate/secrets/node-credential")
    assert agent.agent.state_file == Path("/var/lib/remediate-agent/agent.db")
    assert agent.gpu.backend == "nvml"
    assert agent.gpu.power_floor_percent == 50
    if values == "full":
        assert agent.gpu.power_floor_watts == 250
        assert agent.agent.node_aliases == ("gpu-01.example",)
        assert agent.disk.cleanup_policies_file == Path("/etc/remediate/cleanup-policies.yaml")
    else:
        assert agent.disk.cleanup_policies_file is None


def test_the_playbooks_configmap_ships_the_repositorys_playbooks_plus_the_users(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    shipped = {p.name: p.read_text() for p in sorted((ROOT / "playbooks").glob("*.yaml"))}
    default = by_kind(rendered["defaults"], "ConfigMap", f"{FULLNAME}-playbooks")["data"]
    assert default == shipped

    full = by_kind(rendered["full"], "ConfigMap", f"{FULLNAME}-playbooks")["data"]
    assert set(full) == (set(shipped) - {"notify-oncall.yaml"}) | {"my-node-notready.yaml"}
    for name, text in full.items():
        (tmp_path / name).write_text(text)
    loaded, errors = load_directory(tmp_path, default_registry())
    assert errors == []
    assert "my-node-notready" in {p.name for p in loaded}


def test_tokens_are_generated_unless_given_and_the_agent_sees_only_its_own(
    helm: Helm, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    import base64

    secret = by_kind(rendered["defaults"], "Secret")
    tokens = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert set(tokens) == {"token", "operator-token", "agent-token"}
    assert all(len(t) == 48 and t.isalnum() for t in tokens.values())
    assert len(set(tokens.values())) == 3
    assert set(by_kind(rendered["full"], "Secret")["data"]) == {"token", "operator-token", "agent-token", "read-token"}

    given = helm.objects(
        {
            "auth": {
                "token": "webhook-t-0123456789",
                "operatorToken": "operator-t-0123456789",
                "agentToken": "agent-t-0123456789",
            }
        }
    )
    data = by_kind(given, "Secret")["data"]
    assert base64.b64decode(data["token"]) == b"webhook-t-0123456789"
    assert base64.b64decode(data["operator-token"]) == b"operator-t-0123456789"
    assert base64.b64decode(data["agent-token"]) == b"agent-t-0123456789"

    existing = rendered["existing-secrets"]
    assert not [o for o in existing if o["kind"] == "Secret"]
    volumes = by_kind(existing, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "secrets", "secret": {"secretName": "my-tokens", "defaultMode": 0o440}} in volumes
    assert by_kind(existing, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "remediate-sa"


def _secret_references(spec: Any, where: str = "") -> list[str]:
    """Every place under `spec` that names a Secret: secret volumes, projected secret sources, secretKeyRef,
    envFrom secretRef, imagePullSecrets excepted (the registry's, not remediate's)."""
    found: list[str] = []
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key in ("secret", "secretKeyRef", "secretRef") and value:
                found.append(f"{where}.{key}: {value}")
            elif key != "imagePullSecrets":
                found += _secret_references(value, f"{where}.{key}")
    elif isinstance(spec, list):
        for index, value in enumerate(spec):
            found += _secret_references(value, f"{where}[{index}]")
    return found


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_no_agent_side_object_references_a_secret(
    rendered: dict[str, list[dict[str, Any]]], values: str, tmp_path: Path
) -> None:
    """The DaemonSet mounted the tokens Secret (for its init container), so every GPU node's
    kubelet could read the operator token, the database URL and the master agent secret. Now no agent-side
    object names a Secret at all: the pod's only credential is its own projected token, good at the server for
    this node's credential only (tests/integration/test_agent_enrollment.py)."""
    objects = rendered[values]
    if values == "external-db":  # agent.enabled false: no agent side
        assert not [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent"]
        return
    daemonset = by_kind(objects, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert _secret_references(daemonset) == []  # volumes, init containers, env, envFrom, projected sources
    assert pod["automountServiceAccountToken"] is False  # no token the API server accepts
    (token_volume,) = [v for v in pod["volumes"] if "projected" in v]
    (source,) = token_volume["projected"]["sources"]
    assert source == {"serviceAccountToken": {"audience": "remediate-agent", "expirationSeconds": 600, "path": "token"}}
    server_file = tmp_path / "server.yaml"
    server_file.write_text(by_kind(objects, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    server = Settings.of(**read_config_file(server_file))
    assert server.agent.audience == "remediate-agent"  # the server checks the audience the pods are given
    agent_account = pod["serviceAccountName"]
    assert server.agent.service_account == agent_account
    # Every agent-side object: the DaemonSet, its ConfigMap, ServiceAccount, NetworkPolicy.
    agent_side = [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent"]
    assert {o["kind"] for o in agent_side} >= {"DaemonSet", "ConfigMap", "ServiceAccount"}
    for obj in agent_side:
        assert _secret_references(obj) == [], obj["kind"]
        assert "agent_token" not in str(obj.get("data", {}))
    # No RBAC reaches the agent's account: it may read no Secret (nor anything else) through the API.
    bound = [
        s
        for o in objects
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in o["subjects"]
        if s["name"] == agent_account
    ]
    assert bound == []


def test_an_external_database_takes_several_replicas_and_no_volume(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["external-db"]
    deployment = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0  # test_chart_replicas.py
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


# --------------------------------------------------------------------------- Prometheus Operator objects


def test_servicemonitor_and_prometheusrule_carry_the_release_label_for_kube_prometheus_stack(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    objects = rendered["full"]
    monitor = by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"] == by_kind(objects, "Service")["spec"]["selector"]
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]

    rule = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    shipped_groups = [
        group
        for path in sorted((ROOT / "alertmanager" / "rules").glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    ]
    assert rule["spec"]["groups"] == shipped_groups
    # The rules as the operator hands them to Prometheus pass promtool.
    rules_file = tmp_path / "rendered.rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def playbook_alertnames(texts: list[str]) -> set[str]:
    names: set[str] = set()
    for text in texts:
        alertname = yaml.safe_load(text)["match"]["alertname"]
        names.update([alertname] if isinstance(alertname, str) else alertname)
    return names


def test_the_alertmanagerconfig_routes_every_playbooks_alert_to_the_webhook_with_the_token(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["full"]
    config = by_kind(objects, "AlertmanagerConfig")
    assert config["metadata"]["labels"]["alertmanagerConfig"] == "remediate"
    route = config["spec"]["route"]
    assert route["receiver"] == "remediate"
    assert (route["groupWait"], route["groupInterval"], route["repeatInterval"]) == ("10s", "1m", "30m")
    (matcher,) = route["matchers"]
    playbooks = by_kind(objects, "ConfigMap", f"{FULLNAME}-playbooks")["data"]
    assert matcher["name"] == "alertname" and matcher["matchType"] == "=~"
    assert set(matcher["value"].split("|")) == playbook_alertnames(list(playbooks.values()))
    (receiver,) = config["spec"]["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    assert webhook["url"] == f"http://{FULLNAME}.{NAMESPACE}.svc:9095/webhook"
    assert webhook["sendResolved"] is True
    assert webhook["httpConfig"]["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": f"{FULLNAME}-tokens", "key": "token"},
    }


def test_network_policies_are_on_by_default_and_let_only_the_expected_peers_in(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Finding 9: with the policies off by default, any pod could hold the server's or agents' connections."""
    objects = rendered["defaults"]
    server_pods = by_kind(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    test_pod = by_kind(objects, "Pod")["metadata"]["labels"]

    agent_policy = by_kind(objects, "NetworkPolicy", f"{FULLNAME}-agent")
    assert (
        agent_policy["spec"]["podSelector"]["matchLabels"]
        == (by_kind(objects, "DaemonSet")["spec"]["selector"]["matchLabels"])
    )
    assert agent_policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = agent_policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": server_pods}}]
    assert rule["ports"] == [{"port": 9096, "protocol": "TCP"}]

    server_policy = by_kind(objects, "NetworkPolicy", FULLNAME)
    assert server_policy["spec"]["podSelector"]["matchLabels"] == server_pods
    assert server_policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = server_policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 9095, "protocol": "TCP"}]
    alertmanager, prometheus, helm_test, agents = rule["from"]
    # `namespaceSelector: {}` let in any pod of any namespace that labels itself so.
    monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    # The agents ask the server for their node's credential.
    assert agents == {"podSelector": {"matchLabels": by_kind(objects, "DaemonSet")["spec"]["selector"]["matchLabels"]}}
    assert alertmanager == {
        "namespaceSelector": monitoring,
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "alertmanager"}},
    }
    assert prometheus == {
        "namespaceSelector": monitoring,
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    assert helm_test["podSelector"]["matchLabels"].items() <= test_pod.items()
    assert not helm_test["podSelector"]["matchLabels"].items() <= server_pods.items()


def test_the_server_policy_takes_the_operators_peers(helm: Helm) -> None:
    ops = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sre-tools"}}}
    objects = helm.objects(
        {
            "networkPolicy": {"server": {"prometheus": None, "extraFrom": [ops]}},
            "agent": {"enabled": False},
        }
    )
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    (rule,) = policy["spec"]["ingress"]
    assert [
        peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") for peer in rule["from"]
    ] == [
        "alertmanager",
        "remediate",
        None,
    ]
    assert rule["from"][-1] == ops
    off = helm.objects({"networkPolicy": {"enabled": False}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy"]


# --------------------------------------------------------------------------- resources


MIB = 1024 * 1024
IDLE_WORKER_BYTES = 60 * 10**6
PEAK_PER_BODY_BYTE = 13  # bench/body_memory.py: +104 MiB for an 8 MiB body, one large body per worker at a time
MASTER_AND_EXECUTOR_BYTES = 120 * 10**6  # gunicorn master ~57 MB, executor process ~55 MB


def memory_bytes(quantity: str) -> int:
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * factor)
    return int(quantity)


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_the_server_memory_limit_holds_every_worker_parsing_the_largest_body(
    rendered: dict[str, list[dict[str, Any]]], values: str
) -> None:
    """Finding 13: two workers each parsing a 32 MiB body (~400 MB) went over the 512Mi limit. The limit
    holds every worker parsing the largest body accepted, plus the master and the executor process."""
    objects = rendered[values]
    config = configmap_file(objects, f"{FULLNAME}-config")
    limit = memory_bytes(container(objects, "Deployment")["resources"]["limits"]["memory"])
    peak = (
        config["workers"] * (IDLE_WORKER_BYTES + PEAK_PER_BODY_BYTE * config["max_body_bytes"])
        + MASTER_AND_EXECUTOR_BYTES
    )
    assert config["max_body_bytes"] == 8 * MIB
    assert limit >= peak, f"{limit / MIB:.0f} MiB < {peak / MIB:.0f} MiB"


def render_notes(helm: Helm, tmp_path: Path, values: dict[str, Any]) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` does not render it, so a copy of the chart
    renders it inside a ConfigMap."""
    chart = tmp_path / "remediate"
    shutil.copytree(CHART, chart)
    notes_text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + notes_text + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "notes" . | quote }}\n'
    )
    rendered = helm.template(values, chart=chart, extra=("--show-only", "templates/notes.yaml")).stdout
    return str(yaml.safe_load(rendered)["data"]["notes"])


def test_notes_tell_how_to_register_the_receiver(helm: Helm, tmp_path: Path) -> None:
    notes = render_notes(helm, tmp_path, {"alertmanagerConfig": {"enabled": True}})
    assert f"get secret {FULLNAME}-tokens -o jsonpath='{{.data.token}}'" in notes
    assert f"url: http://{FULLNAME}.{NAMESPACE}.svc:9095/webhook" in notes
    assert "send_resolved: true" in notes
    assert "max_alerts: 0" in notes  # AlertManager's cap would leave alerts out (truncatedAlerts)
    assert "alertmanagerConfigMatcherStrategy" in notes
    assert "shadow mode" in notes and "--set mode=enforce" in notes


def _remediate_routes(data: Any) -> list[dict[str, Any]]:
    """Every route (at any depth) of a loaded YAML document that sends to the `remediate` receiver."""
    if isinstance(data, list):
        return [route for item in data for route in _remediate_routes(item)]
    if not isinstance(data, dict):
        return []
    own = [data] if data.get("receiver") == "remediate" and ("group_by" in data or "groupBy" in data) else []
    return own + [route for value in data.values() for route in _remediate_routes(value)]


def test_every_shipped_route_re_sends_within_the_shortest_holds_for_and_groups_by_every_ladder_label(
    helm: Helm, tmp_path: Path, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    """The chart's AlertmanagerConfig and the route NOTES printed re-sent every 4h and
    did not group per GPU, while the ladders climb on a re-send `holds_for` (30m) after a rung. Every shipped
    route (the file, the chart's AlertmanagerConfig, NOTES, the docs' block) re-sends at or below the
    shortest shipped holds_for and groups by every label a shipped ladder's target and guard_by read."""
    loaded, errors = load_directory(ROOT / "playbooks", default_registry())
    assert not errors
    ladders = [playbook for playbook in loaded if playbook.is_ladder]
    assert ladders, "the shipped playbooks have ladders"
    shortest = min(rung.holds_for.total_seconds() for ladder in ladders for rung in ladder.rungs)
    needed = {label for ladder in ladders for label in (*ladder.target.labels, *ladder.guard_by)}

    routes: dict[str, tuple[list[str], str]] = {}
    (file_route,) = _remediate_routes(yaml.safe_load((ROOT / "alertmanager" / "alertmanager.yml").read_text()))
    routes["alertmanager/alertmanager.yml"] = (file_route["group_by"], file_route["repeat_interval"])
    chart_route = by_kind(rendered["full"], "AlertmanagerConfig")["spec"]["route"]
    routes["the chart's AlertmanagerConfig"] = (chart_route["groupBy"], chart_route["repeatInterval"])
    notes = render_notes(helm, tmp_path, {"alertmanagerConfig": {"enabled": True}})
    group_by, repeat = re.search(r"group_by: \[(.*)\]", notes), re.search(r"repeat_interval: (\S+)", notes)
    assert group_by is not None and repeat is not None, notes
    routes["NOTES.txt"] = (group_by.group(1).split(", "), repeat.group(1))
    install = (ROOT / "docs" / "install.md").read_text()
    blocks = re.findall(r"^[ ]*```yaml\n(.*?)^[ ]*```", install, re.S | re.M)
    documented = [route for block in blocks for route in _remediate_routes(yaml.safe_load(textwrap.dedent(block)))]
    assert documented, "docs/install.md shows the route"
    for index, route in enumerate(documented):
        routes[f"docs/install.md route {index + 1}"] = (route["group_by"], route["repeat_interval"])

    for where, (labels, repeat_interval) in routes.items():
        assert parse_duration(repeat_interval).total_seconds() <= shortest, f"{where}: repeat {repeat_interval}"
        assert not needed - set(labels), f"{where} does not group by {sorted(needed - set(labels))}"
    # One source: the chart's route is the file's, not a second copy of it.
    assert routes["the chart's AlertmanagerConfig"] == routes["NOTES.txt"] == routes["alertmanager/alertmanager.yml"]


# --------------------------------------------------------------------------- the chart's copies of shipped files


def test_the_charts_copies_of_the_playbooks_rules_and_dashboard_equal_the_repositorys() -> None:
    pairs = [
        (ROOT / "playbooks", CHART / "files" / "playbooks", "*.yaml"),
        (ROOT / "alertmanager" / "rules", CHART / "files" / "rules", "*.rules.yml"),
        (ROOT / "docs" / "dashboards", CHART / "dashboards", "*.json"),
        (ROOT / "alertmanager", CHART / "files" / "alertmanager", "alertmanager.yml"),
    ]
    for source, copy, pattern in pairs:
        wanted = sorted(p.name for p in source.glob(pattern))
        have = sorted(p.name for p in copy.iterdir())
        assert have == wanted, f"{copy} differs from {source}: run scripts/sync-generated"
        _, mismatch, errors = filecmp.cmpfiles(source, copy, wanted, shallow=False)
        assert mismatch == errors == [], f"{mismatch + errors} differ from {source}: run scripts/sync-generated"


def test_secrets_steps_read_are_mounted_into_the_server_read_only(rendered: dict[str, list[dict[str, Any]]]) -> None:
    pod = by_kind(rendered["full"], "Deployment")["spec"]["template"]["spec"]
    server = container(rendered["full"], "Deployment")

    assert {"name": "secret-oncall-webhook", "secret": {"secretName": "oncall-webhook", "defaultMode": 0o440}} in (
        pod["volumes"]
    )
    assert {"name": "secret-oncall-webhook", "mountPath": "/etc/remediate/oncall", "readOnly": True} in (
        server["volumeMounts"]
    )


def test_the_chart_routes_node_agent_gpu_faults_as_the_shipped_file_does(
    helm: Helm, tmp_path: Path, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    """Faults the node agents raise (source="nvml") get a group each and group_wait 1s, in the
    AlertmanagerConfig and the route NOTES prints as in alertmanager/alertmanager.yml."""
    shipped = yaml.safe_load((ROOT / "alertmanager" / "alertmanager.yml").read_text())
    (file_route,) = [r for r in shipped["route"]["routes"] if r["receiver"] == "remediate"]
    (nvml,) = file_route["routes"]
    (child,) = by_kind(rendered["full"], "AlertmanagerConfig")["spec"]["route"]["routes"]
    assert child["matchers"] == [{"name": "source", "matchType": "=", "value": "nvml"}]
    assert (child["groupBy"], child["groupWait"]) == (nvml["group_by"], nvml["group_wait"]) != (None, None)
    notes = render_notes(helm, tmp_path, {"alertmanagerConfig": {"enabled": True}})
    assert "- matchers: ['source=\"nvml\"']" in notes
    assert f"group_by: [{', '.join(nvml['group_by'])}]" in notes and f"group_wait: {nvml['group_wait']}" in notes
