"""Kubernetes: the client facade, the error tree and the pure rules (nodes, taints, drains).

Importing this package does not import the official `kubernetes` client; the first
API call does (see `remediate.kube.client`).
"""

from remediate.kube.client import EVENT_NAMESPACE, EventSpec, KubeClient
from remediate.kube.errors import (
    ApiStatus,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    translate,
)
from remediate.kube.model import (
    CORDONED_AT,
    CORDONED_BY_RUN,
    CORDONED_FOR_ALERT,
    TAINT_EFFECTS,
    TAINTS,
    DrainOptions,
    LabelSelector,
    NodeInfo,
    NodeNameError,
    NodeRef,
    PdbInfo,
    PodInfo,
    Taint,
    check_node_name,
    check_taint_key,
    check_taint_value,
    classify_pod,
    pdb_forecast,
    resolve_node_name,
)

__all__ = [
    "CORDONED_AT",
    "CORDONED_BY_RUN",
    "CORDONED_FOR_ALERT",
    "EVENT_NAMESPACE",
    "TAINTS",
    "TAINT_EFFECTS",
    "ApiStatus",
    "DrainOptions",
    "EventSpec",
    "KubeClient",
    "KubeConfigError",
    "KubeConflict",
    "KubeError",
    "KubeNotFound",
    "KubeTooManyRequests",
    "KubeUnavailable",
    "LabelSelector",
    "NodeInfo",
    "NodeNameError",
    "NodeRef",
    "PdbInfo",
    "PodInfo",
    "Taint",
    "check_node_name",
    "check_taint_key",
    "check_taint_value",
    "classify_pod",
    "pdb_forecast",
    "resolve_node_name",
    "translate",
]
