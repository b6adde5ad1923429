"""Who holds a node other than remediate, for `remediate node release`: Kubernetes's owner annotation
(k8s.handoff), Slurm's hand-off reason (slurm.handoff: `breakfix: ... (from remediate run N)`), or both on Slurm on
Kubernetes; and the release of each hold: the annotation removed, the Slurm node resumed (`scontrol update
NodeName=X State=RESUME`, through the Slurm client). Each system is read where the settings configure it, as the
server's executor reads it (remediate.executor.dispatch, remediate.executor.owners).

One name may be spelt differently in each system (`gpu-01.cluster.example` typed, Kubernetes's node `gpu-01`,
Slurm's NodeName `gpu-01` with its NodeHostName): Slurm's node is found by the name or its first label
(remediate.slurm.lookup), and Kubernetes's by the same spellings and Slurm's names for the node, as the
executor's dispatch tries them, so a site running both finds both holds."""

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
    from remediate.slurm.model import SlurmNode

KUBERNETES = "kubernetes"
SLURM = "slurm"


class NodeNotFound(Exception):
    """The node is in none of the systems configured."""


@dataclass(frozen=True)
class Hold:
    """One system's hold of the node: `system` (kubernetes, slurm), its owner, and the name it has there (the
    Kubernetes node patched, the Slurm NodeName resumed)."""

    system: str
    owner: NodeOwner
    slurm_name: str | None = None
    kube_name: str | None = None


@dataclass(frozen=True)
class NodeState:
    """What the systems read say of one node now: its holds (Kubernetes's first), and the node each system has
    under its own name (None: that system is not read, or has no such node)."""

    holds: list[Hold]
    kube_name: str | None = None
    slurm_node: SlurmNode | None = None

    @property
    def held_in_slurm(self) -> bool:
        return any(hold.system == SLURM for hold in self.holds)


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


def name_problem(node: str, settings: Settings) -> str | None:
    """Why `node` can name no node in any system the release reads (a Slurm NodeName may have upper case and
    '_', a Kubernetes node name may not); None when one of them accepts it, or none is read (refused later)."""
    from remediate.kube import check_node_name as kube_check
    from remediate.slurm.names import check_node_name as slurm_check

    read = ((kube_check, kube_configured(settings)), (slurm_check, slurm_configured(settings)))
    checks = [check for check, on in read if on]
    problems = [check(node) for check in checks]
    if not checks or any(problem is None for problem in problems):
        return None
    return "; ".join(dict.fromkeys(p for p in problems if p is not None))


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

    def read(self, node: str) -> NodeState:
        """Every hold of `node` now (Kubernetes's first; none: no hold) and its name in each system. NodeNotFound
        when no system configured has the node. Errors of either API propagate (one line, through the CLI's
        handle_errors)."""
        from remediate.kube import owner_of
        from remediate.slurm.lookup import find_node

        slurm_node = find_node(self.slurm, node) if self.slurm is not None else None
        kube_name, annotations = self._kube_node(node, slurm_node) if self.kube is not None else (None, {})
        if kube_name is None and slurm_node is None:
            raise NodeNotFound(node)
        holds = []
        owner = owner_of(annotations)
        if kube_name is not None and owner is not None:
            holds.append(Hold(KUBERNETES, owner, kube_name=kube_name))
        handed = slurm_node.handed_to if slurm_node is not None else None
        if slurm_node is not None and handed is not None:
            at = slurm_node.reason_changed_at
            since = datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds") if at else None
            holds.append(Hold(SLURM, NodeOwner(handed.owner, since, slurm_node.reason), slurm_node.name))
        return NodeState(holds, kube_name, slurm_node)

    def _kube_node(self, node: str, slurm_node: SlurmNode | None) -> tuple[str | None, dict[str, str]]:
        """The Kubernetes node `node` stands for and its annotations: the first of the name, its first label, and
        Slurm's NodeName and NodeHostName of it (and theirs) that Kubernetes has; (None, {}) when none. A
        spelling Kubernetes cannot have as a name (upper case, '_': a Slurm NodeName) is not asked for."""
        from remediate.kube import KubeNotFound, check_node_name
        from remediate.slurm.lookup import spellings

        assert self.kube is not None
        typed = [node] if slurm_node is None else [node, slurm_node.name, slurm_node.hostname]
        names = dict.fromkeys(spelling for name in typed for spelling in spellings(name))
        for name in (name for name in names if check_node_name(name) is None):
            try:
                return name, dict(self.kube.get_node(name).annotations)
            except KubeNotFound:
                pass
        return None, {}

    def release(self, hold: Hold) -> None:
        """Give `hold` back: its annotation removed, or its Slurm node resumed. Errors of either API propagate."""
        from remediate.kube import release_patch

        if hold.system == KUBERNETES:
            assert self.kube is not None and hold.kube_name is not None
            self.kube.patch_node(hold.kube_name, release_patch())
        else:
            assert self.slurm is not None and hold.slurm_name is not None
            self.slurm.client.resume(hold.slurm_name)

    def close(self) -> None:
        if self.kube is not None:
            self.kube.close()
        if self.slurm is not None:
            self.slurm.stop()
