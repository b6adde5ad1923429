"""remediate.metrics: the reliability gauges' cache, what a scrape shows when the store cannot be read, and the
counters exported at 0 for the loaded playbooks."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.mmap_dict import MmapedDict

from remediate.metrics import Metrics, ReliabilityCollector, WrittenFilesCollector, exposition
from remediate.store import Report, ReportQuery, Store
from tests.support.rules import shipped_engine


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_figures_are_read_once_per_max_age_over_the_window(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    queries: list[ReportQuery] = []
    real = store.history.report

    def counting(query: ReportQuery) -> Report:
        queries.append(query)
        return real(query)

    monkeypatch.setattr(store.history, "report", counting)
    clock = Clock(1_000_000.0)
    collector = ReliabilityCollector(store, window=3600.0, max_age=60.0, job_labels=("training_job",), clock=clock)

    exposition(CollectorRegistry(), store, collector)
    clock.now += 59
    body = exposition(CollectorRegistry(), store, collector).decode()
    clock.now += 1
    exposition(CollectorRegistry(), store, collector)

    assert [(q.since, q.until, q.job_labels) for q in queries] == [
        (1_000_000.0 - 3600, 1_000_000.0, ("training_job",)),
        (1_000_060.0 - 3600, 1_000_060.0, ("training_job",)),
    ]
    assert "remediate_report_age_seconds 59.0" in body
    assert "remediate_report_window_seconds 3600.0" in body
    assert "remediate_nodes_held 0.0" in body


def test_a_store_that_cannot_report_leaves_the_other_metrics_answering(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(query: ReportQuery) -> Report:
        raise RuntimeError("database restarting")

    monkeypatch.setattr(store.history, "report", broken)
    collector = ReliabilityCollector(store, window=3600.0, max_age=60.0, job_labels=())

    with caplog.at_level(logging.ERROR, logger="remediate.metrics"):
        body = exposition(CollectorRegistry(), store, collector).decode()

    assert "remediate_paused 0.0" in body
    assert "remediate_report_" not in body
    assert "reliability figures for /metrics could not be read" in caplog.text


def test_a_metrics_file_no_process_has_written_yet_leaves_the_scrape_answering(tmp_path: Path) -> None:
    """A worker's file exists at 0 bytes for a moment after its creation (and for good if the worker was killed
    then): prometheus_client's own collector fails the whole scrape on it; remediate's skips it."""
    written = MmapedDict(str(tmp_path / "counter_101.db"))
    key = json.dumps(("remediate_soak", "remediate_soak_total", {}, "soak"))
    written.write_value(key, 3.0, 0.0)
    written.close()
    (tmp_path / "counter_102.db").touch()  # a booting worker's, not sized yet

    upstream = CollectorRegistry()
    multiprocess.MultiProcessCollector(upstream, path=str(tmp_path))
    with pytest.raises(struct.error):
        generate_latest(upstream)
    ours = CollectorRegistry()
    ours.register(WrittenFilesCollector(str(tmp_path)))
    assert "remediate_soak_total 3.0" in generate_latest(ours).decode()


def test_the_shipped_playbooks_runs_and_every_rungs_actions_are_exported_at_zero() -> None:
    playbooks = shipped_engine().playbooks
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.count_from_zero(playbooks)
    body = generate_latest(registry).decode()

    for playbook in playbooks.playbooks:
        for status in ("succeeded", "failed", "planned"):
            assert f'remediate_runs_finished_total{{playbook="{playbook.name}",status="{status}"}} 0.0' in body
    ladder = next(p for p in playbooks.playbooks if p.name == "gpu-xid-quarantine")
    rung_actions = {step.action for rung in ladder.rungs for step in rung.steps}
    assert rung_actions - {step.action for step in ladder.steps}, "a rung acts with an action of its own"
    for action in rung_actions:
        assert f'remediate_steps_total{{action="{action}",outcome="failed"}} 0.0' in body
    assert "remediate_grafana_annotations_total{" not in body  # no Grafana configured: nothing is posted
