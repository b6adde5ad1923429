"""What the slurm.* actions share: options, the node a step is about, its fresh read, scope and the circuit
breaker (whose counts come from the process's shared node cache, never a read of the cluster per step)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.breaker_preview import ClusterCount, breaker_preview
from remediate.actions.schema import Param, ParamSchema
from remediate.config.schedulers import Scheduler
from remediate.errors import ActionError
from remediate.intake.alertref import node_label
from remediate.slurm import SlurmClient, SlurmNode, SlurmNodeCache, check_node_name
from remediate.slurm.lookup import find_node, spellings

CacheProvider = Callable[[], SlurmNodeCache]
NODE_LABELS = ("node", "hostname", "Hostname", "instance")
GPU_LABELS = ("gpu", "GPU", "gpu_index", "UUID")
"""Alert labels naming the GPU at fault, for the drain reason (dcgm-exporter: `gpu` is the index, `UUID`)."""
MEMORY_PREFIX = "slurm.drain/"
"""ActionMemory keys `slurm.drain/<node>`: the run and alert of remediate's drain of that node."""


@dataclass(frozen=True)
class SlurmOptions:
    """How the slurm.* actions behave; built from the `slurm` settings by `from_deps`."""

    node_labels: tuple[str, ...] = NODE_LABELS
    partitions: tuple[str, ...] = ()
    """Partitions whose nodes slurm.drain may drain and the breaker's fraction counts; empty: every node."""


@dataclass(frozen=True)
class SlurmNodeRef:
    name: str
    source: str
    """Where the name came from: `param node`, `label Hostname`, ..."""


class SlurmNodeOutOfScope(ActionError):
    """The node an alert names is in none of the partitions remediate may drain (slurm_partitions)."""


NODE_PARAM = Param(
    str,
    check=check_node_name,
    doc="Slurm node name (one host name, never a hostlist); default: the first of the alert's labels node, "
    "hostname, Hostname, instance (slurm_node_labels)",
)
SCOPE_PARAM = Param(
    str,
    default="alert",
    choices=("alert", "any"),
    doc="alert: resume only a drain made for this same alert; any: resume any drain whose reason is remediate's",
)


def resume_hint(node: str) -> str:
    """How the owner of a handed-off node gives it back to Slurm."""
    return f"scontrol update NodeName={node} State=RESUME"


def handed_note(node: SlurmNode) -> str:
    """What remediate's slurm.* actions say of a node handed to another system (they leave it to its owner)."""
    handed = node.handed_to
    assert handed is not None
    return (
        f"handed to {handed.owner} by run {handed.run}: {node.reason!r}; {handed.owner} has it now and resumes it "
        f"({resume_hint(node.name)})"
    )


def slurm_node_cache(settings: Any, *, on_command: Callable[[str], None] | None = None) -> SlurmNodeCache:
    """The node cache (and its client) of the cluster the `slurm` settings (config.settings.SlurmSettings) name;
    nothing runs until its first read or start(). `on_command`: the client's count of its commands (a metric)."""
    client = SlurmClient(
        conf=settings.conf, bin_dir=settings.bin_dir, timeout=settings.command_timeout, on_command=on_command
    )
    return SlurmNodeCache(client, interval=settings.poll_interval)


def node_schema(**params: Param) -> ParamSchema:
    return ParamSchema({"node": NODE_PARAM, **params})


class SlurmAction(Action):
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    settings_section: ClassVar[str] = "slurm"
    scheduler: ClassVar[Scheduler] = Scheduler.SLURM

    def __init__(self, cache: CacheProvider, options: SlurmOptions | None = None) -> None:
        self._cache_provider = cache
        self.options = options or SlurmOptions()

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        settings = deps.settings
        if deps.slurm_cache is not None:
            provider = deps.slurm_cache  # the process's one cache: one sinfo per interval, whatever reads it
        else:  # deps built without one (tests): a cache of the action's own, started on first read
            own = slurm_node_cache(settings)

            def provider() -> SlurmNodeCache:
                return own

        return cls(provider, SlurmOptions(node_labels=settings.node_labels, partitions=settings.partitions))

    @property
    def cache(self) -> SlurmNodeCache:
        return self._cache_provider()

    @property
    def client(self) -> SlurmClient:
        return self.cache.client

    def node_ref(self, params: Mapping[str, Any], ctx: StepContext) -> SlurmNodeRef:
        """The node the step is about: the `node` param, else the alert's first node label; a single valid
        Slurm node name (checked here, before it can reach a command line), or the step fails."""
        if params.get("node"):
            ref = SlurmNodeRef(str(params["node"]), "param node")
        elif found := node_label(ctx.alert.labels, self.options.node_labels):
            ref = SlurmNodeRef(found[1], f"label {found[0]}")
        else:
            labels = ", ".join(sorted(ctx.alert.labels)) or "none"
            raise ActionError(
                f"the alert has none of the labels {', '.join(self.options.node_labels)} to name a Slurm node "
                f"(labels: {labels}); set the step's `node` param or slurm_node_labels"
            )
        if problem := check_node_name(ref.name):
            raise ActionError(f"node name from {ref.source} {problem}")
        return ref

    def read(self, ref: SlurmNodeRef) -> SlurmNode:
        """The node as it is now, from one `scontrol -o show node NAME`: every decision a step makes reads it
        fresh (the cache's view may be up to its bound old). The name may be a NodeName, a NodeHostName or a
        fully qualified name's first label (remediate.slurm.lookup)."""
        node = find_node(self.cache, ref.name)
        if node is None:
            names = " or ".join(repr(name) for name in spellings(ref.name))
            raise ActionError(
                f"node {ref.name!r} (from {ref.source}) is not a node of the Slurm cluster "
                f"(no NodeName or NodeHostName {names})"
            )
        return node

    def in_scope(self, node: SlurmNode) -> bool:
        return not self.options.partitions or bool(set(node.partitions) & set(self.options.partitions))

    def check_scope(self, ref: SlurmNodeRef, node: SlurmNode) -> None:
        if not self.in_scope(node):
            raise SlurmNodeOutOfScope(
                f"node {node.name} (from {ref.source}) is out of scope: its partitions "
                f"({', '.join(node.partitions) or 'none'}) are none of slurm_partitions "
                f"({', '.join(self.options.partitions)}): {self.name} acts only on their nodes"
            )

    # ------------------------------------------------------------------ circuit breaker

    def census(self, node: SlurmNode, ctx: StepContext) -> ClusterCount:
        """What the breaker counts for a drain of `node`: the nodes its fraction counts (those in slurm_partitions),
        the nodes drained by remediate now, and the nodes of each partition in scope that `node` is in (as its
        fresh read names them), whose own share is capped too. From the shared node cache's census, counted once
        per read of the cluster: a step's cost does not grow with the cluster. The view may be up to its bound
        behind (only counts move: the node itself is read fresh); one past it fails the step retryable
        (SlurmUnavailable)."""
        wait = max(0.0, min(self.cache.interval, ctx.remaining() - 0.5))
        census = self.cache.census(self.options.partitions, wait=wait)
        scope = set(self.options.partitions)
        groups = {
            f"partition {name}": census.partitions[name].nodes if name in census.partitions else frozenset()
            for name in node.partitions
            if not scope or name in scope
        }
        return ClusterCount(census.counted, set(census.held), groups)

    def acquire(self, node: SlurmNode, ctx: StepContext) -> dict[str, Any]:
        if ctx.breaker is None:
            raise ActionError(f"no circuit breaker available: refusing to drain Slurm node {node.name} without one")
        count = self.census(node, ctx)
        return ctx.breaker.acquire(
            node.name,
            kind="drain",
            run_id=ctx.run_id,
            cluster_nodes=count.counted,
            held_in_cluster=count.held,
            groups=count.groups,
            alert_started_at=ctx.alert.starts_at,
        )

    def release(self, node: str, ctx: StepContext) -> bool:
        """remediate's hold on the node ends (its drain is gone); never refused."""
        if ctx.breaker is None:
            return False
        return ctx.breaker.release(node, run_id=ctx.run_id, reason=f"{self.name} by run {ctx.run_id}") > 0

    def preview(self, node: SlurmNode, ctx: StepContext) -> dict[str, Any]:
        return breaker_preview(node.name, ctx, lambda: self.census(node, ctx))
