"""Cluster checks: does the cluster API the loaded steps act on answer, with the permissions they need?

Kubernetes: one SelfSubjectAccessReview per verb and resource the loaded k8s.* steps use (the authorizer's own
answer; nothing is changed). Slurm: `scontrol ping` answers, and the user remediate runs as may update nodes.
Slurm has no "may I?" query, and an `scontrol update` to find out would change a node, so the user is compared
with what Slurm lets update nodes: root and the controller's SlurmUser; anyone else needs an AdminLevel of
Operator or Admin in the accounting database, which doctor cannot see without sacctmgr: a warning.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable

from remediate.doctor.model import Check, fail, ok, warn
from remediate.errors import RemediateError
from remediate.kube.client import EVENT_NAMESPACE, KubeClient
from remediate.slurm.client import SlurmClient

FAMILY = "cluster"

Need = tuple[str, str, str, str, str]
"""(verb, resource, API group, subresource, namespace: "" for cluster-wide)."""
NODE_READ: Need = ("get", "nodes", "", "", "")
NODE_LIST: Need = ("list", "nodes", "", "", "")
NODE_WATCH: Need = ("watch", "nodes", "", "", "")
NODE_PATCH: Need = ("patch", "nodes", "", "", "")
EVENT_CREATE: Need = ("create", "events", "events.k8s.io", "", EVENT_NAMESPACE)
KUBE_NEEDS: dict[str, tuple[Need, ...]] = {
    "k8s.cordon": (NODE_READ, NODE_LIST, NODE_WATCH, NODE_PATCH, EVENT_CREATE),
    "k8s.uncordon": (NODE_READ, NODE_PATCH, EVENT_CREATE),
    "k8s.taint": (NODE_READ, NODE_LIST, NODE_WATCH, NODE_PATCH, EVENT_CREATE),
    "k8s.untaint": (NODE_READ, NODE_PATCH, EVENT_CREATE),
    "k8s.drain": (
        NODE_READ,
        NODE_LIST,
        NODE_WATCH,
        NODE_PATCH,
        EVENT_CREATE,
        ("list", "pods", "", "", ""),
        ("get", "pods", "", "", ""),
        ("create", "pods", "", "eviction", ""),
        ("list", "poddisruptionbudgets", "policy", "", ""),
    ),
    "k8s.handoff": (NODE_READ, NODE_PATCH, EVENT_CREATE),
}
"""What each k8s.* action calls (remediate/actions/k8s; the breaker's node cache: LIST and WATCH of nodes for the
cap's count; the node events go in namespace default)."""


def check_kube(client: KubeClient, actions: Iterable[str]) -> list[Check]:
    used = sorted({action for action in actions if action in KUBE_NEEDS})
    if not used:
        return []
    name = "cluster: kubernetes"
    if not client.configured:
        return [
            fail(
                FAMILY,
                name,
                f"the playbooks run {', '.join(used)} but no cluster is configured",
                "set kubeconfig (REMEDIATE_KUBECONFIG), or run in the cluster with a service account",
            )
        ]
    needed = sorted({need for action in used for need in KUBE_NEEDS[action]})
    denied, checks = [], []
    try:
        for verb, resource, group, sub, namespace in needed:
            if not client.can(verb, resource, group=group, subresource=sub, namespace=namespace):
                shown = f"{group}/{resource}" if group else resource
                shown += f"/{sub}" if sub else ""
                denied.append(f"{verb} {shown}" + (f" in {namespace}" if namespace else ""))
    except RemediateError as exc:
        return [
            fail(
                FAMILY,
                name,
                f"cannot ask the API server: {exc}",
                "check kubeconfig and that the API server serves SelfSubjectAccessReview",
            )
        ]
    if denied:
        checks.append(
            fail(
                FAMILY,
                name,
                f"{client.source}: may not {', '.join(denied)} (for {', '.join(used)})",
                "grant them to remediate's account (the chart's ClusterRole lists them)",
            )
        )
    else:
        checks.append(ok(FAMILY, name, f"{client.source}: may do all {len(needed)} things {', '.join(used)} need"))
    return checks


def check_slurm(client: SlurmClient, actions: Iterable[str]) -> list[Check]:
    used = sorted({action for action in actions if action.startswith("slurm.")})
    if not used:
        return []
    name = "cluster: slurm"
    if not client.configured:
        return [
            fail(
                FAMILY,
                name,
                f"the playbooks run {', '.join(used)} but slurm_conf is not set",
                "set slurm_conf (REMEDIATE_SLURM_CONF) to the cluster's slurm.conf",
            )
        ]
    try:
        answer = client.ping()
        config = client.show_config()
    except RemediateError as exc:
        # `scontrol ping` of a controller that is down says so, then a banner of asterisks: the words are enough.
        said = str(exc).split(" **", 1)[0]
        return [fail(FAMILY, name, f"slurmctld does not answer: {said}", "check slurm_conf, munge and slurmctld")]
    slurm_user = _config_value(config, "SlurmUser").split("(")[0]
    user = _user()
    seen = f"{' '.join(answer.split())}; running as {user}, SlurmUser {slurm_user or '?'}"
    if user in ("root", slurm_user):
        return [ok(FAMILY, name, f"{seen}: may update nodes ({', '.join(used)})")]
    return [
        warn(
            FAMILY,
            name,
            f"{seen}: Slurm lets root, SlurmUser and AdminLevel Operator update nodes",
            f"give {user} AdminLevel=Operator (sacctmgr modify user {user} set adminlevel=operator), or run as root",
        )
    ]


def _config_value(config: str, key: str) -> str:
    for line in config.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"
