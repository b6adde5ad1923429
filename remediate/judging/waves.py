"""Where a node stands in a staged rollout: its wave, from `rollout_nodes`, its Kubernetes label or its Slurm
feature or partition (NodeWaves).

The label is read for all nodes at once from the process's watch-fed node cache (remediate.kube.nodecache: no
API call per read, one watch per process); a Slurm feature or partition from the process's one Slurm node
cache (remediate.slurm.nodecache: one `sinfo --json` per interval, shared with the slurm.* actions). Either read
is used for TTL seconds: a promotion (a label, feature or partition changed) is seen within that time plus the
cache's staleness bound, and an alert storm costs one pass over the nodes per TTL, not one per alert. Each read
is compared with the one before it: a node whose wave changed is logged as audit event `rollout_wave` (each
process that judges alerts sees it, and logs it, once).

A node named in `rollout_nodes` (hosts without Kubernetes) is never looked up. Without a configured cluster
(Kubernetes for a label, Slurm for `slurm:`) a node not in that map is in no wave (the rollout's default);
when the cluster cannot be read (the API fails, slurmctld does not answer), its wave is unknown and the run is
dry-run (remediate.config.rollout.wave_mode) until a read succeeds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from remediate.config.rollout import NodeWave, Rollout, SlurmAttribute
from remediate.errors import ActionError
from remediate.kube import KubeClient, KubeConfigError
from remediate.logs.audit import audit_event
from remediate.slurm import SlurmConfigError, SlurmNodeCache

TTL = 30.0
"""Seconds one read of the nodes' waves is used: a promotion (a label changed) is seen within this."""
READ_WAIT = 10.0
"""Seconds a read waits for its cache to be current (the first read of a process; an outage)."""


@dataclass(frozen=True)
class _Read:
    at: float
    waves: Mapping[str, tuple[str, ...]] | None
    """node -> the waves it is in (a label's value; the Slurm features or partitions that name a wave); None
    when the read failed (`error` says why)."""
    error: str = ""
    no_cluster: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Another name of a node -> its name in `waves` (a Slurm NodeHostName -> its NodeName)."""


@dataclass(frozen=True)
class _Source:
    """What one read reads: a label, or a Slurm attribute and the wave names of a rollout (its waves are those
    of its features or partitions that name one of these: two rollouts with other names read apart)."""

    label: str | None
    slurm: SlurmAttribute | None = None
    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, rollout: Rollout) -> _Source:
        if rollout.slurm is None:
            return cls(rollout.label)
        return cls(None, rollout.slurm, rollout.wave_names)

    @property
    def text(self) -> str:
        """`label remediate.io/wave`, `Slurm feature`: the subject of the reasons and the audit."""
        return f"label {self.label}" if self.slurm is None else f"Slurm {self.slurm}"


@dataclass(eq=False)
class NodeWaves:
    """The wave of each node, per rollout source; thread-safe (a worker's request threads share one)."""

    client: Callable[[], KubeClient] | None
    """The Kubernetes API client; None: no cluster (only `static` places nodes by label)."""
    static: Mapping[str, str] = field(default_factory=dict)
    """`rollout_nodes`: node -> wave."""
    ttl: float = TTL
    clock: Callable[[], float] = time.monotonic
    read_wait: float = READ_WAIT
    slurm: Callable[[], SlurmNodeCache] | None = None
    """The process's one Slurm node cache (the slurm.* actions'); None: no Slurm cluster configured."""
    _reads: dict[_Source, _Read] = field(default_factory=dict, init=False, repr=False)
    _last_known: dict[_Source, Mapping[str, tuple[str, ...]]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def of(self, rollout: Rollout, node: str | None) -> NodeWave:
        if node is None:
            return NodeWave(None, None, "no node label on the alert")
        if node in self.static:
            return NodeWave(node, self.static[node], "rollout_nodes")
        source = _Source.of(rollout)
        read = self._read(source)
        if read.no_cluster:
            return NodeWave(node, None, f"not in rollout_nodes; {read.error}")
        if read.waves is None:
            return NodeWave(node, None, f"{source.text} unreadable: {read.error}", unknown=True)
        if source.slurm is None:
            found = read.waves.get(node)
            if found is None:
                return NodeWave(node, None, f"no {source.text}")
            return NodeWave(node, found[0], f"{source.text}={found[0]}")
        return _slurm_wave(source, read, node)

    def _read(self, source: _Source) -> _Read:
        with self._lock:
            now = self.clock()
            read = self._reads.get(source)
            if read is None or now - read.at >= self.ttl:
                read = self._reads[source] = self._list(source, now)
                if read.waves is not None:
                    self._audit_changes(source, read.waves)
            return read

    def _list(self, source: _Source, now: float) -> _Read:
        if source.slurm is not None:
            return self._list_slurm(source, now)
        label = source.label or ""
        if self.client is None:
            return _Read(now, None, "no Kubernetes cluster configured", no_cluster=True)
        try:
            nodes = self.client().node_cache().nodes(wait=self.read_wait)
        except KubeConfigError:
            return _Read(now, None, "no Kubernetes cluster configured", no_cluster=True)
        except ActionError as exc:
            return _Read(now, None, str(exc)[:300])
        return _Read(now, {n.name: (n.labels[label],) for n in nodes.values() if label in n.labels})

    def _list_slurm(self, source: _Source, now: float) -> _Read:
        cache = self.slurm() if self.slurm is not None else None
        if cache is None or not cache.client.configured:  # never started: it would only log its failure each poll
            return _Read(now, None, "no Slurm cluster configured (slurm_conf)", no_cluster=True)
        try:
            nodes = cache.nodes(wait=self.read_wait)
        except SlurmConfigError as exc:
            return _Read(now, None, str(exc)[:300], no_cluster=True)
        except ActionError as exc:  # SlurmUnavailable (slurmctld down), a refusal: the wave is unknown
            return _Read(now, None, str(exc)[:300])
        waves = {}
        for node in nodes.values():
            names = node.features if source.slurm is SlurmAttribute.FEATURE else node.partitions
            waves[node.name] = tuple(sorted(set(names) & source.names))
        aliases = {node.hostname: node.name for node in nodes.values() if node.hostname != node.name}
        return _Read(now, waves, aliases=aliases)

    def _audit_changes(self, source: _Source, waves: Mapping[str, tuple[str, ...]]) -> None:
        """Each node whose wave differs from the last successful read's (not the first read: nothing was seen)."""
        before = self._last_known.get(source)
        self._last_known[source] = waves
        if before is None:
            return
        for node in sorted(set(before) | set(waves)):
            was, now = _wave_text(before.get(node)), _wave_text(waves.get(node))
            if was == now:
                continue
            if source.slurm is None:
                audit_event("rollout_wave", node=node, label=source.label, wave=now, was=was)
            else:
                audit_event("rollout_wave", node=node, slurm=str(source.slurm), wave=now, was=was)


def _wave_text(waves: tuple[str, ...] | None) -> str | None:
    """A node's wave as the audit shows it: `1`, `wave1,wave2`; None in none."""
    return ",".join(waves) if waves else None


def _slurm_wave(source: _Source, read: _Read, node: str) -> NodeWave:
    """The node's wave from its Slurm features (partitions), found as the slurm.* actions find a node: by
    NodeName, NodeHostName, or the first label of a fully qualified name (dcgm-exporter's Hostname)."""
    assert read.waves is not None
    tried = dict.fromkeys([node, node.partition(".")[0]])
    names = [n if n in read.waves else read.aliases.get(n) for n in tried]
    name = next((n for n in names if n is not None), None)
    if name is None:
        return NodeWave(node, None, "not a node of the Slurm cluster")
    found = read.waves[name]
    plural = "s" if len(found) > 1 else ""
    if not found:
        return NodeWave(node, None, f"no {source.text} names a wave")
    return NodeWave(node, found[0], f"{source.text}{plural} {', '.join(found)}", also=found[1:])
