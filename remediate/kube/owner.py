"""One owner per node: the remediate.io/owner annotation that hands a node to another system (breakfix).

`k8s.handoff` writes it (remediate.actions.k8s.handoff); while it names someone other than remediate,
remediate's changes of the node refuse, naming the owner: k8s.cordon, taint and drain (KubeAction.read_node)
and every node step for it (gpu.*, training.*: the server's Dispatch, remediate.executor.dispatch). The undo of
remediate's own changes (uncordon, untaint, `Action.undoes`) is never refused. The owner releases the node
by removing the annotation, or an operator runs `remediate node release NODE`.

When the owner cannot be read (the API down or failing after the step's tries, or a 401/403: no permission to
get nodes), `check_owner` lets a node step run only if it keeps the node in service and can be undone
(`Action.runs_if_owner_unknown`: a power cap, a clock lock, a command to a training job), and says so on the
step; any other (gpu.reset, disk.cleanup) fails as before, retryable while the API is down. A power cap on a node
breakfix took during an API outage is the price of a rollback that does not wait for the cluster API.

    remediate.io/owner          who owns the node now (e.g. breakfix); `remediate` or absent: remediate does
    remediate.io/owner-since    since when (RFC 3339)
    remediate.io/owner-why      why it was handed over (free text)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediate.errors import ActionError, RetryableActionError
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
    release = owner.release or f"removes the remediate.io/owner annotation, or `remediate node release {node}`"
    return f"{owner.describe(node)}: {action} refuses to change it until the owner releases it ({release})"


@dataclass(frozen=True)
class NodeOwner:
    name: str
    since: str | None = None
    why: str | None = None
    release: str | None = None
    """How the owner gives the node back; None: the annotation's way (a Slurm hand-off: `scontrol ... RESUME`)."""

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
    """Who owns a node, read from the API now (the executor's check of node steps, remediate.executor.runners)."""

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


@dataclass(frozen=True)
class OwnerCheck:
    """What the owner check of one node step found: `refused` (why not: another system owns the node), or
    `unchecked` (why the step runs without knowing the owner); both None: remediate may act."""

    refused: str | None = None
    unchecked: str | None = None

    def noted(self, value: Any) -> Any:
        """A plan or result of the step, with why the owner was not checked (`owner_check`), if it was not."""
        return {**value, "owner_check": self.unchecked} if self.unchecked and isinstance(value, dict) else value


def check_owner(
    owners: Callable[[str], NodeOwner | None], node: str, action: str, *, runs_if_unknown: bool
) -> OwnerCheck:
    """The owner check of node step `action` on `node` (see the module docstring for an owner that cannot be
    read). Raises RetryableActionError (the API is down) or ActionError (refused) for a step that must not run
    without it."""
    try:
        owner = owners(node)
    except ActionError as exc:  # KubeError, KubeUnavailable; SlurmError, SlurmUnavailable (a Slurm hand-off)
        why = f"the owner of node {node} could not be read: {exc}"
        if runs_if_unknown:
            return OwnerCheck(unchecked=f"{why}; {action} keeps the node in service, so it ran without that check")
        message = f"{why}; {action} does not run without that check"
        if isinstance(exc, RetryableActionError):
            raise RetryableActionError(message) from exc
        raise ActionError(message) from exc
    return OwnerCheck(refused=None if owner is None else refusal(owner, node, action))
