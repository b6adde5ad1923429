"""The fail-slow rules and the per-rank step metrics they read: promtool's unit tests see
both alerts fire with the straggler's node and GPU, and a real Prometheus scraping `StepMetrics` keeps the labels
the rules group by (`training_job`, not `job`). (promtool itself runs on every rule file in test_gpu_rules.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from remediate.training.metrics import RankLabels, StepMetrics
from tests.support.realsystems import Prometheus, free_port
from tests.support.rules import RULES_DIR, expected_alerts, rules_of
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

ALERTS = {"TrainingStragglerRank", "TrainingStepTimeRegression"}


def test_the_unit_tests_see_both_alerts_fire_and_the_straggler_names_its_rank_node_and_gpu() -> None:
    rules = {r["alert"]: r for r in rules_of("training-failslow")}
    assert set(rules) == ALERTS
    assert all("training_step_duration_seconds_sum" in r["expr"] for r in rules.values())
    fired = expected_alerts("training-failslow")
    assert {name for name, _, _ in fired} == ALERTS
    (straggler,) = [labels for name, labels, _ in fired if name == "TrainingStragglerRank"]
    assert {"training_job", "rank", "node", "gpu", "control_node"} <= set(straggler)


class SteppingRank:
    """One rank's StepMetrics on its own port, stepping every 50 ms of wall time with `step_seconds` on its clock
    (a straggler without waiting for one)."""

    def __init__(self, rank: int, node: str, step_seconds: float) -> None:
        self.port, self.step_seconds, self.now = free_port(), step_seconds, 0.0
        environ = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "NODE_NAME": node}
        self.metrics = StepMetrics(
            "llm-7b",
            registry=CollectorRegistry(),
            port=self.port,
            addr="127.0.0.1",
            labels=RankLabels.detect("llm-7b", environ),
            clock=lambda: self.now,
        )

    def step(self) -> None:
        self.now += self.step_seconds
        self.metrics.step(loss=1.0, samples=8)


@pytest.fixture
def ranks() -> Iterator[list[SteppingRank]]:
    ranks = [SteppingRank(0, "node-a", 1.0), SteppingRank(1, "node-b", 2.0)]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.05):
            for rank in ranks:
                rank.step()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield ranks
    finally:
        stop.set()
        thread.join()
        for rank in ranks:
            rank.metrics.close()


def test_a_real_prometheus_scrape_keeps_training_job_and_the_straggler_expression_names_the_slow_rank(
    tmp_path: Path, ranks: list[SteppingRank]
) -> None:
    expr = {r["alert"]: r["expr"] for r in rules_of("training-failslow")}["TrainingStragglerRank"]
    with Prometheus(
        tmp_path,
        scrape_targets=[f"127.0.0.1:{rank.port}" for rank in ranks],
        rule_files=[RULES_DIR / "training-failslow.rules.yml"],  # promtool check config loads it
        alertmanager_url=f"http://127.0.0.1:{free_port()}",  # nothing listens; `for: 5m` fires nothing here
    ) as prom:
        (series,) = wait_until(lambda: prom.query(expr), 60, message="the straggler expression found no rank")
        (loss,) = wait_until(lambda: prom.query("training_loss"), 30, message="no training_loss")
    labels = series["metric"]
    assert labels["job"] == "test"  # the scrape's own job label: the job's identity is training_job
    assert {k: labels[k] for k in ("training_job", "rank", "world_size", "node", "gpu")} == {
        "training_job": "llm-7b",
        "rank": "1",
        "world_size": "2",
        "node": "node-b",
        "gpu": "0",
    }
    assert labels["control_node"] == "node-a"  # rank 0's node: where the job registered with remediate
    assert float(series["value"][1]) == pytest.approx(2.0 / 1.5, rel=0.05)  # 2 s over the median of 1 s and 2 s
    assert loss["metric"]["rank"] == "0"  # rank 0 alone exports the loss
