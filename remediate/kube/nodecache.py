"""One watch-fed view of the cluster's nodes per process: what the breaker's counts and staged rollouts' waves read.

Why: reading the whole cluster per run (a LIST of every node, twice, for each plan and execute) costs CPU, memory
and API-server load in proportion to the cluster, and on a 5,000-node cluster an alert storm got the server
OOM-killed exactly when it was needed. Controllers avoid that with an informer; this is remediate's:

- a paginated LIST (`limit` PAGE_SIZE, then `continue`; an expired token (410) starts the list again), then a
  WATCH from the list's resourceVersion with bookmarks, each watch request ending after WATCH_TIMEOUT seconds and
  the next one resuming from the last resourceVersion seen; a 410 Gone ("too old resource version") relists;
- full objects (taints and `unschedulable` are in spec, which a metadata-only watch does not carry), decoded
  from the raw JSON (never into the client's models, which cost ~1 ms a node) and reduced at once to the
  NodeInfo fields remediate reads: labels, taints, unschedulable and its own `remediate.io/` annotations, so a
  node held here is a few hundred bytes whatever the kubelet wrote into it (its image list: ~15 KB);
- what the circuit breaker reads of the whole cluster (how many nodes it counts, which ones remediate holds) is
  kept as the events arrive (`census`), so a run's reads cost the same on 100 nodes as on 10,000;
- the staleness bound is explicit: the view is *fresh* while the last word from the API server (the list, an
  event, a bookmark, a watch that ended in order) is at most `max_staleness` seconds old. A reader of a view
  that is not fresh waits for it (`wait`), else gets KubeUnavailable (retryable: the step is retried later).

What it never decides: a change to a node. The node being changed is read fresh (GET) and written with its
resourceVersion as precondition (actions.k8s.patching), so a stale view can never change the wrong node; it
only feeds counts (the breaker's cluster size and nodes held) and waves.

Started by the executor process at its start where a cluster is configured and a playbook cordons, taints or
drains (remediate.serve.launcher), as a controller starts its informers: the first alert finds the view current.
Elsewhere it starts on first use, so a server that never reads nodes never watches them. One daemon thread
per cache.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from remediate.errors import ActionError, RetryableActionError
from remediate.kube.errors import KubeConfigError, KubeUnavailable, translate
from remediate.kube.model import ANNOTATION_PREFIX, LabelSelector, NodeInfo, Taint, parse_label_selector

log = logging.getLogger("remediate.kube.nodecache")

PAGE_SIZE = 500
"""Nodes per LIST page (client-go's informers use 500 too): a page of GPU nodes is ~7 MB of JSON at most."""
WATCH_TIMEOUT = 60
"""Seconds one watch request lasts (the server ends it, the next one resumes): also bounds a silent stream."""
MAX_STALENESS = 120.0
"""Seconds the view may be behind the API server and still be used (see the module's doc)."""
RETRY_WAIT = (0.5, 30.0)
"""First and longest wait before the next try after a failed list or watch (doubling)."""


class ApiSource(Protocol):
    """What the cache needs of remediate.kube.client.KubeClient (which owns one cache: no import back)."""

    @property
    def timeout(self) -> tuple[float, float]: ...

    def core_api(self) -> Any: ...


class _Expired(Exception):
    """The API server forgot the resourceVersion (410 Gone): only a new list can resume."""


@dataclass(frozen=True)
class CacheStatus:
    """What /readyz and the metric show of a cache."""

    started: bool
    synced: bool
    """A list completed at least once."""
    age: float | None
    """Seconds since the last word from the API server; None before the first list."""
    max_staleness: float
    nodes: int
    lists: int
    """Lists started (the first one and each relist)."""
    error: str

    @property
    def fresh(self) -> bool:
        return self.age is not None and self.age <= self.max_staleness

    def as_dict(self) -> dict[str, Any]:
        return {
            "synced": self.synced,
            "fresh": self.fresh,
            "age_s": None if self.age is None else round(self.age, 3),
            "max_staleness_s": self.max_staleness,
            "nodes": self.nodes,
            "lists": self.lists,
            **({"error": self.error} if self.error else {}),
        }


@dataclass(frozen=True)
class Census:
    """What the circuit breaker reads of the cluster, as of the view's last update."""

    counted: int
    """Nodes the breaker's fraction counts: those the selector matches (all nodes without one)."""
    held: frozenset[str]
    """Nodes holding remediate's marks now (cordoned or tainted by it), whatever the selector."""


class NodeCache:
    """The nodes of one cluster, kept by LIST+WATCH; thread-safe (executor threads and request threads share it)."""

    def __init__(
        self,
        client: ApiSource,
        *,
        max_staleness: float = MAX_STALENESS,
        watch_timeout: int = WATCH_TIMEOUT,
        page_size: int = PAGE_SIZE,
        on_sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.max_staleness = max_staleness
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.on_sync = on_sync
        """Called (from the cache's thread) each time the view is confirmed current (e.g. a beat file)."""
        self.clock = clock
        self._nodes: dict[str, NodeInfo] = {}
        self._held: set[str] = set()
        self._selectors: dict[str, LabelSelector] = {}
        """The selectors a census was asked for; each one's matching nodes are kept in `_matching`."""
        self._matching: dict[str, set[str]] = {}
        self._synced_at: float | None = None
        self._lists = 0
        self._error = ""
        self._refused: ActionError | None = None
        """The last failure when it was not transient (403, 401, ...): readers get it at once, not a wait."""
        self._no_cluster: KubeConfigError | None = None
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._doing = "LIST nodes"
        self._thread: threading.Thread | None = None
        self._stream: Any = None
        """The open watch response (urllib3's HTTPResponse), for stop() to shut down."""

    # ------------------------------------------------------------------ readers

    def nodes(self, *, wait: float = 30.0) -> Mapping[str, NodeInfo]:
        """name -> node, as of at most `max_staleness` seconds ago; waits up to `wait` s for such a view.

        Raises KubeConfigError (no cluster configured) or KubeUnavailable (no fresh view in time: retryable)."""
        with self._fresh_view(wait):
            return dict(self._nodes)

    def census(self, selector: str | None = None, *, wait: float = 30.0) -> Census:
        """How many nodes `selector` matches (all nodes: None) and which nodes remediate holds, from counts kept
        as events arrive: the cost does not depend on the cluster's size (the first census of a selector
        counts once). Waits and raises as `nodes` does."""
        with self._fresh_view(wait):
            if not selector:
                return Census(len(self._nodes), frozenset(self._held))
            matching = self._matching.get(selector)
            if matching is None:
                parsed = self._selectors[selector] = parse_label_selector(selector)
                matching = self._matching[selector] = {n.name for n in self._nodes.values() if parsed.matches(n.labels)}
            return Census(len(matching), frozenset(self._held))

    @contextmanager
    def _fresh_view(self, wait: float) -> Iterator[None]:
        """Holds the lock over a view at most `max_staleness` seconds old, waiting up to `wait` s for one."""
        self.start()
        deadline = self.clock() + wait
        with self._changed:
            while True:
                if self._no_cluster is not None:
                    raise self._no_cluster
                if self._fresh():
                    yield
                    return
                if self._refused is not None:
                    raise self._refused
                left = deadline - self.clock()
                if left <= 0:
                    break
                self._changed.wait(timeout=min(left, 0.5))
            status = self._status()
        age = "no list has completed yet" if status.age is None else f"its last update is {status.age:.0f}s old"
        raise KubeUnavailable(
            f"the node cache is not current ({age}; bound {self.max_staleness:.0f}s)"
            + (f": {status.error}" if status.error else "")
        )

    def status(self) -> CacheStatus:
        with self._changed:
            return self._status()

    def _status(self) -> CacheStatus:
        age = None if self._synced_at is None else max(0.0, self.clock() - self._synced_at)
        return CacheStatus(
            started=self._thread is not None,
            synced=self._synced_at is not None,
            age=age,
            max_staleness=self.max_staleness,
            nodes=len(self._nodes),
            lists=self._lists,
            error=self._error,
        )

    def _fresh(self) -> bool:
        return self._synced_at is not None and self.clock() - self._synced_at <= self.max_staleness

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        with self._changed:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="remediate-node-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the watch and the thread: the open stream is shut down, which ends a read blocked on it (a quiet
        cluster may send nothing for the watch's whole 60 s)."""
        self._stop.set()
        with self._changed:
            stream = self._stream
        if stream is not None:
            stream.shutdown()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        resource_version: str | None = None
        wait = RETRY_WAIT[0]
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
                wait = RETRY_WAIT[0]
            except _Expired:
                log.info("node watch: resourceVersion %s expired (410 Gone): listing again", resource_version)
                resource_version = None
            except KubeConfigError as exc:
                with self._changed:
                    self._no_cluster = exc
                    self._changed.notify_all()
                return
            except Exception as exc:  # API errors, resets, timeouts: the next try resumes the watch
                if self._stop.is_set():
                    return  # the stream was shut down by stop()
                self._failed(exc, wait)
                if self._stop.wait(wait):
                    return
                wait = min(RETRY_WAIT[1], wait * 2)

    def _failed(self, exc: Exception, wait: float) -> None:
        error = translate(exc, self._doing)
        log.warning("node cache: %s; trying again in %.1fs", error, wait)
        with self._changed:
            self._error = str(error)[:300]
            self._refused = None if isinstance(error, RetryableActionError) else error
            self._changed.notify_all()

    def _synced(self) -> None:
        with self._changed:
            self._synced_at = self.clock()
            self._error = ""
            self._refused = None
            self._changed.notify_all()
        if self.on_sync is not None:
            self.on_sync()

    # ------------------------------------------------------------------ list and watch

    def _list(self) -> str:
        """A complete paginated list; returns its resourceVersion (the watch resumes from there)."""
        self._doing = "LIST nodes"
        core = self.client.core_api()
        with self._changed:
            self._lists += 1
        nodes: dict[str, NodeInfo] = {}
        token: str | None = None
        while True:
            try:
                answer = core.list_node(
                    limit=self.page_size,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self.client.timeout,
                )
            except Exception as exc:
                if token is not None and getattr(exc, "status", None) == 410:
                    # The continue token expired between pages: a list is only consistent from its first page.
                    nodes, token = {}, None
                    continue
                raise
            page = json.loads(answer.data)
            for item in page.get("items") or ():
                node = reduce_node(item)
                nodes[node.name] = node
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        with self._changed:
            self._nodes = nodes
            self._held = {n.name for n in nodes.values() if n.held_by_remediate}
            self._matching = {
                text: {n.name for n in nodes.values() if selector.matches(n.labels)}
                for text, selector in self._selectors.items()
            }
        self._synced()
        return str(meta.get("resourceVersion") or "")

    def _watch(self, resource_version: str) -> str:
        """One watch request from `resource_version`; returns the last resourceVersion seen when it ends in order."""
        from kubernetes.watch.watch import iter_resp_lines

        self._doing = "WATCH nodes"
        core = self.client.core_api()
        try:
            answer = core.list_node(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout,
                _preload_content=False,
                # The read timeout outlasts the server's own end of the watch: past it the stream is dead.
                _request_timeout=(self.client.timeout[0], self.watch_timeout + 15),
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 410:
                raise _Expired from exc
            raise
        with self._changed:
            self._stream = answer
        if self._stop.is_set():  # stop() came before the stream was there to shut down
            answer.release_conn()
            return resource_version
        try:
            for line in iter_resp_lines(answer):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired(obj.get("message", ""))
                    raise KubeUnavailable(f"node watch: {obj.get('code')} {obj.get('message', '')}"[:300])
                resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
                if kind in ("ADDED", "MODIFIED"):
                    self._put(reduce_node(obj))
                elif kind == "DELETED":
                    self._drop((obj.get("metadata") or {}).get("name", ""))
                self._synced()
        finally:
            with self._changed:
                self._stream = None
            answer.release_conn()
        if not self._stop.is_set():
            # The server ended the watch after timeoutSeconds: everything until now was sent.
            self._synced()
        return resource_version

    def _put(self, node: NodeInfo) -> None:
        with self._changed:
            self._nodes[node.name] = node
            (self._held.add if node.held_by_remediate else self._held.discard)(node.name)
            for text, selector in self._selectors.items():
                (self._matching[text].add if selector.matches(node.labels) else self._matching[text].discard)(node.name)

    def _drop(self, name: str) -> None:
        with self._changed:
            self._nodes.pop(name, None)
            self._held.discard(name)
            for matching in self._matching.values():
                matching.discard(name)


def reduce_node(obj: Mapping[str, Any]) -> NodeInfo:
    """The fields of a Node (its JSON) that remediate reads; names are interned (every node repeats them)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    intern = sys.intern
    return NodeInfo(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(
            Taint(t.get("key", ""), t.get("effect", ""), t.get("value") or None, t.get("timeAdded"))
            for t in spec.get("taints") or ()
        ),
        labels={intern(k): intern(v) for k, v in (meta.get("labels") or {}).items()},
        annotations={k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ANNOTATION_PREFIX)},
    )
