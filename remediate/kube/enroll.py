"""Which node an agent pod is on, from its own projected ServiceAccount token (TokenReview): the server's
side of `POST /v1/agent-credential`.

An agent pod holds no secret that works anywhere else. To get its node's credential
(remediate.agentauth.node_token, which only the server can compute) it presents the token the kubelet
projected into it: audience-bound (`agent_audience`, so the API server and other services refuse it),
bound to that pod (invalid once the pod is gone) and short-lived (rotated by the kubelet). The server
asks the API server who the token is (TokenReview, which checks signature, expiry, audience and that
the bound pod still exists), then reads that pod and checks that it is an agent: in `agent_namespace`,
of `agent_service_account`, with the UID the token names, controlled by the agent DaemonSet
(`agent_daemonset`). The pod's `spec.nodeName` is the one node whose credential it gets: the token of
node A's agent pod yields node A's credential and nothing else, whoever presents it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field

from remediate.agentauth import node_token
from remediate.kube.client import KubeClient
from remediate.kube.errors import KubeNotFound

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


@dataclass(frozen=True)
class AgentPod:
    """The agent pod a token belongs to, and its node."""

    node: str
    namespace: str
    pod: str


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
        """The agent pod of `token`; EnrollmentRefused, or a KubeError when the API cannot answer."""
        review = self.kube.review_token(token, self.audience)
        if not review.authenticated:
            raise EnrollmentRefused(
                401, f"the API server did not accept the token for audience {self.audience!r}: {review.error or '?'}"
            )
        if review.audiences and self.audience not in review.audiences:
            raise EnrollmentRefused(401, f"the token is not for audience {self.audience!r}")
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
            pod = self.kube.get_pod(namespace, pod_name)
        except KubeNotFound:
            raise EnrollmentRefused(403, f"pod {namespace}/{pod_name} of the token is gone") from None
        if pod.uid != pod_uid:
            raise EnrollmentRefused(403, f"pod {namespace}/{pod_name} was replaced since the token was issued")
        controller = pod.controller
        wrong_name = controller is not None and bool(self.daemonset) and controller.name != self.daemonset
        if controller is None or controller.kind != "DaemonSet" or wrong_name:
            owner = f"{controller.kind} {controller.name}" if controller else "nothing"
            wanted = f"DaemonSet {self.daemonset}" if self.daemonset else "a DaemonSet"
            raise EnrollmentRefused(403, f"pod {pod.ref} is controlled by {owner}, not {wanted}: not an agent")
        if not pod.node_name:
            raise EnrollmentRefused(403, f"pod {pod.ref} is on no node yet")
        claimed_node = _one(review.extra, NODE_NAME)
        if claimed_node and claimed_node != pod.node_name:
            raise EnrollmentRefused(403, f"the token names node {claimed_node!r}, its pod is on {pod.node_name!r}")
        return AgentPod(node=pod.node_name, namespace=namespace, pod=pod_name)


def _one(extra: Mapping[str, tuple[str, ...]], key: str) -> str:
    values = extra.get(key, ())
    return values[0] if len(values) == 1 else ""
