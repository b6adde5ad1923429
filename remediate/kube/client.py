"""The Kubernetes API as remediate uses it: the official client behind a small, typed facade.

Who calls it: the k8s.* actions (remediate.actions.k8s). The client is built
on first use (`import kubernetes` costs ~0.2 s and needs a cluster configuration, so
a server that never cordons anything never pays for it):

- `kubeconfig` given: that file (and `context`, else its current context);
- else inside a pod (KUBERNETES_SERVICE_HOST set): the service account's token and CA;
- else nothing: $KUBECONFIG and ~/.kube/config are never read on their own (a laptop's current context
  may be a production cluster; a test alert must not cordon its nodes). KubeConfigError says what to set.

urllib3's own retries are switched off: a request either answers or raises, and the
callers decide what to retry (tenacity, only on KubeUnavailable), so a retry is
always visible in the audit history and a POST is never silently sent twice.
Every call has a timeout and goes through `errors.translate`; results are the
frozen values of `remediate.kube.model`, never the client's models.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from remediate.kube.errors import KubeConfigError, KubeGone, translate
from remediate.kube.model import (
    LabelSelector,
    NodeInfo,
    ObjectRef,
    OwnerRef,
    PdbInfo,
    PodInfo,
    SelectorRequirement,
    Taint,
    TokenReviewResult,
)
from remediate.kube.nodecache import PAGE_SIZE, CacheStatus, NodeCache

T = TypeVar("T")

EVENT_NAMESPACE = "default"
"""Events about cluster-scoped objects (nodes) live in `default`."""


@dataclass(frozen=True)
class EventSpec:
    """One events.k8s.io/v1 Event about a node."""

    name: str
    node: str
    node_uid: str
    action: str
    reason: str
    type: str
    note: str
    time: datetime
    reporting_controller: str
    reporting_instance: str


@dataclass(eq=False)
class KubeClient:
    """Thread-safe: executor threads share one instance (one urllib3 pool)."""

    _: KW_ONLY
    kubeconfig: Path | None = None
    context: str | None = None
    request_timeout: float = 10.0
    source: str = field(default="", init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _apis: tuple[Any, Any, Any, Any] | None = field(default=None, init=False, repr=False)
    _node_cache: NodeCache | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------ construction

    @property
    def configured(self) -> bool:
        """Is a cluster configured (a kubeconfig, or the in-cluster service account)? Known without importing
        the Kubernetes client."""
        return self.kubeconfig is not None or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))

    def _load(self) -> tuple[Any, Any, Any, Any]:
        with self._lock:
            if self._apis is not None:
                return self._apis
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException

            configuration = client.Configuration()
            in_cluster = self.kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
            try:
                if in_cluster:
                    config.load_incluster_config(client_configuration=configuration)
                    source = "in-cluster service account"
                elif self.kubeconfig is None:
                    raise KubeConfigError(
                        "no Kubernetes cluster configured: set kubeconfig / REMEDIATE_KUBECONFIG to the file of the "
                        "cluster to act on (remediate never reads $KUBECONFIG or ~/.kube/config on its own), or run "
                        "remediate in the cluster with a service account"
                    )
                else:
                    config.load_kube_config(
                        config_file=str(self.kubeconfig),
                        context=self.context,
                        client_configuration=configuration,
                        persist_config=False,
                    )
                    source = f"kubeconfig {self.kubeconfig}"
            except (ConfigException, OSError, ValueError, TypeError) as exc:
                where = f"kubeconfig {self.kubeconfig}"
                raise KubeConfigError(
                    f"no usable Kubernetes configuration: {exc} (tried "
                    f"{'the in-cluster service account' if in_cluster else where}; set kubeconfig / "
                    "REMEDIATE_KUBECONFIG, or run remediate in the cluster with a service account)"
                ) from exc
            configuration.retries = False
            api = client.ApiClient(configuration)
            self._apis = (api, client.CoreV1Api(api), client.PolicyV1Api(api), client.EventsV1Api(api))
            self.source = f"{source} -> {configuration.host}"
            return self._apis

    def core_api(self) -> Any:
        """The official CoreV1Api on this client's configuration (for callers that need the client's own
        models, such as agent discovery reading pod IPs and conditions). Raises KubeConfigError."""
        return self._load()[1]

    def node_cache(self) -> NodeCache:
        """This client's watch-fed view of the nodes (remediate.kube.nodecache), made on first use, started on
        first read: one watch per client, whatever reads it (breaker counts, waves)."""
        with self._lock:
            if self._node_cache is None:
                self._node_cache = NodeCache(self)
            return self._node_cache

    def node_cache_status(self) -> CacheStatus | None:
        """The node cache's state; None while nothing has read it (it is not started, nothing is watched)."""
        with self._lock:
            cache = self._node_cache
        return None if cache is None else cache.status()

    def close(self) -> None:
        with self._lock:
            cache, self._node_cache = self._node_cache, None
        if cache is not None:
            cache.stop()
        with self._lock:
            if self._apis is not None:
                self._apis[0].close()
                self._apis = None

    def _call(self, what: str, function: Callable[[Any, Any, Any], T]) -> T:
        _, core, policy, events = self._load()
        try:
            return function(core, policy, events)
        except Exception as exc:
            raise translate(exc, what) from exc

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of every request but a watch."""
        return (min(5.0, self.request_timeout), self.request_timeout)

    _timeout = timeout

    def _all_pages(self, what: str, function: Callable[..., Any]) -> list[Any]:
        """Every item of a LIST, PAGE_SIZE at a time (`limit` + `continue`): no answer holds the whole cluster.
        A continue token that expired between pages (410) starts the list again: it is consistent only whole."""
        items: list[Any] = []
        token: str | None = None
        while True:
            try:
                page = self._call(what, lambda *apis, t=token: function(*apis, limit=PAGE_SIZE, _continue=t))
            except KubeGone:
                if token is None:
                    raise
                items, token = [], None
                continue
            items.extend(page.items or [])
            token = page.metadata._continue if page.metadata is not None else None
            if not token:
                return items

    # ------------------------------------------------------------------ nodes

    def get_node(self, name: str) -> NodeInfo:
        return self._call(
            f"GET nodes/{name}", lambda core, _p, _e: _node(core.read_node(name, _request_timeout=self._timeout))
        )

    def list_nodes(self, label_selector: str | None = None) -> list[NodeInfo]:
        """Every node (matching `label_selector`), paginated. What runs read of all nodes comes from
        `node_cache()` instead: this is for one-off reads (the CLI)."""
        what = "LIST nodes" + (f"?labelSelector={label_selector}" if label_selector else "")
        return [
            _node(n)
            for n in self._all_pages(
                what,
                lambda core, _p, _e, **page: core.list_node(
                    label_selector=label_selector, _request_timeout=self._timeout, **page
                ),
            )
        ]

    def patch_node(self, name: str, patch: dict[str, Any] | list[dict[str, Any]]) -> NodeInfo:
        """A strategic-merge patch (dict) or a JSON patch (list)."""
        return self._call(
            f"PATCH nodes/{name}",
            lambda core, _p, _e: _node(core.patch_node(name, patch, _request_timeout=self._timeout)),
        )

    # ------------------------------------------------------------------ permissions

    def can(self, verb: str, resource: str, *, group: str = "", subresource: str = "", namespace: str = "") -> bool:
        """Whether this client's identity may `verb` `resource` (in `namespace`; "": cluster-wide, every namespace):
        a SelfSubjectAccessReview, which asks the API server's authorizer and changes nothing (`remediate doctor`)."""

        def review(core: Any, _p: Any, _e: Any) -> bool:
            from kubernetes import client

            attributes = client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=subresource or None, namespace=namespace or None
            )
            body = client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
            )
            answer = client.AuthorizationV1Api(core.api_client).create_self_subject_access_review(
                body, _request_timeout=self._timeout
            )
            return bool(answer.status and answer.status.allowed)

        shown = f"{resource}/{subresource}" if subresource else resource
        return self._call(f"SelfSubjectAccessReview {verb} {shown}", review)

    # ------------------------------------------------------------------ pods and budgets

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Every pod bound to `node`, in all namespaces (field selector spec.nodeName, as kubectl drain)."""
        selector = f"spec.nodeName={node}"
        return [
            _pod(p)
            for p in self._all_pages(
                f"LIST pods?fieldSelector={selector}",
                lambda core, _p, _e, **page: core.list_pod_for_all_namespaces(
                    field_selector=selector, _request_timeout=self._timeout, **page
                ),
            )
        ]

    def get_pod(self, namespace: str, name: str) -> PodInfo:
        return self._call(
            f"GET pods/{namespace}/{name}",
            lambda core, _p, _e: _pod(core.read_namespaced_pod(name, namespace, _request_timeout=self._timeout)),
        )

    def get_daemonset(self, namespace: str, name: str) -> ObjectRef:
        """The DaemonSet `namespace/name` (GET apps/v1 daemonsets): its UID, to check a pod's ownerReference."""
        from kubernetes import client

        api = self._load()[0]
        try:
            found = client.AppsV1Api(api).read_namespaced_daemon_set(name, namespace, _request_timeout=self._timeout)
        except Exception as exc:
            raise translate(exc, f"GET daemonsets/{namespace}/{name}") from exc
        meta = found.metadata
        return ObjectRef(namespace=meta.namespace or namespace, name=meta.name or name, uid=meta.uid or "")

    def review_token(self, token: str, audience: str) -> TokenReviewResult:
        """POST an authentication.k8s.io/v1 TokenReview: who the API server says `token` is, for `audience`."""
        from kubernetes import client

        api = self._load()[0]
        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
        try:
            review = client.AuthenticationV1Api(api).create_token_review(body, _request_timeout=self._timeout)
        except Exception as exc:
            raise translate(exc, "POST tokenreviews") from exc
        status = review.status
        if status is None:
            return TokenReviewResult(authenticated=False, error="the API server answered no status")
        user = status.user
        return TokenReviewResult(
            authenticated=bool(status.authenticated),
            username=(user.username if user else None) or "",
            audiences=tuple(status.audiences or ()),
            extra={key: tuple(values or ()) for key, values in ((user.extra if user else None) or {}).items()},
            error=status.error or "",
        )

    def evict_pod(self, namespace: str, name: str, grace_period_seconds: int | None) -> None:
        """POST a policy/v1 Eviction. 429 (KubeTooManyRequests): a PodDisruptionBudget blocks it for now."""
        from kubernetes import client

        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=(
                client.V1DeleteOptions(grace_period_seconds=grace_period_seconds)
                if grace_period_seconds is not None
                else None
            ),
        )
        self._call(
            f"POST pods/{namespace}/{name}/eviction",
            lambda core, _p, _e: core.create_namespaced_pod_eviction(
                name, namespace, body, _request_timeout=self._timeout
            ),
        )

    def list_pdbs(self) -> list[PdbInfo]:
        return [
            _pdb(p)
            for p in self._all_pages(
                "LIST poddisruptionbudgets (policy/v1)",
                lambda _c, policy, _e, **page: policy.list_pod_disruption_budget_for_all_namespaces(
                    _request_timeout=self._timeout, **page
                ),
            )
        ]

    # ------------------------------------------------------------------ events

    def create_event(self, spec: EventSpec) -> None:
        """Create an events.k8s.io/v1 Event about a node (in namespace `default`). Raises KubeConflict if it exists."""
        from kubernetes import client

        if spec.time.tzinfo is None:
            raise ValueError("event times must be timezone-aware (the API refuses others with 400)")
        # MicroTime is parsed with a layout that demands the fraction: isoformat() drops it when it is 0.
        time = spec.time if spec.time.microsecond else spec.time.replace(microsecond=1)
        body = client.EventsV1Event(
            api_version="events.k8s.io/v1",
            kind="Event",
            metadata=client.V1ObjectMeta(name=spec.name, namespace=EVENT_NAMESPACE),
            event_time=time,
            action=spec.action,
            reason=spec.reason,
            type=spec.type,
            note=spec.note[:1024],
            reporting_controller=spec.reporting_controller,
            reporting_instance=spec.reporting_instance[:128],
            regarding=client.V1ObjectReference(api_version="v1", kind="Node", name=spec.node, uid=spec.node_uid),
        )
        self._call(
            f"POST events/{EVENT_NAMESPACE}/{spec.name}",
            lambda _c, _p, events: events.create_namespaced_event(
                EVENT_NAMESPACE, body, _request_timeout=self._timeout
            ),
        )


# --------------------------------------------------------------------------- model -> values


def _time(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _node(node: Any) -> NodeInfo:
    meta, spec = node.metadata, node.spec
    taints = tuple(
        Taint(key=t.key, effect=t.effect, value=t.value or None, time_added=_time(t.time_added))
        for t in ((spec.taints if spec else None) or [])
    )
    return NodeInfo(
        name=meta.name,
        uid=meta.uid or "",
        resource_version=meta.resource_version or "",
        unschedulable=bool(spec.unschedulable) if spec else False,
        taints=taints,
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
    )


def _pod(pod: Any) -> PodInfo:
    meta, spec = pod.metadata, pod.spec
    owners = tuple(
        OwnerRef(kind=o.kind, name=o.name, controller=bool(o.controller), uid=o.uid or "")
        for o in (meta.owner_references or [])
    )
    volumes = (spec.volumes if spec else None) or []
    return PodInfo(
        namespace=meta.namespace or "",
        name=meta.name,
        uid=meta.uid or "",
        node_name=(spec.node_name if spec else None) or "",
        phase=(pod.status.phase if pod.status else None) or "",
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        owners=owners,
        has_emptydir=any(v.empty_dir is not None for v in volumes),
        terminating=meta.deletion_timestamp is not None,
    )


def _pdb(pdb: Any) -> PdbInfo:
    meta, spec, status = pdb.metadata, pdb.spec, pdb.status
    selector = None
    if spec is not None and spec.selector is not None:
        selector = LabelSelector(
            match_labels=dict(spec.selector.match_labels or {}),
            match_expressions=tuple(
                SelectorRequirement(e.key, e.operator, tuple(e.values or ()))
                for e in (spec.selector.match_expressions or [])
            ),
        )
    return PdbInfo(
        namespace=meta.namespace or "",
        name=meta.name,
        selector=selector,
        disruptions_allowed=int(status.disruptions_allowed) if status else 0,
        current_healthy=int(status.current_healthy) if status else 0,
        desired_healthy=int(status.desired_healthy) if status else 0,
        expected_pods=int(status.expected_pods) if status else 0,
    )
