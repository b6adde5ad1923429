"""What the chart asks of the cluster's Pod Security Admission, rendered by a real helm binary.

The agent pods mount hostPaths and add SYS_ADMIN: the namespace they run in must allow the `privileged`
level (`baseline` refuses both). The checks below are the Pod Security Standards' own rules for the fields
the chart sets, applied to the rendered pods, so the level the chart labels its namespace with is the one its
pods need, no lower and, without agents, no higher.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

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
