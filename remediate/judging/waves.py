"""Where a node stands in a staged rollout: its wave, from `rollout_nodes` or its Kubernetes label (NodeWaves).

The label is read for all nodes at once from the process's watch-fed node cache (remediate.kube.nodecache:
no API call per read, one watch per process), and that read is used for TTL seconds: a promotion (a label
changed) is seen within that time plus the cache's staleness bound. Each read is compared with the one
before it: a node whose wave changed is logged as audit event `rollout_wave` (each process that judges
alerts sees it, and logs it, once).

A node named in `rollout_nodes` (hosts without Kubernetes) is never looked up. Without a configured cluster a
node not in that map is in no wave (the rollout's default); when the API fails, its wave is unknown and the
run is dry-run (remediate.config.rollout.resolve) until a read succeeds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from remediate.config.rollout import NodeWave, Rollout
from remediate.errors import ActionError
from remediate.kube import KubeClient, KubeConfigError
from remediate.logs.audit import audit_event

TTL = 30.0
"""Seconds one read of the nodes' wave label is used: a promotion (a label changed) is seen within this."""


@dataclass(frozen=True)
class _Read:
    at: float
    waves: Mapping[str, str] | None
    """node -> label value; None when the read failed (`error` says why)."""
    error: str = ""
    no_cluster: bool = False


@dataclass(eq=False)
class NodeWaves:
    """The wave of each node, per rollout label; thread-safe (a worker's request threads share one)."""

    client: Callable[[], KubeClient] | None
    """The Kubernetes API client; None: no cluster (only `static` places nodes)."""
    static: Mapping[str, str] = field(default_factory=dict)
    """`rollout_nodes`: node -> wave."""
    ttl: float = TTL
    clock: Callable[[], float] = time.monotonic
    _reads: dict[str, _Read] = field(default_factory=dict, init=False, repr=False)
    _last_known: dict[str, Mapping[str, str]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def of(self, rollout: Rollout, node: str | None) -> NodeWave:
        if node is None:
            return NodeWave(None, None, "no node label on the alert")
        if node in self.static:
            return NodeWave(node, self.static[node], "rollout_nodes")
        read = self._read(rollout.label)
        if read.no_cluster:
            return NodeWave(node, None, f"not in rollout_nodes; {read.error}")
        if read.waves is None:
            return NodeWave(node, None, f"label {rollout.label} unreadable: {read.error}", unknown=True)
        wave = read.waves.get(node)
        if wave is None:
            return NodeWave(node, None, f"no label {rollout.label}")
        return NodeWave(node, wave, f"label {rollout.label}={wave}")

    def _read(self, label: str) -> _Read:
        with self._lock:
            now = self.clock()
            read = self._reads.get(label)
            if read is None or now - read.at >= self.ttl:
                read = self._reads[label] = self._list(label, now)
                if read.waves is not None:
                    self._audit_changes(label, read.waves)
            return read

    def _list(self, label: str, now: float) -> _Read:
        if self.client is None:
            return _Read(now, None, "no Kubernetes cluster configured", no_cluster=True)
        try:
            nodes = self.client().node_cache().nodes(wait=10.0)
        except KubeConfigError:
            return _Read(now, None, "no Kubernetes cluster configured", no_cluster=True)
        except ActionError as exc:
            return _Read(now, None, str(exc)[:300])
        return _Read(now, {n.name: n.labels[label] for n in nodes.values() if label in n.labels})

    def _audit_changes(self, label: str, waves: Mapping[str, str]) -> None:
        """Each node whose wave differs from the last successful read's (not the first read: nothing was seen)."""
        before = self._last_known.get(label)
        self._last_known[label] = waves
        if before is None:
            return
        for node in sorted(set(before) | set(waves)):
            if before.get(node) != waves.get(node):
                audit_event("rollout_wave", node=node, label=label, wave=waves.get(node), was=before.get(node))
