"""What the chart asks of the cluster's Pod Security Admission, rendered by a real helm binary.

The agent pods mount hostPaths and add SYS_ADMIN: the namespace they run in must allow the `privileged`
level (`baseline` refuses both). The checks below are the Pod Security Standards' own rules for the fields
the chart sets, applied to the rendered pods, so the level the chart labels its namespace with is the one its
pods need, no lower and, without agents, no higher.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import yaml

from tests.support.helm import NAMESPACE, Helm, by_kind

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
"""The capabilities `baseline` lets a container add (Pod Security Standards, "Capabilities")."""
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"}
RESTRICTED_VOLUMES |= {"projected", "secret"}


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod the chart renders (kind/name -> pod spec): workload templates and bare pods (helm test)."""
    specs = {}
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            specs[f"{obj['kind']}/{obj['metadata']['name']}"] = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            specs[f"Pod/{obj['metadata']['name']}"] = obj["spec"]
    return specs


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def baseline_violations(spec: dict[str, Any]) -> set[str]:
    found = {f"hostPath {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v}
    found |= {f"spec.{field}" for field in ("hostPID", "hostIPC", "hostNetwork") if spec.get(field)}
    for c in containers(spec):
        context = c.get("securityContext", {})
        if context.get("privileged"):
            found.add(f"{c['name']} privileged")
        found |= {f"{c['name']} adds {cap}" for cap in context.get("capabilities", {}).get("add", [])}
        found -= {f"{c['name']} adds {cap}" for cap in BASELINE_CAPABILITIES}
    return found


def restricted_violations(spec: dict[str, Any]) -> set[str]:
    found = set(baseline_violations(spec))
    found |= {f"volume {v['name']}" for v in spec.get("volumes", []) if not set(v) - {"name"} <= RESTRICTED_VOLUMES}
    pod = spec.get("securityContext", {})
    for c in containers(spec):
        context = {**pod, **c.get("securityContext", {})}
        if context.get("allowPrivilegeEscalation") is not False:
            found.add(f"{c['name']} may escalate")
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            found.add(f"{c['name']} may run as root")
        if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.add(f"{c['name']} no seccomp profile")
        if "ALL" not in context.get("capabilities", {}).get("drop", []):
            found.add(f"{c['name']} keeps capabilities")
        found |= {f"{c['name']} adds {cap}" for cap in context.get("capabilities", {}).get("add", [])}
        found -= {f"{c['name']} adds NET_BIND_SERVICE"}
    return found


def test_the_agent_pods_need_the_privileged_level_and_the_rest_passes_restricted(helm: Helm) -> None:
    pods = pod_specs(helm.objects({}))
    agent = pods.pop("DaemonSet/rel-remediate-agent")

    assert baseline_violations(agent) == {
        "hostPath state",
        "hostPath training-control",
        "agent adds SYS_ADMIN",
    }
    assert pods and all(not restricted_violations(spec) for spec in pods.values()), {
        name: restricted_violations(spec) for name, spec in pods.items()
    }


def test_no_namespace_unless_asked_and_then_the_level_its_pods_need(helm: Helm) -> None:
    assert not [o for o in helm.objects({}) if o["kind"] == "Namespace"]  # helm install needs it before

    with_agents = by_kind(helm.objects({"namespace": {"create": True}}), "Namespace")
    without = by_kind(helm.objects({"namespace": {"create": True}, "agent": {"enabled": False}}), "Namespace")
    chosen = by_kind(
        helm.objects({"namespace": {"create": True, "podSecurity": "baseline", "labels": {"team": "gpu"}}}),
        "Namespace",
    )

    assert with_agents["metadata"]["name"] == NAMESPACE
    assert with_agents["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}  # it holds the history
    for namespace, level in ((with_agents, "privileged"), (without, "restricted"), (chosen, "baseline")):
        labels = namespace["metadata"]["labels"]
        for mode in ("enforce", "warn", "audit"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == level
    assert chosen["metadata"]["labels"]["team"] == "gpu"
    kubernetes_validate.validate(with_agents, "1.30.0", strict=True)


TLS = {"tls": {"enabled": True, "existingSecret": "remediate-tls", "caConfigMap": "remediate-ca"}}


def test_plain_http_is_the_default(helm: Helm) -> None:
    objects = helm.objects({})
    init = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]["initContainers"][0]
    assert init["args"][3] == "http://rel-remediate.gpu-ops.svc:9095" and "--ca-file" not in init["args"]


def test_with_tls_every_client_of_the_service_speaks_https_and_verifies_with_the_ca(helm: Helm) -> None:
    objects = helm.objects({**TLS, "serviceMonitor": {"enabled": True}, "alertmanagerConfig": {"enabled": True}})
    url = "https://rel-remediate.gpu-ops.svc:9095"

    server = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    config = yaml.safe_load(by_kind(objects, "ConfigMap", "rel-remediate-config")["data"]["config.yaml"])
    assert (config["tls_cert_file"], config["tls_key_file"]) == (
        "/etc/remediate/tls/tls.crt",
        "/etc/remediate/tls/tls.key",
    )
    (tls_volume,) = [v for v in server["volumes"] if v["name"] == "tls"]
    assert tls_volume["secret"]["secretName"] == "remediate-tls"
    assert {"name": "tls", "mountPath": "/etc/remediate/tls", "readOnly": True} in server["containers"][0][
        "volumeMounts"
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server["containers"][0][probe]["httpGet"]["scheme"] == "HTTPS"

    agent = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    init = agent["initContainers"][0]
    assert init["args"][3] == url and init["args"][init["args"].index("--ca-file") + 1] == "/etc/remediate/ca/ca.crt"
    assert {
        "name": "server-ca",
        "configMap": {"name": "remediate-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    } in agent["volumes"]
    # The agent side references no Secret: its node's kubelet could read it (the server's key).
    assert "secretName" not in str(agent) and "remediate-tls" not in str(agent)

    ca = {"configMap": {"name": "remediate-ca", "key": "ca.crt"}}
    endpoint = by_kind(objects, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {
        "ca": ca,
        "serverName": "rel-remediate.gpu-ops.svc",
    }
    webhook = by_kind(objects, "AlertmanagerConfig")["spec"]["receivers"][0]["webhookConfigs"][0]
    assert webhook["url"] == f"{url}/webhook" and webhook["httpConfig"]["tlsConfig"] == {"ca": ca}
    test_pod = by_kind(objects, "Pod")
    assert url in test_pod["spec"]["containers"][0]["command"][-1] and test_pod["spec"]["volumes"][0]["configMap"] == {
        "name": "remediate-ca"
    }
    for obj in objects:
        if obj["kind"] not in ("ServiceMonitor", "AlertmanagerConfig"):
            kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_tls_without_its_secret_or_ca_stops_the_render_saying_what_is_missing(helm: Helm) -> None:
    for missing, words in (("existingSecret", "tls.existingSecret"), ("caConfigMap", "tls.caConfigMap")):
        values = {"tls": {**TLS["tls"], missing: ""}}
        result = helm.template(values, check=False)
        assert result.returncode != 0 and f"tls.enabled needs {words}" in result.stderr
