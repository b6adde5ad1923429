"""One owner per node: the remediate.io/owner annotation that hands a node to another system (breakfix).

`k8s.handoff` writes it (remediate.actions.k8s.handoff); while it names someone other than remediate,
remediate's changes of the node refuse, naming the owner: k8s.cordon, taint and drain (KubeAction.read_node)
and every node step for it (gpu.*, training.*: the server's Dispatch, remediate.runners). The undo of
remediate's own changes (uncordon, untaint, `Action.undoes`) is never refused. The owner releases the node
by removing the annotation, or an operator runs `remediate node release NODE`.

    remediate.io/owner          who owns the node now (e.g. breakfix); `remediate` or absent: remediate does
    remediate.io/owner-since    since when (RFC 3339)
    remediate.io/owner-why      why it was handed over (free text)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from remediate.errors import ActionError
from remediate.kube.client import KubeClient
from remediate.kube.errors import KubeNotFound
from remediate.kube.model import ANNOTATION_PREFIX

OWNER = ANNOTATION_PREFIX + "owner"
OWNER_SINCE = ANNOTATION_PREFIX + "owner-since"
OWNER_WHY = ANNOTATION_PREFIX + "owner-why"
OWNER_ANNOTATIONS = (OWNER, OWNER_SINCE, OWNER_WHY)
SELF = "remediate"
"""The owner value that means remediate itself (as no annotation does)."""
MAX_WHY = 1024
"""Characters of `owner-why` kept: an annotation is for people, the sink got the whole story."""


class NodeOwnedElsewhere(ActionError):
    """The node is owned by another system: remediate changes nothing on it until the owner releases it."""


def refusal(owner: NodeOwner, node: str, action: str) -> str:
    """Why `action` refuses `node`, naming its owner and how it is released."""
    return (
        f"{owner.describe(node)}: {action} refuses to change it until the owner releases it "
        f"(removes the remediate.io/owner annotation, or `remediate node release {node}`)"
    )


@dataclass(frozen=True)
class NodeOwner:
    name: str
    since: str | None = None
    why: str | None = None

    def describe(self, node: str) -> str:
        """`gpu-07 is owned by breakfix since 2026-...: XID 79 after a reset`."""
        since = f" since {self.since}" if self.since else ""
        why = f": {self.why}" if self.why else ""
        return f"{node} is owned by {self.name}{since}{why}"


def owner_of(annotations: Mapping[str, str]) -> NodeOwner | None:
    """Who other than remediate owns the node with these annotations; None: nobody (remediate acts)."""
    name = (annotations.get(OWNER) or "").strip()
    if not name or name == SELF:
        return None
    return NodeOwner(name, annotations.get(OWNER_SINCE), annotations.get(OWNER_WHY))


def release_patch() -> dict[str, dict[str, dict[str, None]]]:
    """The merge patch that removes the owner annotations (a release)."""
    return {"metadata": {"annotations": dict.fromkeys(OWNER_ANNOTATIONS)}}


@dataclass(frozen=True)
class NodeOwners:
    """Who owns a node, read from the API now (the executor's check of node steps, remediate.runners)."""

    client: KubeClient

    @classmethod
    def configured(cls, kubeconfig: Path | None, context: str | None, request_timeout: float) -> NodeOwners | None:
        """The check where a cluster is configured (a kubeconfig, or in a pod); None (nothing to check) else."""
        if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return None
        return cls(KubeClient(kubeconfig=kubeconfig, context=context, request_timeout=request_timeout))

    def __call__(self, node: str) -> NodeOwner | None:
        """The node's owner other than remediate; None also for a target that is no node of the cluster (a
        host name an alert gives: no annotation can be on it). API errors propagate (KubeUnavailable retries)."""
        try:
            return owner_of(self.client.get_node(node).annotations)
        except KubeNotFound:
            return None
