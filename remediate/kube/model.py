"""Plain values for the Kubernetes objects remediate reads (nodes, pods, PDBs), and the pure rules about them.

`remediate.kube.client` turns the official client's models into these frozen
dataclasses at the boundary, so the rules here (who cordoned a node, which taints
are ours, which pods a drain evicts, which PodDisruptionBudget selects a pod) are
pure functions that tests call without an API server.

Ownership: everything remediate changes on a node is recorded on the node itself,
in annotations (so it survives restarts and is visible with `kubectl describe node`):

    remediate.io/cordoned-by-run      run id that cordoned the node
    remediate.io/cordoned-for-alert   fingerprint of that run's alert
    remediate.io/cordoned-at          when (RFC 3339)
    remediate.io/taints               JSON: {"key:effect": {"run": id, "alert": fp, "value": v, "at": t}}

Uncordon and untaint only undo what these annotations say remediate did.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remediate.intake.alertref import node_label

ANNOTATION_PREFIX = "remediate.io/"
CORDONED_BY_RUN = ANNOTATION_PREFIX + "cordoned-by-run"
CORDONED_FOR_ALERT = ANNOTATION_PREFIX + "cordoned-for-alert"
CORDONED_AT = ANNOTATION_PREFIX + "cordoned-at"
TAINTS = ANNOTATION_PREFIX + "taints"

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
"""Labels kubeadm (and most distributions) put on control-plane nodes; `master` is the pre-1.24 name."""
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# --------------------------------------------------------------------------- names


def check_node_name(name: str) -> str | None:
    """Why `name` cannot be a node name (a DNS-1123 subdomain), or None."""
    if not name:
        return "is empty"
    if len(name) > 253:
        return f"is {len(name)} characters long; a node name has at most 253"
    if not DNS1123_SUBDOMAIN.fullmatch(name):
        return (
            f"{name!r} is not a valid node name (DNS-1123 subdomain: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def check_taint_key(key: str) -> str | None:
    """Why `key` cannot be a taint key (a qualified name, optionally prefixed by a DNS subdomain), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"{key!r}: the prefix before '/' must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return f"{key!r}: the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return None


def check_taint_value(value: str) -> str | None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        return f"{value!r}: at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return None


@dataclass(frozen=True)
class NodeRef:
    name: str
    source: str
    """Where the name came from: `param node`, or `label Hostname`, ..."""


class NodeNameError(ValueError):
    """No usable node name in the params or the alert's labels."""


def resolve_node_name(labels: Mapping[str, str], order: Sequence[str], explicit: str | None = None) -> NodeRef:
    """The node a step acts on: the `node` param if given, else the first label of `order` the alert has.

    `instance` loses its port. The value must be a valid node name; whether the node exists is the
    caller's question (it asks the API).
    """
    if explicit:
        ref = NodeRef(explicit, "param node")
    else:
        found = node_label(labels, order)
        if found is None:
            raise NodeNameError(
                f"the alert has none of the labels {', '.join(order)} to name a node (labels: "
                f"{', '.join(sorted(labels)) or 'none'}); set the step's `node` param or kube_node_labels"
            )
        ref = NodeRef(found[1], f"label {found[0]}")
    problem = check_node_name(ref.name)
    if problem:
        raise NodeNameError(f"node name from {ref.source} {problem}")
    return ref


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None
    time_added: str | None = None

    @property
    def id(self) -> str:
        return f"{self.key}:{self.effect}"

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value:
            body["value"] = self.value
        if self.time_added:
            body["timeAdded"] = self.time_added
        return body

    def describe(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    uid: str
    resource_version: str
    unschedulable: bool
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    # ----- what remediate did to it, from its annotations

    @property
    def cordoned_by_run(self) -> int | None:
        value = self.annotations.get(CORDONED_BY_RUN)
        return int(value) if value and value.isdigit() else None

    @property
    def cordoned_for_alert(self) -> str:
        return self.annotations.get(CORDONED_FOR_ALERT, "")

    @property
    def cordoned_by_remediate(self) -> bool:
        return self.unschedulable and self.cordoned_by_run is not None

    def owned_taints(self) -> dict[str, dict[str, Any]]:
        """taint id (key:effect) -> record, for taints remediate added and that are still on the node."""
        try:
            records = json.loads(self.annotations.get(TAINTS, "") or "{}")
        except ValueError:
            return {}
        if not isinstance(records, dict):
            return {}
        present = {t.id for t in self.taints}
        return {k: v for k, v in records.items() if k in present and isinstance(v, dict)}

    @property
    def held_by_remediate(self) -> bool:
        """Cordoned or tainted by remediate right now (what the circuit breaker counts as held)."""
        return self.cordoned_by_remediate or bool(self.owned_taints())

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uid": self.uid,
            "unschedulable": self.unschedulable,
            "taints": [t.describe() for t in self.taints],
            "cordoned_by_run": self.cordoned_by_run,
            "remediate_taints": sorted(self.owned_taints()),
        }


@dataclass(frozen=True)
class OwnerRef:
    kind: str
    name: str
    controller: bool
    uid: str = ""
    """The owner's metadata.uid: a name can be reused by another object, a UID cannot."""


@dataclass(frozen=True)
class ObjectRef:
    """A namespaced object as read from the API (e.g. a DaemonSet): its name and UID."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class TokenReviewResult:
    """What the API server says of a bearer token (authentication.k8s.io/v1 TokenReview status)."""

    authenticated: bool
    username: str = ""
    audiences: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """e.g. authentication.kubernetes.io/pod-name and pod-uid of a pod-bound (projected) token."""
    error: str = ""


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    has_emptydir: bool = False
    terminating: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), None)


@dataclass(frozen=True)
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes label selector semantics (an empty selector matches everything)."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and not (present and labels[req.key] in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                return False
        return True


class SelectorError(ValueError):
    """A label selector string that does not parse."""


_SET_REQUIREMENT = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY_REQUIREMENT = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTENCE_REQUIREMENT = re.compile(r"^(?P<not>!?)\s*(?P<key>[^\s!=(),]+)$")


def parse_label_selector(text: str) -> LabelSelector:
    """A label selector as kubectl and `?labelSelector=` write it: `a=b,c!=d,e in (f,g),h notin (i),j,!k`.

    Raises SelectorError naming the requirement that does not parse (settings check it at load time).
    """
    requirements: list[SelectorRequirement] = []
    # Commas separate requirements, except inside the parentheses of `in (...)` / `notin (...)`.
    for part in (p.strip() for p in re.findall(r"[^,(]+(?:\([^)]*\))?", text)):
        if not part:
            continue
        if m := _SET_REQUIREMENT.fullmatch(part):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append(SelectorRequirement(m["key"], "In" if m["op"] == "in" else "NotIn", values))
        elif m := _EQUALITY_REQUIREMENT.fullmatch(part):
            operator = "NotIn" if m["op"] == "!=" else "In"
            requirements.append(SelectorRequirement(m["key"], operator, (m["value"],)))
        elif m := _EXISTENCE_REQUIREMENT.fullmatch(part):
            requirements.append(SelectorRequirement(m["key"], "DoesNotExist" if m["not"] else "Exists"))
        else:
            raise SelectorError(
                f"{part!r} is not a label selector requirement (key=value, key!=value, "
                "key in (a,b), key notin (a,b), key, !key)"
            )
    for req in requirements:
        problem = check_taint_key(req.key)  # label keys and taint keys share the syntax
        if problem:
            raise SelectorError(f"label key {problem}")
    return LabelSelector(match_expressions=tuple(requirements))


@dataclass(frozen=True)
class PdbInfo:
    namespace: str
    name: str
    selector: LabelSelector | None
    """None: the PDB selects no pods (a null selector)."""
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int
    expected_pods: int

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: PodInfo) -> bool:
        return pod.namespace == self.namespace and self.selector is not None and self.selector.matches(pod.labels)


# --------------------------------------------------------------------------- drain rules (kubectl's)


@dataclass(frozen=True)
class DrainOptions:
    force: bool = False
    """Evict pods no controller manages (they do not come back)."""
    delete_emptydir_data: bool = False
    """Evict pods with emptyDir volumes (their data is lost)."""


@dataclass(frozen=True)
class PodVerdict:
    pod: PodInfo
    action: str
    """evict | skip (mirror and DaemonSet pods stay) | refuse (needs force / delete_emptydir_data)"""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        entry = {"pod": self.pod.ref, "uid": self.pod.uid}
        if self.reason:
            entry["reason"] = self.reason
        return entry


def classify_pod(pod: PodInfo, options: DrainOptions) -> PodVerdict:
    """What `kubectl drain --ignore-daemonsets` does with one pod of the node."""
    if MIRROR_ANNOTATION in pod.annotations:
        return PodVerdict(pod, "skip", "mirror pod (a static pod of the kubelet; it cannot be evicted)")
    controller = pod.controller
    if controller is not None and controller.kind == "DaemonSet":
        return PodVerdict(pod, "skip", f"managed by DaemonSet {controller.name} (it would be recreated at once)")
    finished = pod.phase in ("Succeeded", "Failed")
    if controller is None and not finished and not options.force:
        return PodVerdict(pod, "refuse", "not managed by a controller, so it would not come back (force: true)")
    if pod.has_emptydir and not finished and not options.delete_emptydir_data:
        return PodVerdict(pod, "refuse", "uses emptyDir volumes whose data would be lost (delete_emptydir_data: true)")
    return PodVerdict(pod, "evict")


def pdb_check_skipped(pod: PodInfo) -> str | None:
    """Why the eviction API deletes `pod` without looking at its PodDisruptionBudgets, or None.

    The apiserver's rule (`canIgnorePDB`, pkg/registry/core/pod/storage/eviction.go): a pod that is
    Pending, Succeeded or Failed, or already terminating, is deleted at once; such a pod is either
    not running yet or no longer running, so evicting it disrupts nothing a budget protects.
    """
    if pod.terminating:
        return "already terminating: the eviction API deletes it without a PodDisruptionBudget check"
    if pod.phase in ("Pending", "Succeeded", "Failed"):
        return f"phase {pod.phase}: the eviction API deletes it without a PodDisruptionBudget check"
    return None


def pdb_forecast(pods: Iterable[PodInfo], pdbs: Sequence[PdbInfo]) -> dict[str, dict[str, Any]]:
    """pod ref -> the PDB verdict for evicting `pods` in order: which budgets select it and which would block.

    A budget allows `disruptions_allowed` evictions now; later pods it selects wait until replacements
    are healthy (the API answers 429 meanwhile). A pod selected by more than one budget cannot be
    evicted at all (the API answers 500). Pending, finished and terminating pods are not checked
    against any budget (`pdb_check_skipped`).
    """
    left = {p.ref: p.disruptions_allowed for p in pdbs}
    forecast: dict[str, dict[str, Any]] = {}
    for pod in pods:
        selecting = [p for p in pdbs if p.selects(pod)]
        entry: dict[str, Any] = {"pdbs": [p.ref for p in selecting], "blocked_by": None}
        unchecked = pdb_check_skipped(pod)
        if unchecked:
            # Deleted at once, whatever its budgets say, and without using up any of them.
            entry["no_pdb_check"] = unchecked
        elif len(selecting) > 1:
            entry["blocked_by"] = f"more than one PodDisruptionBudget selects it ({', '.join(entry['pdbs'])})"
        elif selecting:
            pdb = selecting[0]
            if left[pdb.ref] <= 0:
                entry["blocked_by"] = (
                    f"PodDisruptionBudget {pdb.ref} allows no more disruptions now "
                    f"({pdb.current_healthy} healthy, {pdb.desired_healthy} desired, "
                    f"{pdb.disruptions_allowed} allowed)"
                )
            else:
                left[pdb.ref] -= 1
        forecast[pod.ref] = entry
    return forecast
