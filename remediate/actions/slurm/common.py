"""What the slurm.* actions share: options, the node a step is about, the one read of the cluster, scope and
the circuit breaker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.breaker_preview import breaker_preview
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError
from remediate.intake.alertref import node_label
from remediate.slurm import SlurmClient, SlurmNode, SlurmNodeNotFound, check_node_name

ClientProvider = Callable[[], SlurmClient]
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


def node_schema(**params: Param) -> ParamSchema:
    return ParamSchema({"node": NODE_PARAM, **params})


class SlurmAction(Action):
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    settings_section: ClassVar[str] = "slurm"

    def __init__(self, client: ClientProvider, options: SlurmOptions | None = None) -> None:
        self._client_provider = client
        self.options = options or SlurmOptions()

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        settings = deps.settings
        client = SlurmClient(conf=settings.conf, bin_dir=settings.bin_dir, timeout=settings.command_timeout)

        def own_client() -> SlurmClient:
            return client

        # The registry passes the process's one client; its own is for deps built without one (tests).
        provider = deps.slurm_client or own_client
        return cls(provider, SlurmOptions(node_labels=settings.node_labels, partitions=settings.partitions))

    @property
    def client(self) -> SlurmClient:
        return self._client_provider()

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

    def read(self, ref: SlurmNodeRef) -> tuple[SlurmNode, tuple[SlurmNode, ...]]:
        """The node as it is now, and every node of the cluster, from ONE `sinfo --json`: the single read of a
        step (the node it decides on, the breaker's counts). The shared sinfo cache of the next slice replaces
        the cluster-wide part; the node being changed stays a fresh read."""
        nodes = self.client.nodes()
        try:
            return self.client.node(ref.name, nodes), nodes
        except SlurmNodeNotFound as exc:
            raise ActionError(f"node {ref.name!r} (from {ref.source}) is not a node of the Slurm cluster") from exc

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

    def census(self, nodes: tuple[SlurmNode, ...]) -> tuple[int, set[str]]:
        """(nodes the breaker's fraction counts: those in scope, nodes drained by remediate now), from the read."""
        counted = [node for node in nodes if self.in_scope(node)]
        return len(counted), {node.name for node in nodes if node.drained_by_run is not None}

    def acquire(self, node: str, ctx: StepContext, nodes: tuple[SlurmNode, ...]) -> dict[str, Any]:
        if ctx.breaker is None:
            raise ActionError(f"no circuit breaker available: refusing to drain Slurm node {node} without one")
        cluster_nodes, held = self.census(nodes)
        return ctx.breaker.acquire(
            node,
            kind="drain",
            run_id=ctx.run_id,
            cluster_nodes=cluster_nodes,
            held_in_cluster=held,
            alert_started_at=ctx.alert.starts_at,
        )

    def release(self, node: str, ctx: StepContext) -> bool:
        """remediate's hold on the node ends (its drain is gone); never refused."""
        if ctx.breaker is None:
            return False
        return ctx.breaker.release(node, run_id=ctx.run_id, reason=f"{self.name} by run {ctx.run_id}") > 0

    def preview(self, node: str, ctx: StepContext, nodes: tuple[SlurmNode, ...]) -> dict[str, Any]:
        return breaker_preview(node, ctx, lambda: self.census(nodes))
