"""What every k8s.* action shares: options, params, API calls with retries, breaker, events."""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Self, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.breaker_preview import ClusterCount, breaker_preview
from remediate.actions.schema import Param, ParamSchema
from remediate.config.schedulers import Scheduler
from remediate.errors import ActionError
from remediate.kube import (
    CONTROL_PLANE_LABELS,
    EventSpec,
    KubeClient,
    KubeConflict,
    KubeError,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    NodeInfo,
    NodeNameError,
    NodeRef,
    check_node_name,
    owner_of,
    parse_label_selector,
    resolve_node_name,
)
from remediate.kube.owner import NodeOwnedElsewhere, refusal

# The name operators filter logs on; kept from before the actions moved into this package.
log = logging.getLogger("remediate.actions.kubernetes")

T = TypeVar("T")
ClientProvider = Callable[[], KubeClient]
NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
REPORTING_CONTROLLER = "remediate.io/remediate"


@dataclass(frozen=True)
class KubeOptions:
    """How the k8s.* actions behave; built from Settings by `default_registry`."""

    node_labels: tuple[str, ...] = NODE_LABELS
    node_selector: str | None = None
    """Label selector of the nodes the breaker's fraction counts (None: all nodes)."""
    scope_selector: str | None = None
    """Label selector a node must match to be cordoned, tainted or drained (None: any node)."""
    allow_control_plane: bool = False
    """Whether cordon, taint and drain may act on a control-plane node (CONTROL_PLANE_LABELS)."""
    reporting_instance: str = socket.gethostname()
    api_attempts: int = 4
    """Attempts per API call on transient errors (5xx, timeouts, resets, throttling)."""
    api_retry_wait: float = 0.2
    """First wait between those attempts (doubling, at most 2 s)."""
    conflict_attempts: int = 8
    """Read-modify-write rounds when the node keeps changing (409) before the step gives up (retryable)."""


class NodeOutOfScope(ActionError):
    """The node an alert names is not one remediate may take out of service (kube_node_selector, control plane)."""


@dataclass(frozen=True)
class NodeEvent:
    """An Event to record on the node; `change` names the change within the run (default: step index + verb)."""

    verb: str
    reason: str
    type: str
    note: str
    change: str | None = None


def iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


NODE_PARAM = Param(
    str,
    check=check_node_name,
    doc="node name; default: the first of the alert's labels node, kubernetes_node, Hostname, hostname, instance",
)
NOTE_PARAM = Param(str, default="", doc="free text added to the Kubernetes Event's note")
SCOPE_PARAM = Param(
    str,
    default="alert",
    choices=("alert", "any"),
    doc="alert: undo only what was done for this same alert; any: undo any change remediate made",
)


def node_schema(**params: Param) -> ParamSchema:
    """The params of a k8s action: `node`, then the action's own."""
    return ParamSchema({"node": NODE_PARAM, **params})


class KubeAction(Action):
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = True
    verb: ClassVar[str] = ""
    settings_section: ClassVar[str] = "kube"
    scheduler: ClassVar[Scheduler] = Scheduler.KUBERNETES

    def __init__(self, client: ClientProvider, options: KubeOptions | None = None) -> None:
        self._client_provider = client
        self.options = options or KubeOptions()

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        settings = deps.settings
        return cls(
            deps.kube_client,
            KubeOptions(
                node_labels=settings.node_labels,
                node_selector=settings.breaker.node_selector,
                scope_selector=settings.node_selector or settings.breaker.node_selector,
                allow_control_plane=settings.allow_control_plane,
            ),
        )

    @property
    def client(self) -> KubeClient:
        return self._client_provider()

    # ------------------------------------------------------------------ API calls

    def api(self, ctx: StepContext, what: Callable[[KubeClient], T], *, throttled: bool = True) -> T:
        """One API call, retried on transient errors (and on 429 throttling unless `throttled` is False)."""
        kinds: tuple[type[Exception], ...] = (KubeUnavailable, KubeTooManyRequests) if throttled else (KubeUnavailable,)
        retrying = Retrying(
            stop=stop_after_attempt(self.options.api_attempts) | stop_after_delay(max(0.0, ctx.remaining() - 0.5)),
            wait=wait_exponential(multiplier=self.options.api_retry_wait, min=self.options.api_retry_wait, max=2.0),
            retry=retry_if_exception_type(kinds),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return what(self.client)
        raise KubeUnavailable("no attempt was made (the step's deadline has passed)")  # pragma: no cover

    def node_ref(self, params: Mapping[str, Any], ctx: StepContext) -> NodeRef:
        try:
            return resolve_node_name(ctx.alert.labels, self.options.node_labels, params.get("node"))
        except NodeNameError as exc:
            raise ActionError(str(exc)) from exc

    def read_node(self, ref: NodeRef, ctx: StepContext, *, owner_check: bool = True) -> NodeInfo:
        """The node as it is now; for cordon, taint and drain (plan and execute) only a node in scope, and
        (unless `owner_check` is False: a plan says so instead) one that no other system owns."""
        try:
            node = self.api(ctx, lambda c: c.get_node(ref.name))
        except KubeNotFound as exc:
            raise ActionError(f"node {ref.name!r} (from {ref.source}) does not exist in the cluster") from exc
        if self.breaker_gated:
            # Uncordon and untaint are not checked: they only undo what remediate's marks on the node
            # say it did, so a node whose labels (or the scope setting), or owner, changed since still comes back.
            self.check_scope(ref, node)
            if owner_check and (why := self.owned_elsewhere(node)):
                raise NodeOwnedElsewhere(why)
        return node

    def owned_elsewhere(self, node: NodeInfo) -> str | None:
        """Why this action refuses a node another system owns (`remediate.io/owner`), naming it; None: not owned."""
        owner = owner_of(node.annotations)
        return None if owner is None else refusal(owner, node.name, self.name)

    def check_scope(self, ref: NodeRef, node: NodeInfo) -> None:
        """Refuse a node remediate may not take out of service: a control-plane node, or one outside the scope."""
        where = f"node {node.name} (from {ref.source})"
        if not self.options.allow_control_plane:
            role = next((label for label in CONTROL_PLANE_LABELS if label in node.labels), None)
            if role is not None:
                raise NodeOutOfScope(
                    f"{where} is a control-plane node (label {role}): {self.name} refuses it; "
                    "set kube_allow_control_plane: true to act on control-plane nodes"
                )
        selector = self.options.scope_selector
        if selector and not parse_label_selector(selector).matches(node.labels):
            raise NodeOutOfScope(
                f"{where} is out of scope: it does not match the node selector {selector!r} "
                "(kube_node_selector, by default breaker_node_selector): "
                f"{self.name} acts only on the nodes it selects"
            )

    def observe(self, params: Mapping[str, Any], ctx: StepContext) -> tuple[NodeRef, NodeInfo, dict[str, Any]]:
        """The node a plan is about, as read now, and the fields every plan starts with; for a node another
        system owns (cordon, taint, drain) `can_act` false and `why_not` naming the owner."""
        ref = self.node_ref(params, ctx)
        node = self.read_node(ref, ctx, owner_check=False)
        seen = {"node": ref.name, "from": ref.source, "found": True, "current": node.summary()}
        if self.breaker_gated and (why := self.owned_elsewhere(node)):
            seen.update(can_act=False, why_not=why)
        return ref, node, seen

    # ------------------------------------------------------------------ circuit breaker

    def _cluster_view(self, ctx: StepContext) -> tuple[int, set[str]]:
        """(nodes the breaker's fraction counts, nodes holding remediate's marks now), from the client's
        watch-fed node cache, which keeps both as events arrive: no LIST and no pass over the nodes per run,
        whatever the cluster's size. The cache may be up to its staleness bound behind; that only moves
        counts (the node being changed is read fresh and written conditionally), and a cache that is not
        current fails the step retryable (KubeUnavailable)."""
        wait = max(0.0, min(30.0, ctx.remaining() - 0.5))
        census = self.client.node_cache().census(self.options.node_selector, wait=wait)
        return census.counted, set(census.held)

    def acquire(self, node: str, kind: str, ctx: StepContext) -> dict[str, Any]:
        if ctx.breaker is None:
            raise ActionError(f"no circuit breaker available: refusing to {kind} node {node} without one")
        cluster_nodes, held = self._cluster_view(ctx)
        return ctx.breaker.acquire(
            node,
            kind=kind,
            run_id=ctx.run_id,
            cluster_nodes=cluster_nodes,
            held_in_cluster=held,
            alert_started_at=ctx.alert.starts_at,
        )

    def release(self, node: NodeInfo, ctx: StepContext) -> bool:
        if ctx.breaker is None or node.held_by_remediate:
            return False
        return ctx.breaker.release(node.name, run_id=ctx.run_id, reason=f"{self.name} by run {ctx.run_id}") > 0

    def released(self, ctx: StepContext, outcome: str, **fields: Any) -> Callable[[NodeInfo, Any], dict[str, Any]]:
        """The result of an undo that leaves the node as it is: `outcome`, `fields`, and whether remediate's
        hold on the node ended there (`breaker_released`)."""
        return lambda now, _event: {"outcome": outcome, **fields, "breaker_released": self.release(now, ctx)}

    def breaker_preview(self, node: str, ctx: StepContext) -> dict[str, Any]:
        """The breaker's state for a plan, and whether a change of `node` would be refused now. Reads only."""
        return breaker_preview(node, ctx, lambda: ClusterCount(*self._cluster_view(ctx)))

    # ------------------------------------------------------------------ events

    def event(self, ctx: StepContext, node: NodeInfo, event: NodeEvent) -> dict[str, Any]:
        """Record a change on the node as an Event; a failure to record is reported, never undoes the change.

        The same change announced again (a retried step, drain's cordon after a cordon step) finds
        its event there (409, the name derives from run and change) instead of adding a second one.
        """
        spec = EventSpec(
            name=_event_name(node.name, ctx.run_id, event.change or f"{ctx.step_index}.{event.verb}"),
            node=node.name,
            node_uid=node.uid,
            action=event.verb.capitalize(),
            reason=event.reason,
            type=event.type,
            note=f"{event.note} [remediate run {ctx.run_id}, playbook {ctx.playbook}]",
            time=datetime.now(UTC),
            reporting_controller=REPORTING_CONTROLLER,
            reporting_instance=self.options.reporting_instance,
        )
        try:
            self.api(ctx, lambda c: c.create_event(spec))
        except KubeConflict:
            return {"name": spec.name, "reason": event.reason, "created": "earlier (an earlier attempt of this step)"}
        except (KubeError, KubeUnavailable) as exc:
            log.warning("could not record event %s on node %s: %s", event.reason, node.name, exc)
            return {"name": spec.name, "reason": event.reason, "error": str(exc)}
        return {"name": spec.name, "reason": event.reason, "created": True}


def _event_name(node: str, run_id: int, change: str) -> str:
    """Deterministic per (node, run, change): a retried create is a 409, not a second event."""
    suffix = f".remediate.{run_id}.{change}"
    return node[: 253 - len(suffix)].rstrip(".-") + suffix


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:10]
