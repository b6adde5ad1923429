"""The built-in handlers and TorchCheckpoints with real PyTorch (CPU): state restored exactly, lr changes that stick.

The plain-loop test at the end is what a user's script does: train, checkpoint every few
steps, poll; a rollback puts the weights, the optimizer and the scheduler back to the
checkpoint and the loop continues from its step, skipping the batches it was told to.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remediate.training import ControlOptions, TorchCheckpoints, TrainingControl
from remediate.training.files import JobPaths
from remediate.training.protocol import APPLIED
from tests.support.training import JOB, deliver, require, wait_for_ack

torch = require("torch")


def tiny(seed: int = 0) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def batch(index: int) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(index)
    x = torch.randn(8, 4, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def train_step(model: Any, optimizer: Any, scheduler: Any, index: int) -> float:
    x, y = batch(index)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return float(loss.detach())


def test_importing_the_library_does_not_import_torch() -> None:
    code = "import sys, remediate.training, remediate.actions.training; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --------------------------------------------------------------------------- checkpoints


def test_checkpoints_restore_model_optimizer_and_scheduler_exactly(tmp_path: Path) -> None:
    model, optimizer = tiny()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    store = TorchCheckpoints(tmp_path / "ckpt", model=model, optimizer=optimizer, scheduler=scheduler, writer=True)
    for i in range(5):
        train_step(model, optimizer, scheduler, i)
    info = store.save(5, 0.5)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    lr = optimizer.param_groups[0]["lr"]
    exp_avg = optimizer.state[model.weight]["exp_avg"].clone()
    for i in range(5, 9):
        train_step(model, optimizer, scheduler, i)
    assert not torch.equal(model.weight, weights["weight"])

    store.load(info)
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert torch.equal(optimizer.state[model.weight]["exp_avg"], exp_avg)
    assert scheduler.last_epoch == 5 and optimizer.param_groups[0]["lr"] == lr
    assert Path(info.path or "").name == "ckpt-000000005.pt"


def test_checkpoints_keep_the_last_k_and_always_the_newest_good_one(tmp_path: Path) -> None:
    model, optimizer = tiny()
    store = TorchCheckpoints(tmp_path, model=model, optimizer=optimizer, keep=2, good_loss_below=10.0, writer=True)
    store.save(10, 1.0)
    store.save(20, 2.0)
    store.save(30, float("nan"))
    store.save(40, 50.0)  # finite but above the threshold: not good
    assert [(c.step, c.good) for c in store.list()] == [(20, True), (30, False), (40, False)]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == [
        "ckpt-000000020.pt",
        "ckpt-000000030.pt",
        "ckpt-000000040.pt",
    ]
    assert math.isnan(store.get(30).loss or 0.0)  # type: ignore[union-attr]
    store.save(50, 3.0)
    assert [c.step for c in store.list()] == [40, 50]

    # A restarted job finds the same index on disk: the previous run's, to resume from (its own run has none yet).
    again = TorchCheckpoints(tmp_path, model=model, optimizer=optimizer, writer=True)
    assert [(c.step, c.good, c.loss) for c in again.previous()] == [(40, False, 50.0), (50, True, 3.0)]
    assert again.list() == []
    reader = TorchCheckpoints(tmp_path, model=model, optimizer=optimizer, writer=False)
    assert [c.step for c in reader.list()] == [40, 50]
    store.save(60, 1.0)
    assert [c.step for c in reader.list()] == [50, 60]


# --------------------------------------------------------------------------- scale_lr sticks


def _schedulers() -> dict[str, Callable[[Any], Any]]:
    lr_scheduler = torch.optim.lr_scheduler
    return {
        "lambda-warmup": lambda o: lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5)),
        "cosine": lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=30),
        "step": lambda o: lr_scheduler.StepLR(o, step_size=3, gamma=0.7),
        "sequential": lambda o: lr_scheduler.SequentialLR(
            o,
            [lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=4), lr_scheduler.CosineAnnealingLR(o, T_max=20)],
            milestones=[4],
        ),
    }


@pytest.mark.parametrize("name", sorted(_schedulers()))
def test_scale_lr_survives_the_next_scheduler_steps(tmp_path: Path, name: str) -> None:
    make = _schedulers()[name]
    runs = []
    for scale in (False, True):
        model, optimizer = tiny()
        scheduler = make(optimizer)
        control = TrainingControl(
            f"job-{scale}",
            root=tmp_path,
            optimizer=optimizer,
            scheduler=scheduler,
            options=ControlOptions(wake_signal=None),
        )
        lrs = []
        for step in range(1, 16):
            train_step(model, optimizer, scheduler, step)
            if scale and step == 6:
                command = deliver(tmp_path, f"job-{scale}", "scale_lr", {"factor": 0.5})
            control.poll(step)
            lrs.append(optimizer.param_groups[0]["lr"])
        runs.append(lrs)
        if scale:
            assert wait_for_ack(tmp_path, f"job-{scale}", command.id).status == APPLIED
    plain, scaled = runs
    assert scaled[:5] == plain[:5]
    for step, (a, b) in enumerate(zip(plain[5:], scaled[5:], strict=True), start=6):
        assert b == pytest.approx(a * 0.5, rel=1e-9), f"step {step}: {b} is not half of {a}"


@pytest.mark.parametrize("wrapper", ["sequential", "chained"])
def test_scale_lr_reaches_get_last_lr_and_every_wrapped_scheduler(tmp_path: Path, wrapper: str) -> None:
    """What the private attributes are for, read through torch's public API: `get_last_lr()` (what Hugging Face
    logs as the learning rate) shows the new lr at once, and the schedulers a SequentialLR or ChainedScheduler
    wraps have their `base_lrs` scaled (a closed-form step after a milestone would otherwise undo the scaling)."""
    lr_scheduler = torch.optim.lr_scheduler
    model, optimizer = tiny()
    inner = [lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=4), lr_scheduler.StepLR(optimizer, 3)]
    if wrapper == "sequential":
        scheduler = lr_scheduler.SequentialLR(optimizer, inner, milestones=[4])
    else:
        scheduler = lr_scheduler.ChainedScheduler(inner, optimizer=optimizer)
    for step in range(1, 3):
        train_step(model, optimizer, scheduler, step)
    bases = [list(s.base_lrs) for s in inner]
    control = TrainingControl(
        JOB,
        root=tmp_path,
        optimizer=optimizer,
        scheduler=scheduler,
        options=ControlOptions(wake_signal=None),
    )
    control.poll(2)  # the first poll registers the job: its inbox exists from then on
    command = deliver(tmp_path, JOB, "scale_lr", {"factor": 0.5})
    control.poll(3)
    assert wait_for_ack(tmp_path, JOB, command.id).status == APPLIED
    lr = optimizer.param_groups[0]["lr"]
    assert scheduler.get_last_lr() == [lr]
    for scheduler_inside, before in zip(inner, bases, strict=True):
        assert scheduler_inside.base_lrs == pytest.approx([b * 0.5 for b in before], rel=1e-12)


# --------------------------------------------------------------------------- a plain training loop


def test_a_plain_loop_rolls_back_resumes_from_the_checkpoint_step_and_skips_batches(tmp_path: Path) -> None:
    model, optimizer = tiny()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    store = TorchCheckpoints(
        tmp_path / "ckpt", model=model, optimizer=optimizer, scheduler=scheduler, keep=10, writer=True
    )
    control = TrainingControl(
        JOB,
        root=tmp_path,
        checkpoints=store,
        optimizer=optimizer,
        scheduler=scheduler,
        options=ControlOptions(wake_signal=None),
    )
    saved: dict[int, dict[str, Any]] = {}
    trained: list[tuple[int, int]] = []  # (step after the update, data index)
    step, data_index, command = 0, 0, None
    while step < 40:
        data_index += 1
        if control.skip_batch():
            continue
        loss = train_step(model, optimizer, scheduler, data_index)
        step += 1
        trained.append((step, data_index))
        if step % 5 == 0:
            store.save(step, loss)
            saved[step] = {k: v.clone() for k, v in model.state_dict().items()}
        if step == 23 and command is None:
            command = deliver(tmp_path, JOB, "rollback", {"checkpoint": "latest", "min_steps_back": 5,
                                                          "skip_batches": 4})  # fmt: skip
        new_step = control.poll(step, loss)
        if new_step != step:
            assert new_step == 15  # the newest checkpoint at least 5 steps before step 23
            assert all(torch.equal(v, saved[15][k]) for k, v in model.state_dict().items())
            step = new_step
    assert command is not None
    ack = wait_for_ack(tmp_path, JOB, command.id)
    assert ack.status == APPLIED and (ack.step_before, ack.step_after) == (23, 15)
    assert ack.result["discarded_checkpoints"] == [20]
    # After the rollback the loop trained step 16 on data 28: data 24..27 were skipped.
    resumed = trained[trained.index((23, 23)) + 1]
    assert resumed == (16, 28)
    assert control.batches_skipped == 4
    assert [c.step for c in store.list()] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert JobPaths(tmp_path, JOB).read_registration().checkpoints[-1].step == 40


def test_an_index_of_an_older_library_is_a_lineage_a_job_can_resume(tmp_path: Path) -> None:
    """Entries without a run are one lineage of their own; resuming one continues it."""
    from remediate.training import CallableCheckpoints
    from remediate.training.files import atomic_write_json

    older = [{"step": s, "loss": 2.0, "good": True, "path": f"/ckpt/{s}", "saved_at": 1.0} for s in (100, 200, 300)]
    atomic_write_json(tmp_path / "index.json", {"version": 1, "checkpoints": older})
    loaded: list[int] = []
    store = CallableCheckpoints(tmp_path, save=lambda s: f"/ckpt/{s}", load=lambda i: loaded.append(i.step),
                                keep=3, writer=True)  # fmt: skip
    assert store.list() == [] and [c.step for c in store.previous()] == [100, 200, 300]

    info = store.resume()  # continues the older lineage at its newest checkpoint
    assert info is not None and info.step == 300 and loaded == [300]
    store.save(400, 2.0)
    assert [(c.step, c.run) for c in store.list()] == [(200, None), (300, None), (400, store.run_id)]

    # A reader (another rank) follows the run the index names as current.
    reader = CallableCheckpoints(tmp_path, save=lambda s: None, load=lambda i: None, writer=False)
    assert [c.step for c in reader.list()] == [200, 300, 400]

    # A rollback to step 200 and a restart from scratch afterwards: the new run owns nothing of the old ones.
    store.load(store.get(200))  # type: ignore[arg-type]
    assert [c.step for c in store.list()] == [200, 400]  # the older run's 300 is past the step it continues from
    assert [c.step for c in store.discard_after(200)] == [400]
    fresh = CallableCheckpoints(tmp_path, save=lambda s: f"/ckpt/{s}", load=lambda i: None, keep=3, writer=True)
    fresh.save(50, 2.0)
    assert [c.step for c in fresh.list()] == [50] and fresh.get(200) is None
    assert [c.step for c in fresh.all()] == [50, 200, 300]  # the others fill the slots it does not use yet
