"""Finding the node agent of a node through the Kubernetes API: the agent DaemonSet's pod on that node.

The server's Dispatch (remediate.executor.dispatch) asks a KubernetesAgents directory (an
remediate.agentwire.protocol.AgentDirectory) for the agent URL of a step's target node, when
`agent_selector` is set. The API client is remediate.kube.KubeClient's, built from the same
settings (`kubeconfig`, `kube_context`) as the k8s.* actions: there is one place that loads
Kubernetes configuration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from remediate.agentwire.protocol import AgentDirectory, AgentNotFound
from remediate.kube.client import KubeClient
from remediate.kube.errors import KubeConfigError
from remediate.kube.errors import _short as _short_error
from remediate.kube.model import check_node_name
from remediate.kube.nodecache import PAGE_SIZE

log = logging.getLogger("remediate.runners")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DISCOVERY_TTL = 30.0
"""Seconds a discovered agent URL is reused before the Kubernetes API is asked again."""
DISCOVERY_STALE_MAX = 3600.0
"""Seconds a discovered agent URL is still used while the Kubernetes API cannot answer (down, 5xx, time-out):
a rollback on a node must not wait for the cluster API. Safe because only the answer of that node's own agent,
signed with its credential, is believed; a call that fails there drops the URL (`forget`)."""


class DiscoveryUnavailable(AgentNotFound):
    """The Kubernetes API did not answer the lookup (not: it answered that there is no agent)."""


@dataclass(eq=False)
class KubernetesAgents(AgentDirectory):
    """The Running and Ready agent pod on a node, by label selector and spec.nodeName, through the API.

    Only pods whose controller ownerReference is a DaemonSet (named `daemonset` when given) count:
    labels alone can be copied by anyone who may create a pod in the namespace.
    `api` is a CoreV1Api, built lazily by `remediate.kube.KubeClient` from the same settings as the
    k8s.* actions (`kubeconfig` and `context` when given, else the in-cluster service account; never
    $KUBECONFIG or ~/.kube/config on their own). Answers are cached for `ttl` seconds, and used for up to
    `stale_max` while the API cannot answer; `forget` drops one after a failed call.
    """

    selector: str
    namespace: str
    port: int
    _: KW_ONLY
    daemonset: str | None = None
    api: Any = None
    kubeconfig: Path | None = None
    context: str | None = None
    ttl: float = DISCOVERY_TTL
    stale_max: float = DISCOVERY_STALE_MAX
    clock: Callable[[], float] = time.monotonic
    _cache: dict[str, tuple[float, str]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _core(self) -> Any:
        if self.api is None:
            try:
                self.api = KubeClient(kubeconfig=self.kubeconfig, context=self.context).core_api()
            except KubeConfigError as exc:
                raise AgentNotFound(f"cannot reach the Kubernetes API to find agents: {exc}", retryable=False) from exc
        return self.api

    def url_for(self, node: str) -> str:
        with self._lock:
            cached = self._cache.get(node)
            if cached is not None and self.clock() - cached[0] < self.ttl:
                return cached[1]
        try:
            url = self._lookup(node)
        except DiscoveryUnavailable as exc:
            if cached is None or self.clock() - cached[0] >= self.stale_max:
                raise
            log.warning(
                "%s; using the agent address found %.0fs ago for node %s: %s", exc, self.clock() - cached[0], node,
                cached[1],
            )  # fmt: skip
            return cached[1]
        with self._lock:
            self._cache[node] = (self.clock(), url)
        return url

    def forget(self, node: str) -> None:
        with self._lock:
            self._cache.pop(node, None)

    def _lookup(self, node: str) -> str:
        # The node is the run's target, taken from an alert label: it must be a node name before it
        # becomes part of a field selector.
        problem = check_node_name(node)
        if problem:
            raise AgentNotFound(f"cannot look up the agent of node {node[:80]!r}: the name {problem}", retryable=False)
        where = f"namespace {self.namespace}, selector {self.selector!r}"
        try:
            pods = self._pods_on(node)
        except AgentNotFound:
            raise
        except Exception as exc:  # ApiException, urllib3 errors: the API server may be busy
            raise DiscoveryUnavailable(
                f"cannot list agent pods on node {node!r} ({where}): {_short_error(exc)}", retryable=True
            ) from exc
        owned = [pod for pod in pods if _owned_by_daemonset(pod, self.daemonset)]
        impostors = [pod.metadata.name for pod in pods if pod not in owned]
        if impostors:
            log.warning(
                "ignoring pods on node %s that match %s but are not owned by %s: %s",
                node,
                where,
                f"DaemonSet {self.daemonset}" if self.daemonset else "a DaemonSet",
                ", ".join(impostors),
            )
        if impostors and not owned:
            raise AgentNotFound(
                f"no agent pod on node {node!r} ({where}): {', '.join(impostors)} "
                f"{'is' if len(impostors) == 1 else 'are'} not owned by "
                f"{f'DaemonSet {self.daemonset}' if self.daemonset else 'a DaemonSet'} (refused as impostors)",
                retryable=False,
            )
        ready = [pod for pod in owned if _pod_ready(pod)]
        if not ready:
            seen = ", ".join(f"{p.metadata.name} ({(p.status and p.status.phase) or '?'})" for p in pods)
            raise AgentNotFound(
                f"no Ready agent pod on node {node!r} ({where}; pods there: {seen or 'none'})", retryable=True
            )
        newest = max(
            ready, key=lambda p: p.metadata.creation_timestamp.timestamp() if p.metadata.creation_timestamp else 0
        )
        host = newest.status.pod_ip
        if ":" in host:  # IPv6
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def _pods_on(self, node: str) -> list[Any]:
        """The agent pods bound to `node`, a page (PAGE_SIZE) at a time as every LIST of remediate's."""
        pods: list[Any] = []
        token: str | None = None
        while True:
            page = self._core().list_namespaced_pod(
                self.namespace,
                label_selector=self.selector,
                field_selector=f"spec.nodeName={node}",
                limit=PAGE_SIZE,
                _continue=token,
                _request_timeout=10,
            )
            pods.extend(page.items or [])
            token = page.metadata._continue if page.metadata is not None else None
            if not token:
                return pods


def _owned_by_daemonset(pod: Any, name: str | None) -> bool:
    """True when the pod's controller ownerReference is a DaemonSet (of that name, when given)."""
    for ref in pod.metadata.owner_references or []:
        if ref.controller and ref.kind == "DaemonSet" and (ref.api_version or "").startswith("apps/"):
            return name is None or ref.name == name
    return False


def _pod_ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status is None or not pod.status.pod_ip:
        return False
    if pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def own_namespace() -> str:
    """The namespace of this pod (from its service account), else "default"."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"
