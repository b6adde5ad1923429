"""Kubernetes: the client facade, the error tree and the pure rules (nodes, taints, drains).

Importing this package does not import the official `kubernetes` client; the first
API call does (see `remediate.kube.client`).

May import: remediate.errors, intake.alertref and agentwire (agent discovery, enrollment); nothing above it
(pyproject.toml's `backends` contract).
"""

from remediate.kube.client import EVENT_NAMESPACE, EventSpec, KubeClient
from remediate.kube.errors import (
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeGone,
    KubeNotFound,
    KubeTooManyRequests,
    KubeUnavailable,
    translate,
)
from remediate.kube.model import (
    CONTROL_PLANE_LABELS,
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
    SelectorError,
    Taint,
    check_node_name,
    check_taint_key,
    check_taint_value,
    classify_pod,
    parse_label_selector,
    pdb_forecast,
    resolve_node_name,
)
from remediate.kube.nodecache import CacheStatus, Census, NodeCache
from remediate.kube.owner import OWNER, OWNER_SINCE, OWNER_WHY, NodeOwner, owner_of, release_patch

__all__ = [
    "CONTROL_PLANE_LABELS",
    "CORDONED_AT",
    "CORDONED_BY_RUN",
    "CORDONED_FOR_ALERT",
    "EVENT_NAMESPACE",
    "OWNER",
    "OWNER_SINCE",
    "OWNER_WHY",
    "TAINTS",
    "TAINT_EFFECTS",
    "CacheStatus",
    "Census",
    "DrainOptions",
    "EventSpec",
    "KubeClient",
    "KubeConfigError",
    "KubeConflict",
    "KubeError",
    "KubeGone",
    "KubeNotFound",
    "KubeTooManyRequests",
    "KubeUnavailable",
    "LabelSelector",
    "NodeCache",
    "NodeInfo",
    "NodeNameError",
    "NodeOwner",
    "NodeRef",
    "PdbInfo",
    "PodInfo",
    "SelectorError",
    "Taint",
    "check_node_name",
    "check_taint_key",
    "check_taint_value",
    "classify_pod",
    "owner_of",
    "parse_label_selector",
    "pdb_forecast",
    "release_patch",
    "resolve_node_name",
    "translate",
]
