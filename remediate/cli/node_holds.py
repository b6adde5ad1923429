"""Who holds a node other than remediate, for `remediate node release`: Kubernetes's owner annotation
(k8s.handoff), Slurm's hand-off reason (slurm.handoff: `breakfix: ... (from remediate run N)`), or both on Slurm on
Kubernetes; and the release of each hold: the annotation removed, the Slurm node resumed (`scontrol update
NodeName=X State=RESUME`, through the Slurm client). Each system is read where the settings configure it, as the
server's executor reads it (remediate.executor.dispatch, remediate.executor.owners)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from remediate.config.schedulers import Scheduler
from remediate.kube.owner import NodeOwner

if TYPE_CHECKING:
    from remediate.config.settings import Settings
    from remediate.kube import KubeClient
    from remediate.slurm import SlurmNodeCache

KUBERNETES = "kubernetes"
SLURM = "slurm"


class NodeNotFound(Exception):
    """The node is in none of the systems configured."""


@dataclass(frozen=True)
class Hold:
    """One system's hold of the node: `system` (kubernetes, slurm), its owner, and the Slurm NodeName resumed."""

    system: str
    owner: NodeOwner
    slurm_name: str | None = None


def kube_configured(settings: Settings) -> bool:
    """Kubernetes is read where the site runs it (`schedulers`), a kubeconfig is given, or in a pod."""
    return (
        Scheduler.KUBERNETES in settings.engine.schedulers
        or settings.kube.kubeconfig is not None
        or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )


def slurm_configured(settings: Settings) -> bool:
    """Slurm is read as the executor reads it: slurm among the `schedulers`, and its slurm_conf set."""
    return Scheduler.SLURM in settings.engine.schedulers and settings.slurm.conf is not None


@dataclass
class NodeHolds:
    """The systems configured (None: not configured); `close` ends what was opened."""

    kube: KubeClient | None
    slurm: SlurmNodeCache | None

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeHolds:
        from remediate.actions.slurm.common import slurm_node_cache
        from remediate.kube import KubeClient

        kube = None
        if kube_configured(settings):
            k = settings.kube
            kube = KubeClient(kubeconfig=k.kubeconfig, context=k.context, request_timeout=k.request_timeout)
        return cls(kube, slurm_node_cache(settings.slurm) if slurm_configured(settings) else None)

    @property
    def systems(self) -> tuple[str, ...]:
        return tuple(name for name, on in ((KUBERNETES, self.kube), (SLURM, self.slurm)) if on is not None)

    def read(self, node: str) -> list[Hold]:
        """Every hold of `node` now (Kubernetes's first); [] when none. NodeNotFound when no system configured
        has the node. Errors of either API propagate (one line, through the CLI's handle_errors)."""
        from remediate.kube import KubeNotFound, owner_of
        from remediate.slurm.lookup import find_node

        holds, found = [], 0
        if self.kube is not None:
            try:
                owner = owner_of(self.kube.get_node(node).annotations)
                found += 1
                if owner is not None:
                    holds.append(Hold(KUBERNETES, owner))
            except KubeNotFound:
                pass
        if self.slurm is not None:
            slurm_node = find_node(self.slurm, node)
            if slurm_node is not None:
                found += 1
                handed = slurm_node.handed_to
                if handed is not None:
                    at = slurm_node.reason_changed_at
                    since = datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds") if at else None
                    holds.append(Hold(SLURM, NodeOwner(handed.owner, since, slurm_node.reason), slurm_node.name))
        if not found:
            raise NodeNotFound(node)
        return holds

    def slurm_name(self, node: str) -> str | None:
        """The Slurm NodeName of `node` where Slurm is read and has it (the burn-in's node); None otherwise."""
        from remediate.slurm.lookup import find_node

        found = find_node(self.slurm, node) if self.slurm is not None else None
        return found.name if found is not None else None

    def release(self, node: str, hold: Hold) -> None:
        from remediate.kube import release_patch

        if hold.system == KUBERNETES:
            assert self.kube is not None
            self.kube.patch_node(node, release_patch())
        else:
            assert self.slurm is not None and hold.slurm_name is not None
            self.slurm.client.resume(hold.slurm_name)

    def close(self) -> None:
        if self.kube is not None:
            self.kube.close()
        if self.slurm is not None:
            self.slurm.stop()
