"""The shipped Grafana dashboard (docs/dashboards/remediate.json) read without Grafana or Prometheus: its
variables, that every query selects by them, and that it names only metrics remediate.metrics defines.
(tests/e2e/test_grafana.py sends every query to a real Prometheus scraping a real server.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from remediate.executor.beat import ExecutorBeat
from remediate.metrics import ExecutorBeatCollector, Metrics, ReliabilityCollector, StoreCollector
from remediate.store import Store
from tests.support import dashboard


def defined_families(store: Store, beat_file: Path) -> set[str]:
    """Every metric family remediate exports: its counters and histograms, the gauges read from the store and
    the executor's heartbeat age (once it beat)."""
    registry = CollectorRegistry()
    Metrics(registry)
    registry.register(StoreCollector(store))
    beat = ExecutorBeat(beat_file)
    beat.beat()
    registry.register(ExecutorBeatCollector(beat))
    registry.register(ReliabilityCollector(store, window=3600.0, max_age=60.0, job_labels=("job",)))
    names = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def test_the_dashboard_names_only_metrics_remediate_defines(store: Store, tmp_path: Path) -> None:
    families = defined_families(store, tmp_path / "beat")
    used = {name for q in dashboard.queries(dashboard.load()) for name in dashboard.metric_names(q.expr)}

    assert {name for name in used if not dashboard.exported(name, families)} == set()
    # The panels the issue asks for, by the metrics behind them.
    assert used >= {
        "remediate_notifications_received_total", "remediate_alerts_received_total", "remediate_decisions_total",
        "remediate_runs_finished_total", "remediate_step_duration_seconds_bucket", "remediate_queue_depth",
        "remediate_queue_oldest_age_seconds", "remediate_breaker_open", "remediate_nodes_held", "remediate_paused",
        "remediate_agent_call_errors_total", "remediate_report_remediations", "remediate_report_mttr_seconds",
        "remediate_http_requests_total", "remediate_http_request_duration_seconds_bucket",
        "remediate_executor_heartbeat_age_seconds", "remediate_agent_call_duration_seconds_bucket",
    }  # fmt: skip


def test_every_query_uses_the_datasource_variable_and_selects_by_job_and_instance() -> None:
    board = dashboard.load()
    variables = {v["name"]: v for v in board["templating"]["list"]}

    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {variables["job"]["type"], variables["instance"]["type"]} == {"query"}
    for panel in dashboard.panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert 'job=~"$job", instance=~"$instance"' in target["expr"], (panel["title"], target["expr"])


def test_step_durations_are_quantiles_over_the_histograms_buckets() -> None:
    (panel,) = [p for p in dashboard.panels(dashboard.load()) if p["title"] == "Step duration by action (p50, p95)"]
    exprs = [t["expr"] for t in panel["targets"]]

    assert [e.split(",", 1)[0] for e in exprs] == ["histogram_quantile(0.5", "histogram_quantile(0.95"]
    for expr in exprs:
        assert "sum by (action, le) (rate(remediate_step_duration_seconds_bucket{" in expr
        assert "[$__rate_interval]" in expr


def test_panel_ids_are_unique_and_the_runs_are_shown_as_annotations() -> None:
    board = dashboard.load()
    ids = [p["id"] for p in dashboard.panels(board)]

    assert len(ids) == len(set(ids))
    (runs,) = [a for a in board["annotations"]["list"] if a["name"] == "remediate runs"]
    assert runs["target"]["tags"] == ["remediate"]  # the tag remediate.executor.grafana.Annotator puts on every run


# Grafana's unit ids the dashboard may use: durations, counts, rates and 0/1 states.
UNITS = {"s", "ms", "short", "percent", "percentunit", "reqps", "ops", "bool"}


def unit_of(panel: dict[str, Any], target: dict[str, Any]) -> str:
    """The unit Grafana shows a target's values in: an override that picks its series, else the panel's."""
    unit: str = panel["fieldConfig"]["defaults"]["unit"]
    for override in panel["fieldConfig"].get("overrides", []):
        matcher = override["matcher"]
        picks = (matcher["id"], matcher["options"]) in {
            ("byFrameRefID", target["refId"]),
            ("byName", target.get("legendFormat")),
        }
        for prop in override["properties"]:
            if picks and prop["id"] == "unit":
                unit = prop["value"]
    return unit


def test_every_panel_has_a_unit_and_every_duration_is_shown_in_seconds() -> None:
    """The "oldest queued run" panel showed a bare number; every panel says what its values count."""
    checked = 0
    for panel in dashboard.panels(dashboard.load()):
        if panel["type"] == "row":
            continue
        assert panel["fieldConfig"]["defaults"].get("unit") in UNITS, panel["title"]
        for target in panel["targets"]:
            names = dashboard.metric_names(target["expr"])
            if names and all(name.removesuffix("_bucket").endswith("_seconds") for name in names):
                assert unit_of(panel, target) == "s", (panel["title"], target["refId"])
                checked += 1
    assert checked >= 8  # step durations, oldest queued run (twice), MTTRs, MTBI, the report's window and age
    (oldest,) = [p for p in dashboard.panels(dashboard.load()) if p["title"] == "Oldest queued run"]
    assert oldest["fieldConfig"]["defaults"]["unit"] == "s"
