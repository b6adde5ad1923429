"""A Kubernetes API server for tests: real HTTP on 127.0.0.1, the REST protocol the official client speaks.

Not a mock of the client: `kubernetes.client` is configured exactly as for a real cluster
(a kubeconfig file with `server: http://127.0.0.1:PORT` and a bearer token, written by
`FakeKubeAPI.write_kubeconfig`) and talks JSON over HTTP/1.1 to this server, which
reproduces the behaviours remediate depends on (each checked in tests/integration/test_fake_apiserver.py):

- bearer-token auth (401 Status otherwise); unknown paths -> 404 Status; wrong methods -> 405
- RBAC authorization, once `authorize_as` loaded Roles, ClusterRoles and their bindings (e.g. the ones
  the Helm chart renders) and made the token a ServiceAccount's: each resource request is allowed
  only if a rule bound to that ServiceAccount (or its groups) grants its verb, API group, resource
  (`pods/eviction` for a subresource), namespace and name; otherwise 403 Forbidden with the
  apiserver's Status body (`nodes "gpu-1" is forbidden: User "system:serviceaccount:ns:sa" cannot
  patch resource "nodes" in API group "" at the cluster scope`). Non-resource paths (/version) are
  allowed to everyone authenticated. Without `authorize_as` authorization is off (as for cluster-admin)
- nodes: GET, LIST (labelSelector, fieldSelector metadata.name / spec.unschedulable), PATCH with
  strategic-merge-patch (maps merge, `null` deletes, lists such as spec.taints are REPLACED whole),
  JSON merge patch (RFC 7386) and JSON patch (RFC 6902: add/remove/replace/test, `-` appends);
  other patch types -> 415; metadata.resourceVersion in a patch is a precondition (409 Conflict
  with the apiserver's message when stale); every write bumps resourceVersion; validation of
  taints (422 Invalid: bad key, unsupported effect, duplicate key+effect) and 400 for values that
  do not decode (a non-boolean unschedulable, a timeAdded without a zone)
- apps/v1 DaemonSets: GET (404 Status once gone); `add_daemonset` makes one, and a pod `add_pod` gives a
  DaemonSet owner of that name carries its UID in the ownerReference (a made-up `owner_uid` is kept as given)
- pods: LIST in all namespaces or one, with fieldSelector spec.nodeName / metadata.namespace /
  metadata.name / status.phase (unsupported fields -> 400 "field label not supported") and
  labelSelector; GET (404 Status with details once gone); DELETE
- authorization.k8s.io/v1 SelfSubjectAccessReviews (resourceAttributes): `allowed` as the RBAC above decides
  for the caller (always true while authorization is off); any authenticated user may ask
- policy/v1 evictions (POST .../pods/{name}/eviction): name/namespace must match the URL (400);
  404 for a pod that is gone; a pod selected by one PodDisruptionBudget with disruptionsAllowed 0
  -> 429 with the exact Status body (reason TooManyRequests, details.causes[0].reason
  DisruptionBudget, "The disruption budget X needs N healthy pods and has M currently"); more
  than one PDB -> 500 InternalError; a PDB the disruption controller has not observed yet
  (status.observedGeneration < metadata.generation) -> 429 with Retry-After: 10 and "The disruption
  budget X is still being processed by the server."; terminal, pending or already terminating pods are deleted
  without a PDB check (an eviction of a terminating pod succeeds again and changes nothing);
  201 Status Success otherwise. An evicted pod terminates for `deletion_seconds`, then is gone,
  or replaced under the same name with a new UID (StatefulSet-like pods); a PDB may regain its
  budget `heal_after` seconds after an eviction (the replacement became healthy)
- policy/v1 PodDisruptionBudgets: LIST (all namespaces or one)
- events.k8s.io/v1 Events: POST with decoding of eventTime as the apiserver's MicroTime does
  (a time without a zone, or without the 6-digit fraction -> 400 "cannot be handled as a
  Event: parsing time ..."), validation (422 Invalid listing each missing/invalid field:
  metadata.name, eventTime, reportingController, reportingInstance, action, reason, type
  Normal|Warning, note length, namespace `default` for cluster-scoped `regarding`), namespace
  mismatch with the URL -> 400, an existing name -> 409 AlreadyExists; LIST with fieldSelector
- batch/v1 Jobs: POST (422 Invalid for a name that is not a DNS-1123 label, a template without containers or
  with a restartPolicy other than Never / OnFailure; 409 AlreadyExists for a name taken), GET; nothing runs
  them: the test plays the Job controller with `finish_job`, which adds the Job's pod (labels job-name,
  batch.kubernetes.io/job-name and controller-uid, bound to the template's nodeName, phase Succeeded or
  Failed, its log) and sets the Job's status (succeeded / failed, the condition Complete or Failed True, as
  the controller leaves a finished Job); GET .../pods/{name}/log answers a pod's log as text/plain
- authentication.k8s.io/v1 TokenReview (POST .../tokenreviews) of the projected ServiceAccount tokens
  `issue_token` hands out (what the kubelet mounts into a pod): 400 for an empty spec.token; else
  201 with status.authenticated and, for a valid token, user.username
  `system:serviceaccount:NS:SA`, its groups and extra pod-name, pod-uid, node-name, node-uid and
  credential-id, and status.audiences = the token's audiences among the requested ones (default:
  the API server's own, `API_AUDIENCE`); otherwise authenticated false and status.error as the
  apiserver words it: no shared audience, expired, the bound pod gone or replaced ("service
  account token has been invalidated"), an unknown token
- LIST of nodes, pods, PDBs and events is paginated as the apiserver does: `limit` answers at most that many
  items and a `continue` token (metadata.continue, metadata.remainingItemCount); every page of one list
  carries the first page's resourceVersion; a token older than the last compaction (`compact`, or the
  watch window running past it) -> 410 Expired with the apiserver's message; a token that does not decode -> 400
- WATCH of nodes (GET /api/v1/nodes?watch=true&resourceVersion=RV): a chunked stream of one JSON event a line,
  ADDED / MODIFIED / DELETED with the whole object, each change after RV in order (RV unset or "0": the
  current nodes as ADDED first); an RV older than the retained history (`watch_window` events, or `compact`)
  -> the stream's only event is an ERROR with the 410 Expired Status "too old resource version: RV (OLDEST)";
  `allowWatchBookmarks=true` and `bookmark_interval` set: a BOOKMARK (only metadata.resourceVersion) that
  often; the stream ends after `timeoutSeconds`, on `end_watches()` (an apiserver restart) and on close;
  `stall_watches = True` keeps streams open but silent (a connection a proxy stopped forwarding)
- `request_count(verb=..., resource=...)`: requests by the apiserver's verb (get, list, watch, patch,
  create, delete) and resource (nodes, pods, ...), every attempt counted (also those a fault answered)
- fault injection (`inject`): 5xx Status answers, time-outs (before or after the change was
  made: the answer never comes), connection resets, each for a count, forever or at a rate
  (seeded random); and `before` hooks that change an object between a client's read and
  write (to provoke 409s)

Everything is in memory behind one lock. `changes` records every effective change (a node
cordoned/uncordoned, a taint added/removed, a pod evicted, an event created) so tests can
assert that no change was made twice; `requests` records every request and its answer code.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

TOKEN = "fake-apiserver-token"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
"""The audience the API server itself accepts (and reviews against when a TokenReview names none)."""
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_MICROTIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


_REJECTED = "the server rejected our request due to an error in our request"
_MIXED = (
    ("status", 500),
    ("status", 503),
    ("status", 504),
    ("reset", 0),
    ("timeout_before", 0),
    ("timeout_after", 0),
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status as the apiserver writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    if code < 400:
        body.pop("message")
        body.pop("reason")
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = status_body(code, reason, message, details)
        self.code = code


def not_found(kind: str, name: str, group: str = "") -> ApiError:
    resource = f"{kind}.{group}" if group else kind
    details = {"name": name, "kind": kind, **({"group": group} if group else {})}
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', details)


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    words = [f"{c['field']}: {c['message']}" for c in causes]
    listed = words[0] if len(words) == 1 else "[" + ", ".join(words) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified} "{name}" is invalid: {listed}',
        {"name": name, "group": group, "kind": kind, "causes": causes}
        if group
        else {"name": name, "kind": kind, "causes": causes},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


# --------------------------------------------------------------------------- selectors


def _parse_label_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    requirements = []
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?", text or ""):
        part = part.strip()
        if not part:
            continue
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append((m.group(1), m.group(2), values))
        elif m := re.fullmatch(r"(\S+?)\s*(==|=|!=)\s*(\S*)", part):
            requirements.append((m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
        elif m := re.fullmatch(r"!(\S+)", part):
            requirements.append((m.group(1), "!", ()))
        elif re.fullmatch(r"\S+", part):
            requirements.append((part, "exists", ()))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")
    return requirements


def label_selector_matches(text: str, labels: Mapping[str, str]) -> bool:
    for key, op, values in _parse_label_selector(text):
        if op == "=" and labels.get(key) != values[0]:
            return False
        if op == "!=" and labels.get(key) == values[0]:
            return False
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and key in labels and labels[key] in values:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!" and key in labels:
            return False
    return True


def _get_path(obj: Mapping[str, Any], dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def field_selector_matches(text: str, obj: Mapping[str, Any], supported: tuple[str, ...]) -> bool:
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: {part!r}")
        name, op, wanted = m.group(1), m.group(2), m.group(3)
        if name not in supported:
            raise bad_request(f"field label not supported: {name}")
        value = _get_path(obj, name)
        text_value = "" if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        if (op == "!=") == (text_value == wanted):
            return False
    return True


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any, *, strategic: bool) -> Any:
    """RFC 7386 merge; with `strategic`, the subset of strategic merge the Node type needs.

    Node has no merge keys on spec (taints has no patchStrategy): lists are replaced whole in
    both modes. `$`-directives are refused rather than half-implemented.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if strategic and key.startswith("$"):
            raise bad_request(f"the test API server does not implement the strategic-merge directive {key}")
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value, strategic=strategic)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request("invalid JSON patch operation")
        parts = _pointer(op["path"])
        parent: Any = doc
        for part in parts[:-1]:
            if isinstance(parent, list):
                parent = parent[int(part)]
            elif isinstance(parent, dict) and part in parent:
                parent = parent[part]
            else:
                raise ApiError(
                    422,
                    "Invalid",
                    f"{_REJECTED}: doc is missing path: {op['path']}",
                )
        last = parts[-1]
        kind = op["op"]
        try:
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op.get("value")))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))
                else:
                    del parent[last]
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op.get("value"))
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op.get("value"))
            elif kind == "test":
                current = parent[int(last)] if isinstance(parent, list) else parent[last]
                if current != op.get("value"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"{_REJECTED}: testing value {op['path']} failed",
                    )
            else:
                raise bad_request(f"the test API server does not implement JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(
                422,
                "Invalid",
                f"{_REJECTED}: {kind} operation does not apply: doc is missing path: {op['path']}",
            ) from exc
    return doc


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    kind: str
    """status | timeout_before | timeout_after | reset"""
    method: str | None = None
    path: str | None = None
    status: int = 500
    times: int | None = None
    rate: float = 1.0
    delay: float = 2.0
    fired: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.method and not re.fullmatch(self.method, method):
            return False
        return not (self.path and not re.search(self.path, path))


@dataclass
class Hook:
    method: str
    path: str
    action: Callable[[FakeKubeAPI], None]
    times: int = 1


@dataclass(frozen=True)
class Change:
    kind: str
    """cordon | uncordon | taint+ | taint- | annotate | evict | delete | event | job"""
    target: str
    detail: str = ""
    at: float = field(default_factory=time.monotonic)


# --------------------------------------------------------------------------- RBAC

SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
"""Every authenticated user may create these (the system:basic-user ClusterRole): asking is never forbidden."""
_RESOURCE_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?(?:/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?)?$"
)


@dataclass(frozen=True)
class RequestAttributes:
    """What the apiserver's authorizer sees of a resource request."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    @classmethod
    def of(cls, method: str, path: str) -> RequestAttributes | None:
        """None for a non-resource request (/version, discovery), which every authenticated user may make."""
        m = _RESOURCE_PATH.match(path)
        if m is None or not (m["resource"] or m["ns"]):
            return None
        if not m["resource"]:  # /api/v1/namespaces/X is the namespace X itself
            resource, namespace, name, sub = "namespaces", "", m["ns"], ""
        else:
            resource, namespace, name, sub = m["resource"], m["ns"] or "", m["name"] or "", m["sub"] or ""
        verb = {
            "GET": "get" if name else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }.get(method, method.lower())
        return cls(verb, m["group"] or "", resource, sub, namespace, name)

    def forbidden(self, user: str) -> ApiError:
        """The apiserver's 403 (responsewriters.Forbidden: errors.NewForbidden with forbiddenMessage)."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        why = f'User "{user}" cannot {self.verb} resource "{resource}" in API group "{self.group}" {where}'
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        head = f'{qualified} "{self.name}"' if self.name else qualified
        details = {k: v for k, v in (("name", self.name), ("group", self.group)) if v}
        return ApiError(403, "Forbidden", f"{head} is forbidden: {why}", {**details, "kind": self.resource})


@dataclass(frozen=True)
class Rbac:
    """The RBAC authorizer for one ServiceAccount: the rules bound to it, each with where it applies."""

    user: str
    rules: tuple[tuple[str | None, Mapping[str, Any]], ...]
    """(namespace the rule applies in, or None for every namespace and the cluster scope; the rule)."""

    @classmethod
    def of(cls, objects: list[Mapping[str, Any]], service_account: tuple[str, str]) -> Rbac:
        namespace, name = service_account
        user = f"system:serviceaccount:{namespace}:{name}"
        groups = {"system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"}
        roles = {
            (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
            for o in objects
            if o.get("kind") in ("Role", "ClusterRole")
        }

        def bound(subject: Mapping[str, Any]) -> bool:
            kind = subject.get("kind")
            if kind == "ServiceAccount":
                return (subject.get("namespace"), subject.get("name")) == (namespace, name)
            return (kind == "User" and subject.get("name") == user) or (
                kind == "Group" and subject.get("name") in groups
            )

        rules: list[tuple[str | None, Mapping[str, Any]]] = []
        for binding in objects:
            if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if not any(bound(s) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            # A RoleBinding grants in its own namespace only, whether it names a Role or a ClusterRole.
            scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
            role_ns = scope if ref["kind"] == "Role" else None
            role = roles.get((ref["kind"], role_ns, ref["name"]))
            if role is not None:  # a binding to a missing role grants nothing, as in a cluster
                rules.extend((scope, rule) for rule in role.get("rules") or [])
        return cls(user, tuple(rules))

    def allows(self, request: RequestAttributes) -> bool:
        resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        for scope, rule in self.rules:
            if scope is not None and scope != request.namespace:
                continue
            if not _any_of(rule.get("verbs"), request.verb) or not _any_of(rule.get("apiGroups"), request.group):
                continue
            if not _any_of(rule.get("resources"), resource):
                continue
            names = rule.get("resourceNames") or []
            if names and request.name not in names:
                continue
            return True
        return False

    def check(self, method: str, path: str, *, watch: bool = False) -> ApiError | None:
        """The 403 for a request this ServiceAccount may not make, or None (`watch`: a GET with ?watch=true)."""
        request = RequestAttributes.of(method, path)
        if request is not None and watch:
            request = replace(request, verb="watch")
        if request is None or self.allows(request):
            return None
        return request.forbidden(self.user)


def _any_of(granted: Any, wanted: str) -> bool:
    return bool(granted) and ("*" in granted or wanted in granted)


# --------------------------------------------------------------------------- the server


class FakeKubeAPI:
    """The API server. Use as a context manager; `url`, `token`, `write_kubeconfig(path)`."""

    def __init__(self, *, token: str = TOKEN, seed: int = 0, deletion_seconds: float = 0.05) -> None:
        self.token = token
        self.deletion_seconds = deletion_seconds
        self.lock = threading.RLock()
        self.random = random.Random(seed)
        self._rv = 1000
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        self.daemonsets: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.service_account_tokens: dict[str, dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_logs: dict[tuple[str, str], str] = {}
        self.faults: list[Fault] = []
        self.hooks: list[Hook] = []
        self.changes: list[Change] = []
        self.requests: list[tuple[str, str, int]] = []
        self.verbs: list[tuple[str, str]] = []
        """(verb, resource) of every request, in order (see `request_count`)."""
        self.node_log: list[tuple[int, str, dict[str, Any]]] = []
        """(resourceVersion, event type, the node as it then was) of the last `watch_window` node changes."""
        self.watch_window = 10_000
        self.oldest_rv = self._rv
        """Watches from an older resourceVersion, and continue tokens of older lists, are answered 410."""
        self.bookmark_interval: float | None = None
        self.stall_watches = False
        self.changed = threading.Condition(self.lock)
        self._watch_epoch = 0
        self._closed = False
        self.rbac: Rbac | None = None
        self.audience_unaware = False
        """True: TokenReview ignores spec.audiences and answers no status.audiences, as an API server whose
        token authenticator knows nothing of audiences does (before 1.13 every one; a webhook authenticator)."""
        """None: authorization off (the token may do everything). See `authorize_as`."""
        self._pending_deletions: dict[tuple[str, str], float] = {}
        self._heals: list[tuple[float, tuple[str, str]]] = []
        self._observations: list[tuple[float, tuple[str, str]]] = []
        self._server = _Server(self)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self.changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_kubeconfig(self, path: Path, *, context: str = "fake") -> Path:
        """A kubeconfig as `kubectl config view` would show it for this cluster."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": "remediate", "user": {"token": self.token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake-cluster", "user": "remediate"}}],
            "current-context": context,
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def authorize_as(self, objects: list[Mapping[str, Any]], service_account: tuple[str, str]) -> Rbac:
        """From now on the token is ServiceAccount `service_account` (namespace, name), and every request
        it makes is authorized by the Roles, ClusterRoles and bindings among `objects` (others ignored)."""
        rbac = Rbac.of(objects, service_account)
        with self.lock:
            self.rbac = rbac
        return rbac

    # ------------------------------------------------------------------ state (the test's side)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        unschedulable: bool = False,
        taints: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        with self.lock:
            spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24"}
            if unschedulable:
                spec["unschedulable"] = True
            if taints:
                spec["taints"] = copy.deepcopy(taints)
            node = {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self._next_rv(),
                    "creationTimestamp": _now(),
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                    "annotations": dict(annotations or {}),
                },
                "spec": spec,
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "nodeInfo": {
                        "kubeletVersion": "v1.30.4",
                        "machineID": name,
                        "systemUUID": name,
                        "bootID": "b",
                        "kernelVersion": "6.1.0",
                        "osImage": "Debian GNU/Linux 12 (bookworm)",
                        "containerRuntimeVersion": "containerd://1.7.20",
                        "kubeProxyVersion": "v1.30.4",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                    },
                },
            }
            self.nodes[name] = node
            self._node_event("ADDED", node)
            return copy.deepcopy(node)

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        owner: str | None = "ReplicaSet",
        owner_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        mirror: bool = False,
        emptydir: bool = False,
        phase: str = "Running",
        replace_on_delete: bool = False,
        service_account: str = "default",
        owner_uid: str | None = None,
    ) -> dict[str, Any]:
        """A pod bound to `node`. `replace_on_delete`: once deleted, its controller recreates it under the
        same name (new UID, on no node yet), as a StatefulSet does. The ownerReference's UID: `owner_uid`, else
        that of the DaemonSet `owner_name` when `add_daemonset` made it, else a new one."""
        with self.lock:
            meta: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_rv(),
                "creationTimestamp": _now(),
                "labels": dict(labels or {}),
                "annotations": {"kubernetes.io/config.mirror": "abc123"} if mirror else {},
            }
            if owner:
                owner_name = owner_name or f"{name.rsplit('-', 1)[0]}"
                known = self.daemonsets.get((namespace, owner_name)) if owner == "DaemonSet" else None
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner,
                        "name": owner_name,
                        "uid": owner_uid or (known["metadata"]["uid"] if known else str(uuid.uuid4())),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
            spec: dict[str, Any] = {
                "serviceAccountName": service_account,
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}],
                "terminationGracePeriodSeconds": 30,
            }
            if emptydir:
                spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
            pod = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": meta,
                "spec": spec,
                "status": {"phase": phase},
                "_replace_on_delete": replace_on_delete,
            }
            self.pods[(namespace, name)] = pod
            return _public(pod)

    def add_daemonset(self, namespace: str, name: str) -> dict[str, Any]:
        """A DaemonSet (metadata only: nothing here runs its pods; `add_pod(owner="DaemonSet", ...)` does)."""
        with self.lock:
            daemonset = {
                "kind": "DaemonSet",
                "apiVersion": "apps/v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self._next_rv(),
                    "creationTimestamp": _now(),
                    "generation": 1,
                },
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
                    },
                },
                "status": {
                    "currentNumberScheduled": 0,
                    "numberMisscheduled": 0,
                    "desiredNumberScheduled": 0,
                    "numberReady": 0,
                },
            }
            self.daemonsets[(namespace, name)] = daemonset
            return _public(daemonset)

    def issue_token(self, namespace: str, pod: str, *, audiences: tuple[str, ...], expires_in: float = 3600) -> str:
        """A projected ServiceAccount token of pod `namespace/pod` (its service account, bound to the pod and its
        node), as the kubelet writes into a serviceAccountToken volume. Opaque here: only this server reads it."""
        with self.lock:
            obj = self.pods[(namespace, pod)]
            node = obj["spec"].get("nodeName", "")
            token = f"fake-sa-token.{uuid.uuid4().hex}"
            self.service_account_tokens[token] = {
                "namespace": namespace,
                "service_account": obj["spec"].get("serviceAccountName", "default"),
                "pod": pod,
                "pod_uid": obj["metadata"]["uid"],
                "node": node,
                "node_uid": self.nodes.get(node, {}).get("metadata", {}).get("uid", ""),
                "audiences": tuple(audiences),
                "expires": time.time() + expires_in,
                "jti": str(uuid.uuid4()),
            }
            return token

    def add_pdb(
        self,
        namespace: str,
        name: str,
        match_labels: Mapping[str, str] | None,
        *,
        disruptions_allowed: int,
        current_healthy: int = 2,
        desired_healthy: int = 2,
        heal_after: float | None = None,
        unprocessed_for: float = 0.0,
    ) -> dict[str, Any]:
        """A policy/v1 PDB. `match_labels=None`: a null selector (selects nothing); {}: every pod of the namespace.
        `heal_after`: seconds after an eviction until the budget allows one more disruption again.
        `unprocessed_for`: seconds until the disruption controller has observed its latest generation
        (status.observedGeneration < metadata.generation meanwhile: evictions it selects get 429)."""
        with self.lock:
            spec: dict[str, Any] = {"minAvailable": desired_healthy}
            if match_labels is not None:
                spec["selector"] = {"matchLabels": dict(match_labels)}
            pdb = {
                "kind": "PodDisruptionBudget",
                "apiVersion": "policy/v1",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self._next_rv(),
                    "generation": 1,
                },
                "spec": spec,
                "status": {
                    "currentHealthy": current_healthy,
                    "desiredHealthy": desired_healthy,
                    "disruptionsAllowed": disruptions_allowed,
                    "expectedPods": current_healthy,
                    "observedGeneration": 1,
                },
                "_heal_after": heal_after,
            }
            if unprocessed_for > 0:
                pdb["metadata"]["generation"] = 2  # its spec changed; the controller has not caught up
                self._observations.append((time.monotonic() + unprocessed_for, (namespace, name)))
            self.pdbs[(namespace, name)] = pdb
            return _public(pdb)

    def start_deletion(self, namespace: str, name: str, seconds: float) -> None:
        """Someone else deleted the pod (kubectl delete): it is terminating for `seconds`, then gone."""
        with self.lock:
            self._terminate(self.pods[(namespace, name)], 30, "delete")
            self._pending_deletions[(namespace, name)] = time.monotonic() + seconds

    def node(self, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def update_node(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Another client changes the node (bumps its resourceVersion)."""
        with self.lock:
            node = self.nodes[name]
            change(node)
            node["metadata"]["resourceVersion"] = self._next_rv()
            self._node_event("MODIFIED", node)

    def delete_node(self, name: str) -> None:
        """The node leaves the cluster (kubectl delete node): watchers see DELETED."""
        with self.lock:
            node = self.nodes.pop(name)
            node["metadata"]["resourceVersion"] = self._next_rv()
            self._node_event("DELETED", node)

    def compact(self) -> None:
        """Forget the change history, as etcd's compaction does: older watches and continue tokens get 410."""
        with self.lock:
            self.node_log.clear()
            self.oldest_rv = self._rv

    def end_watches(self) -> None:
        """Close every open watch stream (as an apiserver restart does); clients watch again."""
        with self.lock:
            self._watch_epoch += 1
            self.changed.notify_all()

    def request_count(self, *, verb: str | None = None, resource: str | None = None) -> int:
        """How many requests of `verb` (get, list, watch, patch, create, delete) on `resource` were made."""
        with self.lock:
            return sum(1 for v, r in self.verbs if (verb is None or v == verb) and (resource is None or r == resource))

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        self.node_log.append((int(node["metadata"]["resourceVersion"]), kind, _public(node)))
        if len(self.node_log) > self.watch_window:
            dropped = self.node_log[: len(self.node_log) - self.watch_window]
            del self.node_log[: len(dropped)]
            self.oldest_rv = dropped[-1][0]
        self.changed.notify_all()

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            self._settle()
            pod = self.pods.get((namespace, name))
            return _public(pod) if pod else None

    def events_about(self, node: str) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(e) for e in self.events.values() if e.get("regarding", {}).get("name") == node]

    def changes_of(self, kind: str, target: str | None = None) -> list[Change]:
        with self.lock:
            return [c for c in self.changes if c.kind == kind and (target is None or c.target == target)]

    def count(self, method: str, path_regex: str) -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.requests if m == method and re.search(path_regex, p))

    # ------------------------------------------------------------------ faults

    def inject(
        self,
        kind: str,
        *,
        method: str | None = None,
        path: str | None = None,
        status: int = 500,
        times: int | None = None,
        rate: float = 1.0,
        delay: float = 2.0,
    ) -> Fault:
        """status: answer `status` without doing anything; timeout_before: hold the request `delay` s then
        drop it, unprocessed; timeout_after: do it, then hold the answer `delay` s and drop it; reset: close
        the connection at once (RST); mixed: each time one of 500, 503, 504, reset, timeout_before and
        timeout_after at random. `times` requests (None: all), each with probability `rate`."""
        if kind not in ("status", "timeout_before", "timeout_after", "reset", "mixed"):
            raise ValueError(kind)
        fault = Fault(kind, method, path, status, times, rate, delay)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def before(self, method: str, path_regex: str, action: Callable[[FakeKubeAPI], None], times: int = 1) -> None:
        """Run `action(self)` before handling the next `times` matching requests (e.g. a concurrent writer)."""
        with self.lock:
            self.hooks.append(Hook(method, path_regex, action, times))

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path) and self.random.random() < fault.rate:
                    if fault.times is not None:
                        fault.times -= 1
                    fault.fired += 1
                    if fault.kind != "mixed":
                        return fault
                    kind, status = self.random.choice(_MIXED)
                    return Fault(kind, status=status, delay=fault.delay)
        return None

    def _run_hooks(self, method: str, path: str) -> None:
        with self.lock:
            for hook in self.hooks:
                if hook.times > 0 and hook.method == method and re.search(hook.path, path):
                    hook.times -= 1
                    hook.action(self)

    # ------------------------------------------------------------------ time-based settling

    def _settle(self) -> None:
        """Finish pod deletions whose grace period is over; heal budgets."""
        now = time.monotonic()
        for key, due in list(self._pending_deletions.items()):
            if due <= now:
                del self._pending_deletions[key]
                pod = self.pods.pop(key, None)
                if pod is not None and pod.get("_replace_on_delete"):
                    replacement = copy.deepcopy(pod)
                    meta = replacement["metadata"]
                    meta.pop("deletionTimestamp", None)
                    meta.pop("deletionGracePeriodSeconds", None)
                    meta["uid"] = str(uuid.uuid4())
                    meta["resourceVersion"] = self._next_rv()
                    replacement["spec"].pop("nodeName", None)
                    replacement["status"] = {"phase": "Pending"}
                    self.pods[key] = replacement
        for due, key in list(self._observations):
            if due <= now:
                self._observations.remove((due, key))
                if (pdb := self.pdbs.get(key)) is not None:
                    pdb["status"]["observedGeneration"] = pdb["metadata"]["generation"]
        for due, key in list(self._heals):
            if due <= now:
                self._heals.remove((due, key))
                pdb = self.pdbs.get(key)
                if pdb is not None:
                    pdb["status"]["disruptionsAllowed"] += 1

    # ------------------------------------------------------------------ request handling

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        if headers.get("authorization", "") != f"Bearer {self.token}":
            return 401, status_body(401, "Unauthorized", "Unauthorized")
        url = urlsplit(raw_path)
        path, query = unquote(url.path), {k: v[-1] for k, v in parse_qs(url.query).items()}
        if self.rbac is not None and path != SELF_SUBJECT_ACCESS_REVIEWS:  # system:basic-user grants it to all
            denied = self.rbac.check(method, path, watch=query.get("watch") in ("true", "1"))
            if denied is not None:
                return denied.code, denied.body
        self._run_hooks(method, path)
        try:
            with self.lock:
                self._settle()
                return self._route(method, path, query, headers, body)
        except ApiError as exc:
            return exc.code, exc.body

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        routes: list[tuple[str, dict[str, Callable[..., tuple[int, dict[str, Any]]]]]] = [
            (r"/api/v1/nodes", {"GET": self._list_nodes}),
            (r"/api/v1/nodes/(?P<name>[^/]+)", {"GET": self._get_node, "PATCH": self._patch_node}),
            (r"/api/v1/pods", {"GET": self._list_pods}),
            (r"/api/v1/namespaces/(?P<ns>[^/]+)/pods", {"GET": self._list_pods}),
            (
                r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)",
                {"GET": self._get_pod, "DELETE": self._delete_pod},
            ),
            (r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/eviction", {"POST": self._evict}),
            (r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log", {"GET": self._pod_log}),
            (r"/apis/apps/v1/namespaces/(?P<ns>[^/]+)/daemonsets/(?P<name>[^/]+)", {"GET": self._get_daemonset}),
            (r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs", {"POST": self._create_job}),
            (r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)", {"GET": self._get_job}),
            (r"/apis/policy/v1/poddisruptionbudgets", {"GET": self._list_pdbs}),
            (r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets", {"GET": self._list_pdbs}),
            (r"/apis/events.k8s.io/v1/events", {"GET": self._list_events}),
            (
                r"/apis/events.k8s.io/v1/namespaces/(?P<ns>[^/]+)/events",
                {"GET": self._list_events, "POST": self._create_event},
            ),
            (r"/apis/authentication.k8s.io/v1/tokenreviews", {"POST": self._token_review}),
            (
                r"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                {"POST": self._self_subject_access_review},
            ),
            (r"/version", {"GET": lambda **_: (200, {"major": "1", "minor": "30", "gitVersion": "v1.30.4-fake"})}),
        ]
        for pattern, methods in routes:
            m = re.fullmatch(pattern, path)
            if m is None:
                continue
            handler = methods.get(method)
            if handler is None:
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return handler(**m.groupdict(), query=query, headers=headers, body=body)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ----- nodes

    def _list_nodes(self, *, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        if query.get("watch") in ("true", "1"):
            return 200, {"_stream": self.watch_nodes(query)}
        items = [
            _public(n)
            for n in self.nodes.values()
            if label_selector_matches(query.get("labelSelector", ""), n["metadata"].get("labels", {}))
            and field_selector_matches(query.get("fieldSelector", ""), n, ("metadata.name", "spec.unschedulable"))
        ]
        return self._listing("NodeList", "v1", items, query)

    def _get_node(self, *, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        if name not in self.nodes:
            raise not_found("nodes", name)
        return 200, _public(self.nodes[name])

    def _patch_node(
        self, *, name: str, headers: Mapping[str, str], body: bytes, **_: Any
    ) -> tuple[int, dict[str, Any]]:
        if name not in self.nodes:
            raise not_found("nodes", name)
        content_type = headers.get("content-type", "").split(";")[0].strip()
        try:
            patch = json.loads(body or b"null")
        except ValueError as exc:
            raise bad_request(f"error decoding patch: {exc}") from exc
        current = self.nodes[name]
        if content_type == "application/strategic-merge-patch+json":
            if not isinstance(patch, dict):
                raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
            updated = merge_patch(current, patch, strategic=True)
        elif content_type == "application/merge-patch+json":
            if not isinstance(patch, dict):
                raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
            updated = merge_patch(current, patch, strategic=False)
        elif content_type == "application/json-patch+json":
            if not isinstance(patch, list):
                raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            updated = json_patch(current, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
                "application/strategic-merge-patch+json",
            )
        wanted_rv = (updated.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; please apply your '
                "changes to the latest version and try again",
                {"name": name, "kind": "nodes"},
            )
        self._validate_node(name, current, updated)
        updated["metadata"]["resourceVersion"] = self._next_rv()
        self._record_node_changes(name, current, updated)
        self.nodes[name] = updated
        self._node_event("MODIFIED", updated)
        return 200, _public(updated)

    def _validate_node(self, name: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        meta, spec = after.get("metadata") or {}, after.get("spec") or {}
        if meta.get("name") != name or meta.get("uid") != before["metadata"]["uid"]:
            raise invalid(
                "Node",
                "",
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "metadata.name",
                        "message": "Invalid value: field is immutable",
                    }
                ],
            )
        if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
            raise bad_request(
                f"json: cannot unmarshal {type(spec['unschedulable']).__name__} into Go struct field "
                "NodeSpec.spec.unschedulable of type bool"
            )
        for key, value in (meta.get("annotations") or {}).items():
            if not isinstance(value, str):
                raise bad_request(
                    f"json: cannot unmarshal {type(value).__name__} into Go struct field "
                    "ObjectMeta.metadata.annotations of type string"
                )
            if not _QUALIFIED.match(key):
                raise invalid(
                    "Node",
                    "",
                    name,
                    [
                        {
                            "reason": "FieldValueInvalid",
                            "field": "metadata.annotations",
                            "message": f'Invalid value: "{key}": name part must consist of alphanumeric characters',
                        }
                    ],
                )
        taints = spec.get("taints")
        if taints is None:
            return
        if not isinstance(taints, list):
            raise bad_request(
                "json: cannot unmarshal object into Go struct field NodeSpec.spec.taints of type []v1.Taint"
            )
        causes = []
        seen: set[tuple[str, str]] = set()
        for index, taint in enumerate(taints):
            if not isinstance(taint, dict):
                raise bad_request("json: cannot unmarshal into Go struct field NodeSpec.spec.taints of type v1.Taint")
            added = taint.get("timeAdded")
            if added is not None and not (isinstance(added, str) and _RFC3339.match(added)):
                raise bad_request(
                    f'Node in version "v1" cannot be handled as a Node: parsing time "{added}" as '
                    f'"2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'
                )
            key, effect = taint.get("key", ""), taint.get("effect", "")
            if not key or not _QUALIFIED.match(key):
                causes.append(
                    {
                        "reason": "FieldValueInvalid",
                        "field": f"spec.taints[{index}].key",
                        "message": f'Invalid value: "{key}": name part must be non-empty',
                    }
                )
            if effect not in TAINT_EFFECTS:
                causes.append(
                    {
                        "reason": "FieldValueNotSupported",
                        "field": f"spec.taints[{index}].effect",
                        "message": f'Unsupported value: "{effect}": supported values: '
                        '"NoSchedule", "PreferNoSchedule", "NoExecute"',
                    }
                )
            if (key, effect) in seen:
                causes.append(
                    {
                        "reason": "FieldValueDuplicate",
                        "field": f"spec.taints[{index}]",
                        "message": f'Duplicate value: "{key}:{effect}"',
                    }
                )
            seen.add((key, effect))
        if causes:
            raise invalid("Node", "", name, causes)

    def _record_node_changes(self, name: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        was = bool((before.get("spec") or {}).get("unschedulable"))
        now = bool((after.get("spec") or {}).get("unschedulable"))
        if now and not was:
            self.changes.append(Change("cordon", name))
        if was and not now:
            self.changes.append(Change("uncordon", name))
        old = {f"{t['key']}:{t['effect']}" for t in (before.get("spec") or {}).get("taints") or []}
        new = {f"{t['key']}:{t['effect']}" for t in (after.get("spec") or {}).get("taints") or []}
        for taint in sorted(new - old):
            self.changes.append(Change("taint+", name, taint))
        for taint in sorted(old - new):
            self.changes.append(Change("taint-", name, taint))

    def _listing(
        self, kind: str, api_version: str, items: list[dict[str, Any]], query: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One page of a LIST: `limit` items from the `continue` token's place on, in (namespace, name) order."""
        query = query or {}
        items = sorted(items, key=_list_key)
        list_rv, start = str(self._rv), None
        if token := query.get("continue"):
            list_rv, start = _decode_continue(token)
            if int(list_rv) < self.oldest_rv:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list.",
                )
            items = [item for item in items if _list_key(item) >= start]
        metadata: dict[str, Any] = {"resourceVersion": list_rv}
        limit = int(query.get("limit") or 0)
        if 0 < limit < len(items):
            rest = items[limit:]
            items = items[:limit]
            metadata["continue"] = _encode_continue(list_rv, _list_key(rest[0]))
            metadata["remainingItemCount"] = len(rest)
        return 200, {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items}

    # ----- watches

    def watch_nodes(self, query: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """The events of GET /api/v1/nodes?watch=true, as the apiserver streams them (see the module's doc)."""
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        selector = query.get("labelSelector", "")
        deadline = time.monotonic() + timeout
        with self.lock:
            epoch = self._watch_epoch
            wanted = query.get("resourceVersion") or "0"
            since, initial, expired = self._rv, [], None
            if wanted == "0":
                initial = [("ADDED", _public(n)) for n in sorted(self.nodes.values(), key=_list_key)]
            elif int(wanted) < self.oldest_rv:
                expired = _too_old(int(wanted), self.oldest_rv)
            else:
                since = int(wanted)
        if expired is not None:
            yield expired
            return
        for kind, obj in initial:
            if label_selector_matches(selector, obj["metadata"].get("labels", {})):
                yield {"type": kind, "object": obj}
        last_bookmark = time.monotonic()
        while True:
            with self.lock:
                while True:
                    now = time.monotonic()
                    if self._closed or self._watch_epoch != epoch or now >= deadline:
                        return
                    due = (
                        bookmarks
                        and self.bookmark_interval is not None
                        and now - last_bookmark >= self.bookmark_interval
                    )
                    if since < self.oldest_rv:
                        # History this watch had not sent yet was forgotten: the apiserver ends it with 410.
                        expired = _too_old(since, self.oldest_rv)
                        break
                    pending = [] if self.stall_watches else [e for e in self.node_log if e[0] > since]
                    if pending or (due and not self.stall_watches):
                        break
                    self.changed.wait(timeout=min(0.05, deadline - now))
                current = str(self._rv)
            if expired is not None:
                yield expired
                return
            for rv, kind, obj in pending:
                since = rv
                if label_selector_matches(selector, obj["metadata"].get("labels", {})):
                    yield {"type": kind, "object": obj}
            if not pending:
                last_bookmark = time.monotonic()
                bookmark = {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": current}}
                yield {"type": "BOOKMARK", "object": bookmark}
                since = max(since, int(current))

    # ----- pods

    def _list_pods(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> tuple[int, dict[str, Any]]:
        supported = ("spec.nodeName", "metadata.namespace", "metadata.name", "status.phase", "spec.restartPolicy")
        items = [
            _public(p)
            for (pod_ns, _n), p in sorted(self.pods.items())
            if (ns is None or pod_ns == ns)
            and field_selector_matches(query.get("fieldSelector", ""), p, supported)
            and label_selector_matches(query.get("labelSelector", ""), p["metadata"].get("labels", {}))
        ]
        return self._listing("PodList", "v1", items, query)

    def _get_pod(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self.pods.get((ns, name))
        if pod is None:
            raise not_found("pods", name)
        return 200, _public(pod)

    def _pod_log(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        if (ns, name) not in self.pods:
            raise not_found("pods", name)
        return 200, {"_text": self.pod_logs.get((ns, name), "")}

    # ----- jobs

    def _create_job(self, *, ns: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        job = json.loads(body or b"{}")
        name = (job.get("metadata") or {}).get("name") or ""
        template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        causes = []
        if not _DNS1123.match(name) or len(name) > 63 or "." in name:
            causes.append(
                {"reason": "FieldValueInvalid", "field": "metadata.name", "message": f"Invalid value: {name!r}"}
            )
        if not template.get("containers"):
            causes.append({"reason": "FieldValueRequired", "field": "spec.template.spec.containers",
                           "message": "Required value"})  # fmt: skip
        if template.get("restartPolicy") not in ("Never", "OnFailure"):
            causes.append({"reason": "FieldValueNotSupported", "field": "spec.template.spec.restartPolicy",
                           "message": 'Unsupported value: supported values: "OnFailure", "Never"'})  # fmt: skip
        if causes:
            raise invalid("Job", "batch", name, causes)
        if (ns, name) in self.jobs:
            raise ApiError(409, "AlreadyExists", f'jobs.batch "{name}" already exists',
                           {"name": name, "group": "batch", "kind": "jobs"})  # fmt: skip
        uid = str(uuid.uuid4())
        job["metadata"].update(namespace=ns, uid=uid, resourceVersion=self._next_rv(), creationTimestamp=_now())
        job.update(kind="Job", apiVersion="batch/v1", status={})
        self.jobs[(ns, name)] = job
        self.changes.append(Change("job", f"{ns}/{name}", f"node {template.get('nodeName')}"))
        return 201, copy.deepcopy(job)

    def _get_job(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        job = self.jobs.get((ns, name))
        if job is None:
            raise not_found("jobs", name, "batch")
        return 200, copy.deepcopy(job)

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            job = self.jobs.get((namespace, name))
            return copy.deepcopy(job) if job is not None else None

    def finish_job(self, namespace: str, name: str, *, succeeded: bool, log: str, message: str = "") -> str:
        """Play the Job controller and the kubelet for Job `name`: its one pod ran on the template's node, wrote
        `log` and ended (Succeeded or Failed); the Job is finished as the controller leaves it. The pod's name."""
        with self.lock:
            job = self.jobs[(namespace, name)]
            uid, template = job["metadata"]["uid"], job["spec"]["template"]
            pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
            labels = {**(template.get("metadata") or {}).get("labels", {}), "job-name": name,
                      "batch.kubernetes.io/job-name": name, "controller-uid": uid,
                      "batch.kubernetes.io/controller-uid": uid}  # fmt: skip
            pod = self.add_pod(namespace, pod_name, template["spec"].get("nodeName") or "", owner="Job",
                               owner_name=name, owner_uid=uid, labels=labels,
                               phase="Succeeded" if succeeded else "Failed")  # fmt: skip
            self.pods[(namespace, pod_name)]["metadata"]["ownerReferences"][0]["apiVersion"] = "batch/v1"
            self.pods[(namespace, pod_name)]["spec"] = copy.deepcopy(
                {**template["spec"], "nodeName": pod["spec"]["nodeName"]}
            )
            self.pod_logs[(namespace, pod_name)] = log
            now = _now()
            kind, reason = ("Complete", "") if succeeded else ("Failed", "BackoffLimitExceeded")
            message = message or ("Job has reached the specified backoff limit" if reason else "")
            job["status"] = {
                "startTime": job["metadata"]["creationTimestamp"], "active": 0,
                "succeeded" if succeeded else "failed": 1,
                "conditions": [{"type": kind, "status": "True", "reason": reason or None,
                                "message": message or None,
                                "lastProbeTime": now, "lastTransitionTime": now}],
                **({"completionTime": now} if succeeded else {}),
            }  # fmt: skip
            job["metadata"]["resourceVersion"] = self._next_rv()
            return pod_name

    def _get_daemonset(self, *, ns: str, name: str, **_: Any) -> tuple[int, dict[str, Any]]:
        daemonset = self.daemonsets.get((ns, name))
        if daemonset is None:
            raise not_found("daemonsets", name, "apps")
        return 200, _public(daemonset)

    def _delete_pod(self, *, ns: str, name: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        pod = self.pods.get((ns, name))
        if pod is None:
            raise not_found("pods", name)
        grace = None
        if body:
            try:
                grace = (json.loads(body) or {}).get("gracePeriodSeconds")
            except ValueError as exc:
                raise bad_request(str(exc)) from exc
        self._terminate(pod, grace, "delete")
        return 200, _public(pod)

    def _terminate(self, pod: dict[str, Any], grace: int | None, how: str) -> None:
        meta = pod["metadata"]
        if "deletionTimestamp" in meta:
            return
        seconds = pod["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
        meta["deletionTimestamp"] = (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = seconds
        meta["resourceVersion"] = self._next_rv()
        key = (meta["namespace"], meta["name"])
        self._pending_deletions[key] = time.monotonic() + (self.deletion_seconds if seconds else 0.0)
        self.changes.append(Change(how, f"{key[0]}/{key[1]}", f"{meta['uid']} grace={seconds}"))

    def _evict(self, *, ns: str, name: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        try:
            eviction = json.loads(body or b"{}")
        except ValueError as exc:
            raise bad_request(f"error decoding the Eviction: {exc}") from exc
        if not isinstance(eviction, dict):
            raise bad_request("json: cannot unmarshal into Go value of type policy.Eviction")
        if eviction.get("kind") not in (None, "Eviction") or eviction.get("apiVersion") not in (
            None,
            "policy/v1",
            "policy/v1beta1",
        ):
            raise bad_request(
                f"no kind {eviction.get('kind')!r} is registered for version {eviction.get('apiVersion')!r}"
            )
        meta = eviction.get("metadata") or {}
        if meta.get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        pod = self.pods.get((ns, name))
        if pod is None:
            raise not_found("pods", name)
        grace = (eviction.get("deleteOptions") or {}).get("gracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or grace < 0):
            raise invalid(
                "Eviction",
                "policy",
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "deleteOptions.gracePeriodSeconds",
                        "message": "Invalid value: must be >= 0",
                    }
                ],
            )
        phase = pod["status"].get("phase")
        if "deletionTimestamp" in pod["metadata"] or phase in ("Succeeded", "Failed", "Pending"):
            # Already terminating, terminal or not running yet: deleted without a PDB check.
            self._terminate(pod, grace, "evict")
            return 201, status_body(201, "", "")
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            p
            for (pdb_ns, _n), p in sorted(self.pdbs.items())
            if pdb_ns == ns
            and "selector" in p["spec"]
            and all(labels.get(k) == v for k, v in (p["spec"]["selector"].get("matchLabels") or {}).items())
        ]
        if len(budgets) > 1:
            message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            raise ApiError(
                500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
            )
        if budgets:
            pdb = budgets[0]
            status = pdb["status"]
            if status["observedGeneration"] < pdb["metadata"]["generation"]:
                # checkAndDecrement: the budget's status is not about its current spec yet.
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb['metadata']['name']} is still being "
                                "processed by the server.",
                            }
                        ],
                        "retryAfterSeconds": 10,
                    },
                )
            if status["disruptionsAllowed"] <= 0:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                f"{status['desiredHealthy']} healthy pods and has {status['currentHealthy']} currently",
                            }
                        ]
                    },
                )
            status["disruptionsAllowed"] -= 1
            if pdb.get("_heal_after") is not None:
                key = (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
                self._heals.append((time.monotonic() + pdb["_heal_after"], key))
        self._terminate(pod, grace, "evict")
        return 201, status_body(201, "", "")

    # ----- authentication.k8s.io

    def _self_subject_access_review(self, *, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        """The authorizer's answer for the caller itself (RBAC as `authorize_as` loaded it; allowed when off)."""
        try:
            review = json.loads(body)
        except ValueError:
            raise bad_request("the body of the request was in an unknown format") from None
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes")
        if not isinstance(attributes, dict):
            raise bad_request("SelfSubjectAccessReview: exactly one of nonResourceAttributes or resourceAttributes")
        request = RequestAttributes(
            str(attributes.get("verb") or ""),
            str(attributes.get("group") or ""),
            str(attributes.get("resource") or ""),
            str(attributes.get("subresource") or ""),
            str(attributes.get("namespace") or ""),
            str(attributes.get("name") or ""),
        )
        allowed = self.rbac is None or self.rbac.allows(request)
        status: dict[str, Any] = {"allowed": allowed}
        if allowed:
            status["reason"] = "RBAC: allowed" if self.rbac is not None else ""
        answer = {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return 201, answer

    def _token_review(self, *, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        try:
            review = json.loads(body)
        except ValueError:
            raise bad_request("the body of the request was in an unknown format") from None
        spec = review.get("spec") or {}
        token, wanted = spec.get("token") or "", list(spec.get("audiences") or [API_AUDIENCE])
        if not token:
            raise bad_request("token is required for TokenReview in authentication")
        answer = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": self._review(token, wanted),
        }
        return 201, answer

    def _review(self, token: str, wanted: list[str]) -> dict[str, Any]:
        issued = self.service_account_tokens.get(token)
        if issued is None:
            return {"user": {}, "error": "[invalid bearer token, Token has been invalidated]"}
        shared = [audience for audience in wanted if audience in issued["audiences"]]
        if not shared and not self.audience_unaware:
            return {
                "user": {},
                "error": f"[invalid bearer token, token audiences {json.dumps(list(issued['audiences']))} is "
                f"invalid for the target audiences {json.dumps(wanted)}]",
            }
        if time.time() >= issued["expires"]:
            return {"user": {}, "error": "[invalid bearer token, service account token has expired]"}
        # A terminating pod's token stays valid through its grace period, as on a real API server.
        pod = self.pods.get((issued["namespace"], issued["pod"]))
        if pod is None or pod["metadata"]["uid"] != issued["pod_uid"]:
            return {"user": {}, "error": "[invalid bearer token, service account token has been invalidated]"}
        namespace, account = issued["namespace"], issued["service_account"]
        return {
            "authenticated": True,
            "user": {
                "username": f"system:serviceaccount:{namespace}:{account}",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{account}")),
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                "extra": {
                    "authentication.kubernetes.io/credential-id": [f"JTI={issued['jti']}"],
                    "authentication.kubernetes.io/node-name": [issued["node"]],
                    "authentication.kubernetes.io/node-uid": [issued["node_uid"]],
                    "authentication.kubernetes.io/pod-name": [issued["pod"]],
                    "authentication.kubernetes.io/pod-uid": [issued["pod_uid"]],
                },
            },
            **({} if self.audience_unaware else {"audiences": shared}),
        }

    def _list_pdbs(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> tuple[int, dict[str, Any]]:
        items = [_public(p) for (pdb_ns, _n), p in sorted(self.pdbs.items()) if ns is None or pdb_ns == ns]
        return self._listing("PodDisruptionBudgetList", "policy/v1", items, query)

    # ----- events

    def _list_events(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> tuple[int, dict[str, Any]]:
        supported = (
            "regarding.name",
            "regarding.kind",
            "regarding.uid",
            "reason",
            "type",
            "reportingController",
            "metadata.name",
        )
        items = [
            copy.deepcopy(e)
            for (event_ns, _n), e in sorted(self.events.items())
            if (ns is None or event_ns == ns) and field_selector_matches(query.get("fieldSelector", ""), e, supported)
        ]
        return self._listing("EventList", "events.k8s.io/v1", items, query)

    def _create_event(self, *, ns: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        try:
            event = json.loads(body or b"null")
        except ValueError as exc:
            raise bad_request(f'Event in version "v1" cannot be handled as a Event: {exc}') from exc
        if not isinstance(event, dict):
            raise bad_request(
                'Event in version "v1" cannot be handled as a Event: json: cannot unmarshal into Go value'
            )
        when = event.get("eventTime")
        if when is not None and (not isinstance(when, str) or not _MICROTIME.match(when)):
            raise bad_request(
                f'Event in version "v1" cannot be handled as a Event: parsing time "{when}" as '
                f'"2006-01-02T15:04:05.000000Z07:00": {_microtime_problem(str(when))}'
            )
        meta = event.get("metadata") or {}
        if meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        name = meta.get("name") or ""
        causes: list[dict[str, str]] = []

        def need(field_name: str, value: Any, limit: int = 128) -> None:
            if not value:
                causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": field_name})
            elif len(str(value)) > limit:
                causes.append(
                    {
                        "reason": "FieldValueTooLong",
                        "message": f"Too long: may not be longer than {limit}",
                        "field": field_name,
                    }
                )

        if not name:
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name",
                }
            )
        elif len(name) > 253 or not _DNS1123.match(name):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                    "lower case alphanumeric characters",
                    "field": "metadata.name",
                }
            )
        if when is None:
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"})
        need("reportingController", event.get("reportingController"))
        if event.get("reportingController") and not _QUALIFIED.match(str(event["reportingController"])):
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: must be a qualified name",
                    "field": "reportingController",
                }
            )
        need("reportingInstance", event.get("reportingInstance"))
        need("action", event.get("action"))
        need("reason", event.get("reason"))
        if event.get("type") not in ("Normal", "Warning"):
            causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "message": f'Unsupported value: "{event.get("type") or ""}": supported values: "Normal", "Warning"',
                    "field": "type",
                }
            )
        if len(str(event.get("note") or "").encode()) > 1024:
            causes.append(
                {"reason": "FieldValueTooLong", "message": "Too long: may not be longer than 1024", "field": "note"}
            )
        regarding = event.get("regarding") or {}
        if not regarding.get("namespace") and ns != "default":
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "message": f'Invalid value: "{ns}": does not match regarding.namespace',
                    "field": "metadata.namespace",
                }
            )
        if causes:
            raise invalid("Event", "events.k8s.io", name, causes)
        if (ns, name) in self.events:
            raise ApiError(
                409,
                "AlreadyExists",
                f'events.events.k8s.io "{name}" already exists',
                {"name": name, "group": "events.k8s.io", "kind": "events"},
            )
        stored = copy.deepcopy(event)
        stored["apiVersion"], stored["kind"] = "events.k8s.io/v1", "Event"
        stored["metadata"] = {
            **meta,
            "namespace": ns,
            "uid": str(uuid.uuid4()),
            "resourceVersion": self._next_rv(),
            "creationTimestamp": _now(),
        }
        self.events[(ns, name)] = stored
        self.changes.append(Change("event", f"{ns}/{name}", f"{event.get('reason')} {regarding.get('name', '')}"))
        return 201, copy.deepcopy(stored)


def _microtime_problem(value: str) -> str:
    m = re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", value)
    if not m:
        return f'cannot parse "{value}" as "2006"'
    rest = value[m.end() :]
    if not rest.startswith("."):
        return f'cannot parse "{rest}" as ".000000"'
    fraction = re.match(r"\.\d{6}", rest)
    if not fraction:
        return f'cannot parse "{rest}" as ".000000"'
    zone = rest[7:]
    return f'cannot parse "{zone}" as "Z07:00"'


def _too_old(wanted: int, oldest: int) -> dict[str, Any]:
    return {"type": "ERROR", "object": status_body(410, "Expired", f"too old resource version: {wanted} ({oldest})")}


def _list_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _encode_continue(resource_version: str, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": int(resource_version), "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(int(decoded["rv"])), str(decoded["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


def _public(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in obj.items() if not k.startswith("_")}


# --------------------------------------------------------------------------- HTTP


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: FakeKubeAPI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, delayed ACKs add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _handle(self) -> None:
        api = self.server.api
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path
        fault = api._fault_for(self.command, path)
        if fault is not None and fault.kind == "reset":
            self._record(path, 0)
            self._reset()
            return
        if fault is not None and fault.kind == "timeout_before":
            self._record(path, 0)
            time.sleep(fault.delay)
            self._reset()
            return
        if fault is not None and fault.kind == "status":
            reasons = {500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable", 504: "Timeout"}
            code = fault.status
            self._record(path, code)
            self._send(
                code,
                status_body(
                    code, reasons.get(code, "InternalError"), "injected fault: the test API server failed on purpose"
                ),
            )
            return
        code, answer = api.handle(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self._record(path, code if fault is None else 0)
        if fault is not None:  # timeout_after: the change is made, the answer never arrives
            time.sleep(fault.delay)
            self._reset()
            return
        if "_stream" in answer:
            self._stream(answer["_stream"])
            return
        if "_text" in answer:  # a pod's log: text, as the kubelet streams it through the apiserver
            self._send_text(code, answer["_text"])
            return
        self._send(code, answer)

    def _record(self, path: str, code: int) -> None:
        attributes = RequestAttributes.of(self.command, path)
        watching = parse_qs(urlsplit(self.path).query).get("watch", [""])[-1] in ("true", "1")
        verb = "watch" if watching else (attributes.verb if attributes else self.command.lower())
        with self.server.api.lock:
            self.server.api.requests.append((self.command, path, code))
            self.server.api.verbs.append((verb, attributes.resource if attributes else path))

    def _stream(self, events: Iterator[dict[str, Any]]) -> None:
        """A watch: chunked transfer encoding, one JSON event and a newline a chunk, as the apiserver streams."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away (it closed its watch)
            pass
        self.close_connection = True

    def _send(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        retry_after = (body.get("details") or {}).get("retryAfterSeconds") if code >= 400 else None
        if retry_after:
            # As the apiserver's error writer does for a Status whose details suggest a wait.
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        # SO_LINGER 0: close() sends an RST, as a crashed proxy or a dropped connection does.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    do_GET = _handle
    do_POST = _handle
    do_PATCH = _handle
    do_PUT = _handle
    do_DELETE = _handle


def cluster(api: FakeKubeAPI, count: int, *, prefix: str = "gpu-node", gpu: bool = True) -> list[str]:
    """Add `count` nodes (`gpu-node-00`, ...), labelled as GPU nodes by the NVIDIA GPU operator."""
    names = [f"{prefix}-{index:02d}" for index in range(count)]
    for name in names:
        api.add_node(name, labels={"nvidia.com/gpu.present": "true"} if gpu else {})
    return names
