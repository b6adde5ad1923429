"""The node agent's GPU fault path: NVML events -> an alert in AlertManager, in about a second.

Opt-in (`gpu_events_alertmanager_url`). `remediate agent` starts a `FaultWatcher` beside its HTTP server:
one thread waits on the GPU backend's event watch (remediate.gpu.events: NVML's event set, or the
simulator's, through the same `open_events` capability) with a short timeout, so it notices `stop` and
polls for lost GPUs between waits; a second thread posts what it found to AlertManager's v2 API
(`POST /api/v2/alerts`, what amtool does), retrying connection errors with tenacity, so a slow or absent
AlertManager never holds up the watching, and neither holds up the agent's HTTP serving.

Why AlertManager and not remediate's webhook directly: silences, inhibition and routing apply to these
alerts as to Prometheus' ones, and the same playbook (gpu-xid-quarantine) handles both. The labels are
those the shipped GPUXidCritical rule's alerts carry (alertname, severity) plus node, UUID, gpu, xid, event
and source="nvml"; `occurrence` makes each fault its own alert (an edge, not a level: dcgm-exporter's XID
gauge latches the last XID, its issues #500/#190/#502). `endsAt` = the fault + `gpu_events_resolve_after`:
AlertManager resolves it then, and the playbook's on_resolved steps run. Only serious XIDs
(remediate.gpu.events.SERIOUS_XIDS) are alerts; application XIDs are logged.

With `health`, a third thread reads the GPUs' health every poll and puts what remediate.agent.gpu_degradations
makes of it (silent degradations: levels, re-sent while they last) in the same outbox, so they reach
AlertManager by the same retried path and route.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, stop_any, wait_exponential

from remediate.agent.gpu_degradations import DegradationTracker, Scan
from remediate.gpu.events import FELL_OFF_THE_BUS_XID, GPU_LOST, EventWatch, GpuEvent

log = logging.getLogger("remediate.agent.gpu_faults")

ALERTNAME = "GPUXidCritical"
"""The alertname of alertmanager/rules/xid.rules.yml's rule, which playbooks/gpu-xid-quarantine matches."""
SOURCE = "nvml"
WAIT_SECONDS = 1.0
"""One wait on the event set: how soon `stop` is noticed and how often lost GPUs are looked for."""
POST_TIMEOUT = 5.0
GIVE_UP_AFTER = 300.0
"""Seconds a post is retried while AlertManager cannot be reached; then the fault is logged as not raised."""


class AlertManagerUnreachable(Exception):
    """AlertManager did not answer, or answered 5xx: retried."""


@dataclass(frozen=True)
class FaultAlerts:
    """Where and how fault alerts go."""

    url: str
    """AlertManager's base URL (…/api/v2/alerts is appended)."""
    node: str
    resolve_after: float
    token: str | None = None


def fault_alert(event: GpuEvent, config: FaultAlerts, sequence: int) -> dict[str, Any]:
    """The v2 API's alert for one fault: labels the shipped playbook matches, one identity per occurrence."""
    what = {"xid": f"XID {event.xid}", "double_bit_ecc": "a double-bit ECC error (XID 48)"}.get(
        event.kind, "fell off the bus (XID 79)"
    )
    gpu = "?" if event.index is None else str(event.index)
    labels = {
        "alertname": ALERTNAME,
        "severity": "critical",
        "source": SOURCE,
        "node": config.node,
        "UUID": event.uuid,
        "gpu": gpu,
        "xid": str(event.xid),
        "event": event.kind,
        # Each fault is its own alert: the time in ms and the watcher's count (two faults in one ms).
        "occurrence": f"{int(event.at * 1000)}-{sequence}",
    }
    return {
        "labels": labels,
        "annotations": {
            "summary": f"GPU {gpu} ({event.uuid or 'unknown UUID'}) on {config.node}: {what}",
            "description": f"The node agent saw this through NVML ({event.kind}); the fault alert resolves "
            f"{config.resolve_after:g} s after it (gpu_events_resolve_after).",
        },
        "startsAt": _rfc3339(event.at),
        "endsAt": _rfc3339(event.at + config.resolve_after),
    }


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FaultWatcher:
    """Watches one backend's GPU events and raises each serious fault in AlertManager; `start`, then `stop`."""

    def __init__(
        self,
        watch: EventWatch,
        config: FaultAlerts,
        *,
        wait_seconds: float = WAIT_SECONDS,
        health: tuple[Scan, DegradationTracker] | None = None,
    ) -> None:
        """`health`: also read the GPUs' health every poll and raise silent degradations (gpu_degradations)."""
        self.watch = watch
        self.config = config
        self.wait_seconds = wait_seconds
        self.health = health
        self.stopping = threading.Event()
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._sequence = 0
        self._lost: set[str] = set()
        self._threads = [
            threading.Thread(target=self._watch_loop, name="gpu-fault-watch", daemon=True),
            threading.Thread(target=self._post_loop, name="gpu-fault-post", daemon=True),
        ]
        if health is not None:
            self._threads.append(threading.Thread(target=self._health_loop, name="gpu-health-poll", daemon=True))
        self._posting = threading.Event()
        self.posted = 0
        """Alerts AlertManager accepted (for logs and tests)."""

    def start(self) -> FaultWatcher:
        kinds = sorted({kind for kinds in self.watch.registered.values() for kind in kinds})
        log.info(
            "watching %d GPU(s) for %s and lost GPUs; faults go to %s",
            len(self.watch.registered),
            ", ".join(kinds) or "no event",
            self.config.url,
        )
        for thread in self._threads:
            thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Whether a thread of it still runs."""
        return any(thread.is_alive() for thread in self._threads)

    @property
    def posting(self) -> bool:
        """Whether a post is under way (e.g. retried while AlertManager cannot be reached)."""
        return self._posting.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching and posting (a post being retried is given up); frees the event set."""
        self.stopping.set()
        self._outbox.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        self.watch.close()

    def _watch_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                event = self.watch.wait(self.wait_seconds)
                if event is not None:
                    self._raise(event)
                gone = dict(self.watch.lost())
                for uuid in gone.keys() - self._lost:  # once per loss; a GPU that comes back may alert again
                    self._raise(
                        GpuEvent(kind=GPU_LOST, uuid=uuid, index=gone[uuid], xid=FELL_OFF_THE_BUS_XID, at=time.time())
                    )
                self._lost = set(gone)
            except Exception:
                # A watcher that dies silently is worse than one that logs and goes on.
                log.exception("watching GPU events failed; trying again in %g s", self.wait_seconds)
                self.stopping.wait(self.wait_seconds)

    def _health_loop(self) -> None:
        assert self.health is not None
        scan, tracker = self.health
        while not self.stopping.is_set():
            try:
                for alert in tracker.observe(scan(), time.time()):
                    self._outbox.put(alert)
            except Exception:
                log.exception("reading the GPUs' health failed; trying again in %g s", tracker.policy.poll_seconds)
            self.stopping.wait(tracker.policy.poll_seconds)

    def _raise(self, event: GpuEvent) -> None:
        if not event.serious:
            log.info(
                "GPU %s (%s): XID %s is an application error: not a node fault", event.index, event.uuid, event.xid
            )
            return
        self._sequence += 1
        alert = fault_alert(event, self.config, self._sequence)
        log.warning("GPU fault: %s", alert["annotations"]["summary"])
        self._outbox.put(alert)

    def _post_loop(self) -> None:
        while True:
            alert = self._outbox.get()
            if alert is None or self.stopping.is_set():
                return
            self._posting.set()
            try:
                self._post(alert)
                self.posted += 1
                labels = alert["labels"]
                log.info("posted %s (%s) to AlertManager", labels["alertname"], _which(labels, alert["endsAt"]))
            except Exception as exc:
                log.error("could not raise the GPU fault %s in AlertManager: %s", alert["labels"], exc)
            finally:
                self._posting.clear()

    def _post(self, alert: dict[str, Any]) -> None:
        retrying = Retrying(
            retry=retry_if_exception_type(AlertManagerUnreachable),
            wait=wait_exponential(multiplier=0.1, max=5),
            sleep=self.stopping.wait,  # a stop ends the wait between two tries at once
            stop=stop_any(stop_after_delay(GIVE_UP_AFTER), lambda _state: self.stopping.is_set()),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                post_alerts(self.config, [alert])


def _which(labels: dict[str, str], ends_at: str) -> str:
    if "occurrence" in labels:
        return f"occurrence {labels['occurrence']}"
    return f"GPU {labels.get('gpu')} {labels.get('UUID')}, ends {ends_at}"


def post_alerts(config: FaultAlerts, alerts: list[dict[str, Any]]) -> None:
    """One `POST /api/v2/alerts`. The standard library's client: the agent stays free of requests (its idle
    memory, docs/benchmarks.md). AlertManagerUnreachable (retried) for no answer or a 5xx."""
    headers = {"Content-Type": "application/json"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    # The URL is the http(s) setting gpu_events_alertmanager_url (checked when loaded), never from an alert.
    request = urllib.request.Request(  # noqa: S310
        f"{config.url}/api/v2/alerts", data=json.dumps(alerts).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=POST_TIMEOUT) as answer:  # noqa: S310
            answer.read()
            return
    except urllib.error.HTTPError as exc:
        said = exc.read()[:500].decode(errors="replace")
        if exc.code >= 500:
            raise AlertManagerUnreachable(f"{exc.code}: {said}") from exc
        # A 4xx will not change on a retry: the alert is malformed or we are not allowed.
        raise RuntimeError(f"AlertManager refused the alert ({exc.code}): {said}") from exc
    except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
        raise AlertManagerUnreachable(str(exc)) from exc
