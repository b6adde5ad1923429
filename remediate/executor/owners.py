"""Who owns a node other than remediate, for the owner check of node steps (remediate.executor.runners).

Kubernetes says it with the remediate.io/owner annotation (remediate.kube.owner.NodeOwners); Slurm with the
node's reason: a node `slurm.handoff` gave to breakfix is drained with `breakfix: ... (from remediate run N)`
(remediate.slurm.reason.handed_to). On either, a node step (gpu.reset, disk.cleanup, ...) is refused until its
owner gives the node back; an undo is never refused. A site running Slurm on Kubernetes has both: the node is
another's as soon as either says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from remediate.actions.slurm.common import resume_hint
from remediate.kube.owner import NodeOwner
from remediate.slurm import SlurmNodeCache
from remediate.slurm.lookup import find_node

Owners = Callable[[str], NodeOwner | None]


@dataclass(frozen=True)
class SlurmOwners:
    """The owner of a Slurm node handed off by remediate, from a fresh read of the node (`scontrol -o show
    node`; a NodeHostName or fully qualified name finds it too); None for a node nobody was handed, or a name
    that is no node of the cluster. Slurm's errors propagate (SlurmUnavailable: slurmctld away)."""

    cache: SlurmNodeCache

    def __call__(self, node: str) -> NodeOwner | None:
        found = find_node(self.cache, node)
        handed = found.handed_to if found is not None else None
        if found is None or handed is None:
            return None
        since = (
            datetime.fromtimestamp(found.reason_changed_at, UTC).isoformat(timespec="seconds")
            if found.reason_changed_at
            else None
        )
        return NodeOwner(handed.owner, since, found.reason, release=f"`{resume_hint(found.name)}`")


@dataclass(frozen=True)
class FirstOwner:
    """The first owner any of `sources` names (Kubernetes, then Slurm)."""

    sources: tuple[Owners, ...]

    def __call__(self, node: str) -> NodeOwner | None:
        for source in self.sources:
            if (owner := source(node)) is not None:
                return owner
        return None


def combined(*sources: Owners | None) -> Owners | None:
    """One owner check over the sources configured (None: not configured); None when there is none."""
    present = tuple(source for source in sources if source is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else FirstOwner(present)
