"""Prometheus metrics of the server and executor.

Under gunicorn every worker is a process: `remediate serve` sets
PROMETHEUS_MULTIPROC_DIR before the workers start, counters are then written to
per-process files and /metrics merges them (prometheus_client multiprocess mode).
Queue depth, pause state and the circuit breaker's state are read from the store
at scrape time, so they are right whichever worker answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from remediate.engine import IngestResult
from remediate.executor import ExecutorMetrics
from remediate.store import Store

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def multiprocess_mode() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class Metrics(ExecutorMetrics):
    def __init__(self, registry: CollectorRegistry | None) -> None:
        """`registry=None` in multiprocess mode: values live in files, not in a registry."""
        kw = {"registry": registry}
        self.notifications = Counter(
            "remediate_notifications_received_total", "Webhook notifications stored", ["status"], **kw
        )
        self.alerts = Counter("remediate_alerts_received_total", "Alerts received in notifications", ["status"], **kw)
        self.rejected = Counter(
            "remediate_webhook_rejected_total", "Webhook requests refused, by HTTP status", ["code"], **kw
        )
        self.decisions = Counter("remediate_decisions_total", "Guard decisions, by decision", ["decision"], **kw)
        self.runs = Counter("remediate_runs_finished_total", "Runs finished, by final status", ["status"], **kw)
        self.steps = Counter(
            "remediate_steps_total", "Steps finished, by action and outcome", ["action", "outcome"], **kw
        )
        self.step_duration = Histogram(
            "remediate_step_duration_seconds",
            "Time from a step's start to its end",
            ["action"],
            buckets=STEP_BUCKETS,
            **kw,
        )

    def record_ingest(self, result: IngestResult) -> None:
        self.notifications.labels(result.status).inc()
        for status, count in result.alert_statuses.items():
            self.alerts.labels(status).inc(count)
        for decision, count in result.decision_counts().items():
            self.decisions.labels(decision).inc(count)

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.steps.labels(action, outcome).inc()
        self.step_duration.labels(action).observe(seconds)

    def run_finished(self, status: str) -> None:
        self.runs.labels(status).inc()


class StoreCollector(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("remediate_queue_depth", "Runs not finished, by status", labels=["status"])
        for status, count in self.store.queue_depth().items():
            depth.add_metric([status], count)
        yield depth
        paused = GaugeMetricFamily("remediate_paused", "1 while remediation is paused")
        paused.add_metric([], 1 if self.store.pause_state().paused else 0)
        yield paused
        breaker = self.store.breaker_state() or {}
        is_open = GaugeMetricFamily("remediate_breaker_open", "1 while the circuit breaker of cluster actions is open")
        is_open.add_metric([], 1 if breaker.get("open") else 0)
        yield is_open


def exposition(own_registry: CollectorRegistry | None, store: Store) -> bytes:
    registry = CollectorRegistry()
    if own_registry is None:
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = own_registry
    extra = CollectorRegistry()
    extra.register(StoreCollector(store))
    return generate_latest(registry) + generate_latest(extra)
