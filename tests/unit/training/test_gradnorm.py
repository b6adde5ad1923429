"""`StepMetrics`' gradient norm (`training_grad_norm`): a tensor is read (a GPU sync) at most once per sync
interval, the largest norm between two reads is exported, rank 0 only, from the first norm the job gives."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from remediate.training.gradnorm import GradNormError
from remediate.training.metrics import RankLabels, StepMetrics
from tests.support.training import require

RANK0 = {"training_job": "llm-7b", "rank": "0", "world_size": "2", "node": "node-a", "gpu": "0"}
RANK1 = {**RANK0, "rank": "1", "node": "node-b", "gpu": "1"}
READS = ("item", "__float__", "__bool__", "tolist")
"""What reads a tensor's value on the host: on a GPU tensor each one waits for the device."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def count_host_reads(monkeypatch: pytest.MonkeyPatch, torch: Any) -> list[str]:
    """Every read of a tensor's value on the host from now on, by name."""
    reads: list[str] = []
    for name in READS:
        real = getattr(torch.Tensor, name)

        def counting(self: Any, *args: Any, _real: Any = real, _name: str = name) -> Any:
            reads.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return reads


def exported_norm(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("training_grad_norm", RANK0)


def test_clip_grad_norm_s_tensor_is_read_once_per_interval_and_the_largest_norm_between_reads_is_exported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = require("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics(
        "llm-7b", registry=registry, labels=RankLabels(**RANK0), clock=clock, grad_norm_sync_every_s=1.0
    )
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    reads = count_host_reads(monkeypatch, torch)
    exported: list[float | None] = []
    norms: list[float] = []
    for step in range(96):  # 1/8 s a step: 8 steps per interval
        clock.now += 0.125
        model.zero_grad()
        scale = 50.0 if step == 11 else 1.0  # one bad batch between two reads
        torch.nn.functional.mse_loss(model(x * scale), y).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        metrics.step(grad_norm=norm)
        norms.append(torch._C.TensorBase.item(norm))  # the test's own read, not counted
        exported.append(exported_norm(registry))
    monkeypatch.undo()

    assert len(reads) == 12, reads  # one read per 8 steps, not one per step
    assert set(reads) == {"item"}
    assert exported[0] == pytest.approx(norms[0])  # the first norm is read at once: the series exists
    # The read after the bad batch (steps 9-16 kept since the read at step 8) exports its norm, not step 16's.
    assert exported[15] == exported[8]
    assert exported[16] == pytest.approx(max(norms[9:17]))
    assert exported[16] == pytest.approx(norms[11])
    assert norms[11] > 10 * max(norms[8], norms[16])


def test_a_float_norm_is_kept_the_same_way_and_a_nan_step_makes_the_read_nan() -> None:
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics(
        "llm-7b", registry=registry, labels=RankLabels(**RANK0), clock=clock, grad_norm_sync_every_s=5.0
    )
    assert exported_norm(registry) is None  # no norm given yet: no series (a job that gives none exports none)
    metrics.observe_grad_norm(0.5)
    assert exported_norm(registry) == 0.5
    for value in (0.4, 3.0, 0.6):
        clock.now += 1
        metrics.observe_grad_norm(value)
    assert exported_norm(registry) == 0.5  # 3 s since the read: kept, not exported yet
    clock.now += 2
    metrics.observe_grad_norm(0.3)
    assert exported_norm(registry) == 3.0
    clock.now += 1
    metrics.observe_grad_norm(float("nan"))
    metrics.observe_grad_norm(0.2)
    metrics.flush_grad_norm()
    assert math.isnan(exported_norm(registry) or 0.0)


def test_other_ranks_neither_export_nor_read_the_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = require("torch")
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics("llm-7b", registry=registry, labels=RankLabels(**RANK1), clock=clock)
    reads = count_host_reads(monkeypatch, torch)
    for _ in range(20):
        clock.now += 10
        metrics.step(grad_norm=torch.tensor(2.0))
    monkeypatch.undo()
    assert reads == []
    names = {s.name for family in registry.collect() for s in family.samples}
    assert "training_grad_norm" not in names


@pytest.mark.parametrize("value", ["1.0", True, [1.0, 2.0]])
def test_a_value_that_is_not_one_number_is_refused(value: object) -> None:
    metrics = StepMetrics("llm-7b", registry=CollectorRegistry(), labels=RankLabels(**RANK0))
    with pytest.raises(GradNormError, match="grad_norm"):
        metrics.observe_grad_norm(value)


def test_a_tensor_of_per_parameter_norms_is_refused_without_reading_it(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = require("torch")
    metrics = StepMetrics("llm-7b", registry=CollectorRegistry(), labels=RankLabels(**RANK0))
    reads = count_host_reads(monkeypatch, torch)
    with pytest.raises(GradNormError, match=r"shape \(3,\)"):
        metrics.observe_grad_norm(torch.ones(3))
    monkeypatch.undo()
    assert reads == []


def test_tensors_and_floats_mixed_keep_the_largest_and_a_nan_of_either_kind() -> None:
    torch = require("torch")
    registry, clock = CollectorRegistry(), Clock()
    metrics = StepMetrics("llm-7b", registry=registry, labels=RankLabels(**RANK0), clock=clock)
    metrics.observe_grad_norm(0.1)  # read at once
    for value in (torch.tensor(2.0), 3.0, torch.tensor(1.0)):
        metrics.observe_grad_norm(value)
    metrics.flush_grad_norm()
    assert exported_norm(registry) == 3.0
    for value in (4.0, torch.tensor(float("nan")), 1.0):
        metrics.observe_grad_norm(value)
    metrics.flush_grad_norm()
    assert math.isnan(exported_norm(registry) or 0.0)
    for value in (torch.tensor(1.0), float("nan"), torch.tensor(5.0)):
        metrics.observe_grad_norm(value)
    metrics.flush_grad_norm()
    assert math.isnan(exported_norm(registry) or 0.0)
