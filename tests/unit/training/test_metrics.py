"""`StepMetrics`: the per-rank series the shipped rules read, in a real prometheus_client
registry, with the agreed labels."""

from __future__ import annotations

import math
import socket

import pytest
import requests
from prometheus_client import CollectorRegistry

from remediate.training.metrics import MetricsLabelError, RankLabels, StepMetrics
from tests.support.realsystems import free_port
from tests.support.training import require


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


RANK1 = {"training_job": "llm-7b", "rank": "1", "world_size": "2", "node": "node-b", "gpu": "1"}
RANK0 = {**RANK1, "rank": "0", "node": "node-a", "gpu": "0"}


def test_each_step_is_observed_with_the_rank_labels_and_rank_0_exports_loss_and_samples_of_all_ranks() -> None:
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics("llm-7b", registry=registry, labels=RankLabels(**RANK0), clock=clock)
    clock.now += 0.25
    assert metrics.step(loss=2.5, samples=16) == pytest.approx(0.25)
    clock.now += 0.75
    metrics.step(loss=float("nan"), samples=16)
    assert registry.get_sample_value("training_step_duration_seconds_count", RANK0) == 2
    assert registry.get_sample_value("training_step_duration_seconds_sum", RANK0) == pytest.approx(1.0)
    assert math.isnan(registry.get_sample_value("training_loss", RANK0) or 0.0)
    assert registry.get_sample_value("training_samples_total", RANK0) == 2 * 16 * 2  # steps x samples x world
    # a Summary without quantiles: Prometheus reads _sum and _count only
    names = {s.name for family in registry.collect() for s in family.samples}
    assert "training_step_duration_seconds" not in names


def test_other_ranks_export_only_their_step_time_so_the_loss_and_throughput_rules_alert_once_per_job() -> None:
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics("llm-7b", registry=registry, labels=RankLabels(**RANK1), clock=clock)
    clock.now += 0.5
    metrics.step(loss=3.0, samples=16)
    assert registry.get_sample_value("training_step_duration_seconds_sum", RANK1) == pytest.approx(0.5)
    names = {s.name for family in registry.collect() for s in family.samples}
    assert not names & {"training_loss", "training_samples_total"}


def test_start_times_the_rank_s_own_part_of_the_step_and_leaves_a_pause_out() -> None:
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics("llm-7b", registry=registry, labels=RankLabels(**RANK1), clock=clock)
    clock.now += 60  # an evaluation, or the wait for the slowest rank in the previous all-reduce
    metrics.start()
    clock.now += 0.5
    assert metrics.step() == pytest.approx(0.5)
    assert registry.get_sample_value("training_step_duration_seconds_sum", RANK1) == pytest.approx(0.5)


def test_labels_come_from_torchrun_and_the_downward_api_environment() -> None:
    environ = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "NODE_NAME": "gpu-node-7"}
    labels = RankLabels.detect("llm-7b", environ)
    assert labels == RankLabels("llm-7b", "3", "8", "gpu-node-7", "1")
    single = RankLabels.detect("small", {})
    assert single == RankLabels("small", "0", "1", socket.gethostname(), "")


def test_an_initialised_process_group_wins_over_the_environment() -> None:
    dist = require("torch.distributed")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        labels = RankLabels.detect("llm-7b", {"RANK": "5", "WORLD_SIZE": "9", "NODE_NAME": "n"})
    finally:
        dist.destroy_process_group()
    assert (labels.rank, labels.world_size) == ("0", "1")


@pytest.mark.parametrize(
    ("job", "environ", "field"),
    [("", {}, "training_job"), ("j", {"RANK": "x"}, "RANK"), ("j", {"WORLD_SIZE": "-2"}, "WORLD_SIZE")],
)
def test_a_missing_job_or_a_malformed_rank_is_refused_naming_the_field(
    job: str, environ: dict[str, str], field: str
) -> None:
    with pytest.raises(MetricsLabelError, match=field):
        RankLabels.detect(job, environ)


def test_its_own_port_serves_the_series_in_the_text_format() -> None:
    port = free_port()
    registry = CollectorRegistry()
    metrics = StepMetrics("llm-7b", registry=registry, port=port, addr="127.0.0.1", labels=RankLabels(**RANK0))
    try:
        metrics.step(loss=1.5, samples=4)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        metrics.close()
    assert 'training_loss{gpu="0",node="node-a",rank="0",training_job="llm-7b",world_size="2"} 1.5' in text
    assert "training_step_duration_seconds_count{" in text
