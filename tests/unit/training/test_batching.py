"""`Batching`: reduce_batch_size keeps the effective batch through gradient accumulation; set_dataloader_workers.

Commands are delivered as remediate writes them and applied by a real `TrainingControl` between steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import remediate.training.inbox as inbox_module
from remediate.training import ControlOptions, TrainingControl
from remediate.training.batching import Batching
from remediate.training.commands import problems
from remediate.training.files import JobPaths
from remediate.training.protocol import APPLIED, REJECTED
from tests.support.training import JOB, deliver, wait_for_ack


class Loader:
    """What set_dataloader_workers touches on a torch DataLoader: its num_workers."""

    def __init__(self, workers: int) -> None:
        self.num_workers = workers


def settle(control: TrainingControl, step: int) -> None:
    """Poll past the racy window after the inbox changed (inbox.RACY_NS), so the command is seen."""
    time.sleep(inbox_module.RACY_NS / 1e9 + 0.01)
    control.poll(step)
    control.poll(step)


def job(root: Path, batching: Batching) -> TrainingControl:
    return TrainingControl(JOB, root=root, batching=batching, options=ControlOptions(wake_signal=None)).register()


def send(root: Path, control: TrainingControl, kind: str, params: dict[str, Any], step: int = 5) -> Any:
    command = deliver(root, JOB, kind, params)
    settle(control, step)
    return wait_for_ack(root, JOB, command.id)


@pytest.mark.parametrize(
    ("micro", "accumulation", "params", "after"),
    [
        (32, 1, {"factor": 0.5}, (16, 2)),
        (32, 2, {"to": 8}, (8, 8)),
        (24, 1, {"factor": 0.5}, (12, 2)),
        (30, 1, {"to": 16}, (15, 2)),  # 16 does not divide 30: the largest divisor below it
        (48, 3, {"factor": 0.3}, (12, 12)),  # 14 asked; 144 = 12 x 12
    ],
)
def test_reduce_batch_size_keeps_the_effective_batch(
    root: Path, micro: int, accumulation: int, params: dict[str, Any], after: tuple[int, int]
) -> None:
    changes: list[str] = []
    batching = Batching(micro, accumulation, on_change=lambda b, name: changes.append(name))
    control = job(root, batching)
    ack = send(root, control, "reduce_batch_size", params)
    assert ack.status == APPLIED, ack.detail
    assert (batching.micro_batch_size, batching.accumulation_steps) == after
    assert batching.samples_per_step == micro * accumulation
    assert ack.result["micro_batch_size_before"] == micro and ack.result["micro_batch_size_after"] == after[0]
    assert ack.result["accumulation_steps_after"] == after[1]
    assert ack.result["effective_batch_size_before"] == ack.result["effective_batch_size_after"] == micro * accumulation
    assert f"effective batch stays {micro * accumulation}" in ack.detail
    assert changes == ["reduce_batch_size"] and batching.generation == 1
    control.close()


def test_reduce_batch_size_that_cannot_keep_the_effective_batch_is_rejected_and_changes_nothing(root: Path) -> None:
    batching = Batching(7, 1, min_micro_batch_size=2)  # 7 is prime: no micro-batch from 2 to 3 divides it
    control = job(root, batching)
    ack = send(root, control, "reduce_batch_size", {"to": 3})
    assert ack.status == REJECTED and "the effective batch would change" in ack.detail
    not_smaller = send(root, control, "reduce_batch_size", {"to": 7}, step=6)
    assert not_smaller.status == REJECTED and "nothing to reduce" in not_smaller.detail
    below_min = send(root, control, "reduce_batch_size", {"to": 1}, step=7)
    assert below_min.status == REJECTED and "param 'to': must be >= 2" in below_min.detail
    tiny = send(root, control, "reduce_batch_size", {"factor": 0.1}, step=8)
    assert tiny.status == REJECTED and "would be 0, below min_micro_batch_size 2" in tiny.detail
    assert (batching.micro_batch_size, batching.accumulation_steps, batching.generation) == (7, 1, 0)
    control.close()


def test_set_dataloader_workers_changes_the_attached_loaders(root: Path) -> None:
    batching = Batching(16, dataloader_workers=8, max_dataloader_workers=8)
    loaders = [Loader(8), Loader(8)]
    for loader in loaders:
        batching.attach_loader(loader)
    control = job(root, batching)
    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert declared["set_dataloader_workers"]["properties"]["workers"]["maximum"] == 8
    ack = send(root, control, "set_dataloader_workers", {"workers": 2})
    assert ack.status == APPLIED
    assert ack.result == {
        "workers_before": 8,
        "workers_after": 2,
        "loaders_updated": 2,
        "applies_at": "the loop's next optimizer step",
    }
    assert [loader.num_workers for loader in loaders] == [2, 2] and batching.dataloader_workers == 2
    too_many = send(root, control, "set_dataloader_workers", {"workers": 9}, step=6)
    assert too_many.status == REJECTED and batching.dataloader_workers == 2
    halved = send(root, control, "set_dataloader_workers", {"factor": 0.5}, step=7)
    assert halved.status == APPLIED and halved.result["workers_after"] == 1
    assert [loader.num_workers for loader in loaders] == [1, 1]
    in_main_process = send(root, control, "set_dataloader_workers", {"factor": 0.9}, step=8)
    assert in_main_process.status == APPLIED and batching.dataloader_workers == 0
    no_change = send(root, control, "set_dataloader_workers", {"factor": 0.5}, step=9)
    assert no_change.status == REJECTED and "nothing to reduce" in no_change.detail
    assert batching.generation == 3
    control.close()


def test_without_dataloader_workers_the_job_does_not_declare_the_command(root: Path) -> None:
    control = job(root, Batching(16))
    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert "reduce_batch_size" in declared and "set_dataloader_workers" not in declared
    assert problems(declared["reduce_batch_size"], {"factor": 0.5}) == []
    control.close()


def test_the_batch_sampler_follows_the_current_micro_batch() -> None:
    batching = Batching(4)
    sampler = batching.batch_sampler(range(10))
    assert len(sampler) == 3
    batches = iter(sampler)
    assert next(batches) == [0, 1, 2, 3]
    batching.micro_batch_size = 2  # what reduce_batch_size does, between two batches
    assert list(batches) == [[4, 5], [6, 7], [8, 9]]
    assert len(batching.batch_sampler(range(9), drop_last=True)) == 4
    with pytest.raises(ValueError):
        Batching(0)
