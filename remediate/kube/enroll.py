"""Which node an agent pod is on, from its own projected ServiceAccount token (TokenReview): the server's
side of `POST /v1/agent-credential`.

An agent pod holds no secret that works anywhere else. To get its node's credential
(remediate.agentwire.auth.node_token, which only the server can compute) it presents the token the kubelet
projected into it: audience-bound (`agent_audience`, so the API server and other services refuse it),
bound to that pod (invalid once the pod is gone) and short-lived (rotated by the kubelet). The server
asks the API server who the token is (TokenReview, which checks signature, expiry, audience and that
the bound pod still exists, and names the audiences it checked: ours must be among them), then reads that pod
and checks that it is an agent: in `agent_namespace`, of `agent_service_account`, with the UID the token names,
not terminating, controlled by the agent DaemonSet (`agent_daemonset`), by UID: the ownerReference's UID is
that of the DaemonSet as the API has it now. The pod's `spec.nodeName` is the one node whose credential it
gets: the token of node A's agent pod yields node A's credential and nothing else, whoever presents it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

from remediate.agentwire.auth import node_token
from remediate.kube.client import KubeClient
from remediate.kube.errors import KubeConfigError, KubeError, KubeNotFound
from remediate.kube.model import PodInfo

DEFAULT_AUDIENCE = "remediate-agent"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
"""Set by API servers from 1.30 on (ServiceAccountTokenPodNodeInfo); checked when present."""
_SA_PREFIX = "system:serviceaccount:"


class EnrollmentRefused(Exception):
    """The token is not an agent pod's: `status` 401 (not a valid token for the audience) or 403 (valid, but not
    an agent pod of this release)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EnrollmentBroken(Exception):
    """The server cannot check any agent's token until its own set-up is fixed: the API refuses a call it needs
    (403: its ServiceAccount lacks the permission; 401: the API refuses the server's own credential) or it has no
    cluster configuration. Not the asking pod's fault, and asking again changes nothing."""


@dataclass(frozen=True)
class AgentPod:
    """The agent pod a token belongs to, and its node."""

    node: str
    namespace: str
    pod: str


T = TypeVar("T")


@dataclass(frozen=True)
class AgentEnrollment:
    """Tells which node the agent pod presenting a token runs on (see the module docstring)."""

    kube: KubeClient
    _: KW_ONLY
    master: str = field(repr=False)
    namespace: str
    audience: str = DEFAULT_AUDIENCE
    daemonset: str | None = None
    service_account: str | None = None

    def issue(self, token: str) -> tuple[AgentPod, str]:
        """The agent pod of `token` and the credential of its node (node_token of the master secret)."""
        pod = self.identify(token)
        return pod, node_token(self.master, pod.node)

    def identify(self, token: str) -> AgentPod:
        """The agent pod of `token`; EnrollmentRefused, EnrollmentBroken, or a KubeError when the API cannot
        answer."""
        review = _asking(
            "create tokenreviews (API group authentication.k8s.io, cluster-wide)",
            lambda: self.kube.review_token(token, self.audience),
        )
        if not review.authenticated:
            raise EnrollmentRefused(
                401, f"the API server did not accept the token for audience {self.audience!r}: {review.error or '?'}"
            )
        # The API server lists the audiences it checked the token for. None listed (an audience-unaware
        # authenticator, an API server before 1.13) means nobody checked ours: the automounted token of any pod,
        # meant for the API server, would pass. Refused, rather than trusting an unchecked audience.
        if self.audience not in review.audiences:
            found = ", ".join(review.audiences) or "none"
            raise EnrollmentRefused(
                401,
                f"the API server did not confirm that the token is for audience {self.audience!r} "
                f"(status.audiences: {found})",
            )
        namespace, _, account = review.username.removeprefix(_SA_PREFIX).partition(":")
        if not review.username.startswith(_SA_PREFIX) or namespace != self.namespace:
            raise EnrollmentRefused(
                403, f"{review.username!r} is not a service account of namespace {self.namespace!r}"
            )
        if self.service_account and account != self.service_account:
            raise EnrollmentRefused(403, f"service account {account!r} is not the agents' ({self.service_account!r})")
        pod_name, pod_uid = _one(review.extra, POD_NAME), _one(review.extra, POD_UID)
        if not pod_name or not pod_uid:
            raise EnrollmentRefused(
                403, "the token is not bound to a pod (use a projected serviceAccountToken volume in the agent pod)"
            )
        try:
            pod = _asking(f"get pods in namespace {namespace}", lambda: self.kube.get_pod(namespace, pod_name))
        except KubeNotFound:
            raise EnrollmentRefused(403, f"pod {namespace}/{pod_name} of the token is gone") from None
        if pod.uid != pod_uid:
            raise EnrollmentRefused(403, f"pod {namespace}/{pod_name} was replaced since the token was issued")
        # Its token stays valid through the grace period; a pod on its way out gets nothing new.
        if pod.terminating:
            raise EnrollmentRefused(403, f"pod {pod.ref} is terminating (deletionTimestamp set)")
        self._check_controller(pod)
        if not pod.node_name:
            raise EnrollmentRefused(403, f"pod {pod.ref} is on no node yet")
        claimed_node = _one(review.extra, NODE_NAME)
        if claimed_node and claimed_node != pod.node_name:
            raise EnrollmentRefused(403, f"the token names node {claimed_node!r}, its pod is on {pod.node_name!r}")
        return AgentPod(node=pod.node_name, namespace=namespace, pod=pod_name)

    def _check_controller(self, pod: PodInfo) -> None:
        """EnrollmentRefused unless `pod` is controlled by the agent DaemonSet, as it exists now: the
        ownerReference's UID must be that DaemonSet's (a name is only a claim, and can be written by whoever may
        create a pod in the namespace; a UID is given by the API server to one object only)."""
        controller = pod.controller
        wrong_name = controller is not None and bool(self.daemonset) and controller.name != self.daemonset
        if controller is None or controller.kind != "DaemonSet" or wrong_name:
            owner = f"{controller.kind} {controller.name}" if controller else "nothing"
            wanted = f"DaemonSet {self.daemonset}" if self.daemonset else "a DaemonSet"
            raise EnrollmentRefused(403, f"pod {pod.ref} is controlled by {owner}, not {wanted}: not an agent")
        try:
            daemonset = _asking(
                f"get daemonsets (API group apps) in namespace {pod.namespace}",
                lambda: self.kube.get_daemonset(pod.namespace, controller.name),
            )
        except KubeNotFound:
            raise EnrollmentRefused(
                403, f"pod {pod.ref} names DaemonSet {controller.name} as its controller, which does not exist"
            ) from None
        if not controller.uid or controller.uid != daemonset.uid:
            raise EnrollmentRefused(
                403,
                f"pod {pod.ref} names DaemonSet {controller.name} with UID {controller.uid or 'none'!r}, but that "
                f"DaemonSet's UID is {daemonset.uid!r}: not one of its pods",
            )


def _asking(permission: str, call: Callable[[], T]) -> T:
    """`call`'s answer; EnrollmentBroken when the API refuses the server itself (`permission`: what it needs)."""
    try:
        return call()
    except KubeConfigError as exc:
        raise EnrollmentBroken(f"the server cannot check agent tokens: {exc}") from exc
    except KubeError as exc:
        if exc.code not in (401, 403):
            raise
        raise EnrollmentBroken(
            f"the server cannot check agent tokens: {exc} (its ServiceAccount needs {permission}; the chart's "
            "rbac.create grants it)"
        ) from exc


def _one(extra: Mapping[str, tuple[str, ...]], key: str) -> str:
    values = extra.get(key, ())
    return values[0] if len(values) == 1 else ""
