"""Prometheus metrics of the server and executor.

Under gunicorn every worker is a process: `remediate serve` sets
PROMETHEUS_MULTIPROC_DIR before the workers start, counters are then written to
per-process files and /metrics merges them (prometheus_client multiprocess mode).
Queue depth, pause state and the circuit breaker's state are read from the store
at scrape time, so they are right whichever worker answers.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from remediate import __version__
from remediate.errors import StoreUnavailable
from remediate.executor import announce, grafana
from remediate.executor.agent_calls import AGENT_CALL_ERRORS
from remediate.executor.beat import ExecutorBeat
from remediate.executor.metrics import ExecutorMetrics
from remediate.judging.engine import IngestResult
from remediate.playbooks.model import Playbook, PlaybookSet
from remediate.runs import Decision, RunStatus, StepStatus
from remediate.store import Report, ReportQuery, Store
from remediate.store.database import WRITE_ERROR_KINDS
from remediate.store.report import NO_RUNG

log = logging.getLogger(__name__)

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TRAINING_JOB = "training_job"
"""The label of the training job on the remediate_report_job_* gauges: not `job`, which Prometheus renames
`exported_job` on scrape (the scrape target's own `job` wins, honor_labels: false)."""
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
"""A request answers in milliseconds; a webhook waits at most store_busy_timeout (seconds) for the lock."""


RUN_ENDS = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.PLANNED)
"""The ends of a run the executor counts (remediate.executor.steps); a rejected or cancelled run never starts."""
STEP_ENDS = (StepStatus.SUCCEEDED, StepStatus.FAILED)
"""The step outcomes exported at 0 for each action the playbooks use (the rarer ones appear when they happen)."""
ALERT_STATUSES = ("firing", "resolved")


def multiprocess_mode() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class ReloadGauges:
    """`remediate_config_last_reload_successful` (1/0) and `..._success_timestamp_seconds`, as Prometheus and
    AlertManager name theirs: a refused reload keeps the running set and leaves nothing else to alert on, and
    the next restart would refuse to start on the same files.

    In multiprocess mode the master records the reloads it applies or refuses and an HTTP worker the POST
    /-/reload it refuses: the most recent write of any process wins (`mostrecent`). Every other process's instance
    holds a 0 written at no time, which never wins: a worker forked later does not hide the master's value."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        kw: dict[str, Any] = {"registry": registry, "multiprocess_mode": "mostrecent"}
        self.successful = Gauge(
            "remediate_config_last_reload_successful",
            "1 when the last reload of the live set (playbooks, sinks) or the start's read of it succeeded, 0 when"
            " it was refused (the running set kept)",
            **kw,
        )
        self.success_time = Gauge(
            "remediate_config_last_reload_success_timestamp_seconds",
            "When the live set was last read successfully (at start or by a reload), UNIX seconds",
            **kw,
        )

    def applied(self, now: float) -> None:
        self.successful.set(1)
        self.success_time.set(now)

    def refused(self) -> None:
        self.successful.set(0)


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
        self.alerts_truncated = Counter(
            "remediate_alerts_truncated_total",
            "Alerts AlertManager left out of its notifications (the receiver's max_alerts: truncatedAlerts),"
            " never seen here",
            **kw,
        )
        self.runs = Counter(
            "remediate_runs_finished_total", "Runs finished, by final status and playbook", ["status", "playbook"], **kw
        )
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
        self.agent_call_errors = Counter(
            "remediate_agent_call_errors_total",
            "Calls to a node agent that got no answer of the protocol, by reason"
            " (remediate.executor.agent_calls.AGENT_CALL_ERRORS)",
            ["reason"],
            **kw,
        )
        self.annotations = Counter(
            "remediate_grafana_annotations_total",
            "Grafana annotations of finished runs, by outcome (posted, failed, dropped)",
            ["outcome"],
            **kw,
        )
        self.agent_call_duration = Histogram(
            "remediate_agent_call_duration_seconds",
            "Time of a call to a node agent (retries included), by action and outcome (answered, or the"
            " reason it got no answer: remediate.executor.agent_calls.AGENT_CALL_ERRORS)",
            ["action", "outcome"],
            buckets=STEP_BUCKETS,
            **kw,
        )
        self.http_requests = Counter(
            "remediate_http_requests_total",
            "HTTP requests answered, by route (the URL rule, not the path), method and status code",
            ["route", "method", "code"],
            **kw,
        )
        self.http_duration = Histogram(
            "remediate_http_request_duration_seconds",
            "Time from a request's dispatch to its answer, by route and method",
            ["route", "method"],
            buckets=HTTP_BUCKETS,
            **kw,
        )
        self.store_write_errors = Counter(
            "remediate_store_write_errors_total",
            "Write transactions the database could not take (remediate.store.database.WRITE_ERROR_KINDS), by kind",
            ["kind"],
            **kw,
        )
        self.slurm_commands = Counter(
            "remediate_slurm_commands_total",
            "Slurm commands this server ran, by tool (sinfo: the node cache's one read per slurm_poll_interval;"
            " scontrol: a step's fresh read of its node and its changes; squeue: slurm.requeue's jobs;"
            " scancel: its signals to jobs that ask for one)",
            ["tool"],
            **kw,
        )
        self.approval_announcements = Counter(
            "remediate_approval_announcements_total",
            "Chat messages that a run awaits approval (remediate.executor.announce), by outcome (sent, failed)",
            ["outcome"],
            **kw,
        )
        self.reload = ReloadGauges(registry)

    def count_from_zero(self, playbooks: PlaybookSet, *, annotations: bool = False) -> None:
        """Every labelled counter whose label values are known is exported at 0 from now on. A series born at 1
        has no sample before its first increment, so increase() and rate() over a start or a restart miss it:
        RemediateRunsFailing would wait for a fourth failure. `annotations`: Grafana annotations are posted."""
        for status in ALERT_STATUSES:
            self.notifications.labels(status)
            self.alerts.labels(status)
        for decision in Decision:
            self.decisions.labels(decision.value)
        for reason in AGENT_CALL_ERRORS:
            self.agent_call_errors.labels(reason)
        for kind in WRITE_ERROR_KINDS.values():
            self.store_write_errors.labels(kind)
        for outcome in (announce.SENT, announce.FAILED):
            self.approval_announcements.labels(outcome)
        if annotations:
            for outcome in (grafana.POSTED, grafana.FAILED, grafana.DROPPED):
                self.annotations.labels(outcome)
        self.playbooks_from_zero(playbooks)

    def playbooks_from_zero(self, playbooks: PlaybookSet) -> None:
        """The runs of each playbook by end, and the steps of each action they use: at start and after a reload
        (a playbook a reload adds gets its zeros; one it removes keeps its series until the restart)."""
        for playbook in playbooks.playbooks:
            for status in RUN_ENDS:
                self.runs.labels(status.value, playbook.name)
            for action in actions_of(playbook):
                for outcome in STEP_ENDS:
                    self.steps.labels(action, outcome.value)

    def record_ingest(self, result: IngestResult) -> None:
        self.notifications.labels(result.status).inc()
        for status, count in result.alert_statuses.items():
            self.alerts.labels(status).inc(count)
        for decision, count in result.decision_counts().items():
            self.decisions.labels(decision).inc(count)
        if result.truncated_alerts:
            self.alerts_truncated.inc(result.truncated_alerts)

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.steps.labels(action, outcome).inc()
        self.step_duration.labels(action).observe(seconds)

    def run_finished(self, status: str, playbook: str) -> None:
        self.runs.labels(status, playbook).inc()

    def agent_call_failed(self, reason: str) -> None:
        self.agent_call_errors.labels(reason).inc()

    def agent_call_finished(self, action: str, outcome: str, seconds: float) -> None:
        self.agent_call_duration.labels(action, outcome).observe(seconds)

    def http_request(self, route: str, method: str, code: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(code)).inc()
        self.http_duration.labels(route, method).observe(seconds)

    def store_write_failed(self, kind: str) -> None:
        self.store_write_errors.labels(kind).inc()

    def slurm_command(self, tool: str) -> None:
        self.slurm_commands.labels(tool).inc()

    def annotation(self, outcome: str) -> None:
        self.annotations.labels(outcome).inc()

    def approval_announcement(self, outcome: str) -> None:
        self.approval_announcements.labels(outcome).inc()


def actions_of(playbook: Playbook) -> set[str]:
    """The actions a playbook's steps use: firing, resolved and every rung's."""
    specs = [*playbook.steps, *playbook.on_resolved]
    for rung in playbook.rungs:
        specs += [*rung.steps, *rung.on_resolved]
    return {spec.action for spec in specs}


@dataclass(eq=False)
class StoreCollector(Collector):
    """Gauges read from the store at scrape time; none while the store cannot be read (the database away): the
    process's own counters, the store's write errors among them, are still scraped (a 503 would lose them all
    for the whole outage, when they say most)."""

    store: Store
    clock: Callable[[], float] = time.time

    def collect(self) -> Iterator[Metric]:
        try:
            depth = self.store.queue.queue_depth().items()
            oldest = self.store.queue.oldest_queued_at()
            paused = self.store.pause.state().paused
            is_open = 1 if (self.store.breaker.state() or {}).get("open") else 0
        except StoreUnavailable as exc:
            log.debug("the store's gauges are left out of /metrics: %s", exc)
            return
        yield _gauge("remediate_queue_depth", "Runs not finished, by status", ["status"], [([s], n) for s, n in depth])
        yield GaugeMetricFamily(
            "remediate_queue_oldest_age_seconds",
            "Seconds the oldest queued run has waited (0 when none is queued)",
            value=0.0 if oldest is None else max(0.0, self.clock() - oldest),
        )
        yield GaugeMetricFamily("remediate_paused", "1 while remediation is paused", value=1 if paused else 0)
        what = "1 while the circuit breaker of cluster actions is open"
        yield GaugeMetricFamily("remediate_breaker_open", what, value=is_open)


@dataclass(eq=False)
class ReliabilityCollector(Collector):
    """The reliability report's figures (remediate.store.report) as gauges: `remediate_report_*`.

    They are read from the store over the last `window` seconds, at most once per `max_age` seconds per
    process (a scrape in between gets the same figures; `remediate_report_age_seconds` says how old), so
    a large history costs one indexed read a minute, not one per scrape. Built once per process.
    """

    store: Store
    _: KW_ONLY
    window: float
    max_age: float
    job_labels: tuple[str, ...]
    clock: Callable[[], float] = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _cached: tuple[float, Report] | None = field(default=None, init=False, repr=False)

    def report(self) -> tuple[float, Report]:
        """(when it was computed, the report): the cached one while younger than max_age."""
        with self._lock:  # concurrent scrapes of one worker wait for one read, not one each
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.max_age:
                query = ReportQuery(since=now - self.window, until=now, job_labels=self.job_labels)
                self._cached = (now, self.store.history.report(query))
            return self._cached

    def collect(self) -> Iterator[Metric]:
        try:
            computed_at, report = self.report()
        except Exception:
            # The other metrics still answer when the store cannot (e.g. the database restarting).
            log.exception("reliability figures for /metrics could not be read")
            return
        window = "Window of the remediate_report_* figures"
        yield _gauge("remediate_report_window_seconds", window, [], [([], self.window)])
        age = max(0.0, self.clock() - computed_at)
        yield _gauge("remediate_report_age_seconds", "Age of the cached remediate_report_* figures", [], [([], age)])
        nodes, jobs = report.nodes, report.jobs
        yield _gauge(
            "remediate_report_incidents",
            "Alert occurrences that fired in the window, by the node a playbook resolved (- when none)",
            ["node"],
            [([n["node"]], n["incidents"]) for n in nodes],
        )
        yield _gauge(
            "remediate_report_job_incidents",
            "Alert occurrences that fired in the window, by training job",
            [TRAINING_JOB],
            [([j["job"]], j["incidents"]) for j in jobs],
        )
        yield _gauge(
            "remediate_report_remediations",
            "Firing runs of the window that acted and finished, by rung (- without a ladder) and outcome",
            ["rung", "outcome"],
            [
                ([NO_RUNG if r["rung"] is None else str(r["rung"]), outcome], r[outcome])
                for r in report.by_rung
                for outcome in ("succeeded", "failed")
            ],
        )
        scopes = (("node", "node", nodes, "node"), ("job", TRAINING_JOB, jobs, "training job"))
        for scope, label, rows, what in scopes:
            yield _gauge(
                f"remediate_report_{scope}_remediations",
                f"Firing runs of the window that acted and finished, by {what} and outcome",
                [label, "outcome"],
                [([r[scope], outcome], r[outcome]) for r in rows for outcome in ("succeeded", "failed")],
            )
        mttr = report.totals["mttr_seconds"]
        yield _gauge(
            "remediate_report_mttr_seconds",
            "Mean time from an incident's start to the last step of its succeeded run, in the window",
            [],
            [([], mttr)] if mttr is not None else [],
        )
        for scope, label, rows, what in scopes:
            yield _gauge(
                f"remediate_report_{scope}_mttr_seconds",
                f"Mean time to remediate, by {what}",
                [label],
                [([r[scope]], r["mttr_seconds"]) for r in rows if r["mttr_seconds"] is not None],
            )
        yield _gauge(
            "remediate_report_node_mtbi_seconds",
            "Mean time between the incidents of a node in the window (nodes with two or more)",
            ["node"],
            [([n["node"]], n["mtbi_seconds"]) for n in nodes if n["mtbi_seconds"] is not None],
        )
        yield _gauge(
            "remediate_nodes_held",
            "Nodes remediate holds now (open circuit-breaker claims: cordoned, tainted or drained, not undone)",
            [],
            [([], report.totals["nodes_held"])],
        )
        yield _gauge(
            "remediate_node_held",
            "1 for each node remediate holds now, by the kind of its first open claim",
            ["node", "kind"],
            [([h["node"], h["kind"]], 1) for h in report.held],
        )


def _gauge(name: str, documentation: str, labels: list[str], samples: list[tuple[list[str], float]]) -> Metric:
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for values, value in samples:
        gauge.add_metric(values, value)
    return gauge


def exposition(
    own_registry: CollectorRegistry | None,
    store: Store,
    reliability: ReliabilityCollector | None = None,
    executor_beat: ExecutorBeat | None = None,
    node_cache: Callable[[], Mapping[str, Any] | None] | None = None,
    slurm_cache: Callable[[], Mapping[str, Any] | None] | None = None,
) -> bytes:
    registry = CollectorRegistry()
    if own_registry is None:
        registry.register(WrittenFilesCollector(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    else:
        registry = own_registry
    extra = CollectorRegistry()
    extra.register(BuildInfoCollector(store.database.engine.dialect.name))
    extra.register(StoreCollector(store))
    if reliability is not None:
        extra.register(reliability)
    if executor_beat is not None:
        extra.register(ExecutorBeatCollector(executor_beat))
    if node_cache is not None:
        extra.register(NodeCacheCollector(node_cache))
    if slurm_cache is not None:
        extra.register(NodeCacheCollector(slurm_cache, prefix="remediate_slurm_cache", source="Slurm (sinfo --json)"))
    return generate_latest(registry) + generate_latest(extra)


@dataclass(eq=False)
class WrittenFilesCollector(Collector):
    """prometheus_client's MultiProcessCollector over `path`, less the files no process has written yet.

    A process's metrics file exists at 0 bytes between its creation and its sizing (MmapedDict.__init__): a scrape
    that reads it then fails whole with struct.error (prometheus/client_python#1199), which a worker booting
    while /metrics is scraped turned into a 500, and a process killed in that window leaves it so for good. An
    empty file holds no value, so skipping it loses nothing."""

    path: str

    def collect(self) -> Iterator[Metric]:
        files = []
        for name in glob.glob(os.path.join(self.path, "*.db")):
            with contextlib.suppress(FileNotFoundError):  # a live gauge's, removed as its process ended
                if os.path.getsize(name) > 0:
                    files.append(name)
        return iter(multiprocess.MultiProcessCollector.merge(files, accumulate=True))


@dataclass(eq=False)
class ExecutorBeatCollector(Collector):
    """The age of the executor process's last heartbeat (remediate.executor.beat), read at scrape time."""

    beat: ExecutorBeat

    def collect(self) -> Iterator[Metric]:
        age = self.beat.age()
        if age is None:  # starting: no beat yet
            return
        yield GaugeMetricFamily(
            "remediate_executor_heartbeat_age_seconds",
            "Seconds since the executor process last beat (its master replaces it past the lease)",
            value=age,
        )


@dataclass(eq=False)
class NodeCacheCollector(Collector):
    """How old the node cache's view is (remediate.kube.nodecache), and its bound; nothing before its first read."""

    state: Callable[[], Mapping[str, Any] | None]
    prefix: str = "remediate_node_cache"
    """remediate_node_cache (Kubernetes's watch-fed cache) or remediate_slurm_cache (Slurm's polled one)."""
    source: str = "the API server (list, event, bookmark, watch end)"

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        if state is None or state.get("age_s") is None:
            return
        yield GaugeMetricFamily(
            f"{self.prefix}_age_seconds",
            f"Seconds since the node cache last heard from {self.source}",
            value=state["age_s"],
        )
        yield GaugeMetricFamily(
            f"{self.prefix}_max_staleness_seconds",
            "The node cache's staleness bound: past it, steps that read it fail retryable",
            value=state["max_staleness_s"],
        )


@dataclass(frozen=True)
class BuildInfoCollector(Collector):
    """`remediate_build_info{version, python, database} 1`: which build answers (join it onto other series)."""

    database: str

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "remediate_build_info",
            "Always 1: the version of remediate, of Python and the kind of database this server runs with",
            labels=["version", "python", "database"],
        )
        info.add_metric([__version__, platform.python_version(), self.database], 1)
        yield info
