"""One periodically read view of the Slurm cluster's nodes per process: what the circuit breaker counts.

Why: a step that reads the whole cluster (`sinfo --json`: every node, ~1 KB of JSON each) costs slurmctld an
RPC that walks every node, and an alert storm on a 5,000-node cluster would send one per step. This is the
Slurm side of the fleet-scale rule the Kubernetes side keeps with its watch (remediate.kube.nodecache); Slurm
has no watch, so one daemon thread reads `sinfo --json` once per `interval` (slurm_poll_interval), whatever
the number of steps, and keeps:

- the nodes by NodeName, and NodeHostName -> NodeName (an alert naming a node by its host name);
- the breaker's census per set of partitions asked for (nodes counted: those in the partitions, all without
  any; nodes holding remediate's drain: drained, reason starting with remediate's mark, or a hand-off reason,
  as a node handed to a breakfix system is still out of service by remediate's doing; and the same two per
  partition, whose own share the breaker caps too), computed once per read of the cluster, not per step.

The staleness bound is explicit: the view is *fresh* while its last successful read is at most
`max_staleness` seconds old (3 intervals: two reads may fail, a slurmctld restart, before steps notice). A
reader of a view that is not fresh waits a little for the next read, else gets SlurmUnavailable (retryable:
the step is retried later, as a k8s step is when the API server is away).

What it never decides: a change to a node. The node being changed is read fresh for every decision
(`scontrol -o show node NAME`, remediate.slurm.shownode), so a stale view can only move counts.

Started on first read, and by the executor process at its start when a playbook has a breaker-gated slurm
step (remediate.serve.launcher); stop() ends the thread at once (it waits on an Event, never sleeps).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from remediate.errors import ActionError
from remediate.slurm.client import SlurmClient
from remediate.slurm.errors import SlurmError, SlurmUnavailable
from remediate.slurm.model import SlurmNode

log = logging.getLogger("remediate.slurm.nodecache")

POLL_INTERVAL = 15.0
"""Seconds between two reads of the cluster (slurm_poll_interval's default)."""
STALE_AFTER_POLLS = 3
"""The staleness bound, in intervals."""


@dataclass(frozen=True)
class PartitionCount:
    """One partition as the breaker counts it: a node drained by remediate counts in each partition it is in."""

    nodes: frozenset[str]
    held: frozenset[str]
    """Its nodes holding remediate's drain now."""

    @property
    def counted(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class SlurmCensus:
    """What the circuit breaker reads of the cluster, as of the view's last read."""

    counted: int
    """Nodes the breaker's fraction counts: those in the partitions asked for (every node without any)."""
    held: frozenset[str]
    """Nodes holding remediate's drain now (its mark or a hand-off starts their reason), whatever their partition."""
    partitions: Mapping[str, PartitionCount] = field(default_factory=dict)
    """Each partition asked for (every partition without any) by name: its own share counts too."""


@dataclass(frozen=True)
class SlurmCacheStatus:
    """What /readyz and the metric show of the cache."""

    started: bool
    synced: bool
    """A read completed at least once."""
    age: float | None
    """Seconds since the last successful read; None before the first."""
    max_staleness: float
    interval: float
    nodes: int
    reads: int
    """`sinfo --json` commands run (successful or not)."""
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
            "interval_s": self.interval,
            "nodes": self.nodes,
            "reads": self.reads,
            **({"error": self.error} if self.error else {}),
        }


class SlurmNodeCache:
    """The nodes of one Slurm cluster, read every `interval` seconds; thread-safe (executor and request threads)."""

    def __init__(
        self,
        client: SlurmClient,
        *,
        interval: float = POLL_INTERVAL,
        max_staleness: float | None = None,
        on_sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        """The process's one Slurm client: the actions' fresh reads and changes go through it too."""
        self.interval = interval
        self.max_staleness = STALE_AFTER_POLLS * interval if max_staleness is None else max_staleness
        self.on_sync = on_sync
        """Called (from the cache's thread) after each successful read (e.g. the executor's beat file)."""
        self.clock = clock
        self._nodes: dict[str, SlurmNode] = {}
        self._by_host: dict[str, str] = {}
        self._census: dict[tuple[str, ...], SlurmCensus] = {}
        """This read's census per set of partitions asked for; recomputed at each read for those asked before."""
        self._synced_at: float | None = None
        self._reads = 0
        self._error = ""
        self._refused: ActionError | None = None
        """The last failure when it was not slurmctld's silence (no cluster configured, a refusal): readers get
        it at once, not a wait."""
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ readers

    def census(self, partitions: tuple[str, ...] = (), *, wait: float = 10.0) -> SlurmCensus:
        """The breaker's counts for `partitions` (every node: empty), from a view at most `max_staleness` old;
        waits up to `wait` s for one. Raises SlurmUnavailable (retryable) or the read's own refusal."""
        key = tuple(sorted(set(partitions)))
        with self._fresh_view(wait):
            found = self._census.get(key)
            if found is None:
                found = self._census[key] = _count(self._nodes.values(), key)
            return found

    def nodes(self, *, wait: float = 10.0) -> Mapping[str, SlurmNode]:
        """NodeName -> node, as of at most `max_staleness` seconds ago (waits and raises as `census` does)."""
        with self._fresh_view(wait):
            return dict(self._nodes)

    def name_of_host(self, hostname: str, *, wait: float = 10.0) -> str | None:
        """The NodeName of the node whose NodeHostName is `hostname`; None when no node has it."""
        with self._fresh_view(wait):
            return self._by_host.get(hostname)

    @contextmanager
    def _fresh_view(self, wait: float) -> Iterator[None]:
        self.start()
        deadline = self.clock() + wait
        with self._changed:
            while True:
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
        age = "no read has completed yet" if status.age is None else f"its last read is {status.age:.0f}s old"
        raise SlurmUnavailable(
            f"the Slurm node cache is not current ({age}; bound {self.max_staleness:g}s, one sinfo --json every "
            f"{self.interval:g}s)" + (f": {status.error}" if status.error else "")
        )

    def _fresh(self) -> bool:
        return self._synced_at is not None and self.clock() - self._synced_at <= self.max_staleness

    def status(self) -> SlurmCacheStatus:
        with self._changed:
            return self._status()

    def _status(self) -> SlurmCacheStatus:
        age = None if self._synced_at is None else max(0.0, self.clock() - self._synced_at)
        return SlurmCacheStatus(
            started=self._thread is not None,
            synced=self._synced_at is not None,
            age=age,
            max_staleness=self.max_staleness,
            interval=self.interval,
            nodes=len(self._nodes),
            reads=self._reads,
            error=self._error,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        with self._changed:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="remediate-slurm-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ends the thread: it waits on an Event between reads, so it ends at once, or when a read in flight
        ends (at most slurm_command_timeout; `timeout` waits less for it: the thread is a daemon and reads
        nothing more). A stopped cache is not started again."""
        self._stop.set()
        with self._changed:
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.client.timeout + 5 if timeout is None else timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            if self._stop.wait(self.interval):
                return

    def _read(self) -> None:
        with self._changed:
            self._reads += 1
        try:
            nodes = self.client.nodes()
        except (SlurmError, SlurmUnavailable) as exc:
            self._failed(exc)
            return
        by_name = {node.name: node for node in nodes}
        by_host = {node.hostname: node.name for node in nodes if node.hostname != node.name}
        with self._changed:
            asked = list(self._census)
            self._nodes, self._by_host = by_name, by_host
            self._census = {key: _count(by_name.values(), key) for key in asked}
            self._synced_at = self.clock()
            self._error = ""
            self._refused = None
            self._changed.notify_all()
        if self.on_sync is not None:
            self.on_sync()

    def _failed(self, exc: ActionError) -> None:
        retryable = isinstance(exc, SlurmUnavailable)
        log.warning("Slurm node cache: %s; reading again in %gs", exc, self.interval)
        with self._changed:
            self._error = str(exc)[:300]
            # No cluster configured, or Slurm refusing: no wait would help the reader, unlike slurmctld's silence.
            self._refused = None if retryable else exc
            self._changed.notify_all()


def _count(nodes: Any, partitions: tuple[str, ...]) -> SlurmCensus:
    wanted = set(partitions)
    counted = 0
    held: set[str] = set()
    members: dict[str, set[str]] = {}
    held_in: dict[str, set[str]] = {}
    for node in nodes:
        is_held = node.held_by_run is not None
        if is_held:
            held.add(node.name)
        mine = [p for p in node.partitions if not wanted or p in wanted]
        counted += bool(mine or not wanted)
        for partition in mine:
            members.setdefault(partition, set()).add(node.name)
            if is_held:
                held_in.setdefault(partition, set()).add(node.name)
    per_partition = {
        name: PartitionCount(frozenset(names), frozenset(held_in.get(name, ()))) for name, names in members.items()
    }
    return SlurmCensus(counted, frozenset(held), per_partition)
