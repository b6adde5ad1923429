"""RemediateTrainerCallback inside a real Hugging Face Trainer (CPU, a tiny local model and data, no downloads).

As in the Lightning test, an "agent" callback delivers a rollback and an lr cut at step 12
and an observer behind ours records the model and optimizer after each step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediate.actions.training_command import TrainingCommandAction
from remediate.training import ControlOptions
from remediate.training.files import JobPaths
from remediate.training.protocol import APPLIED
from tests.support.training import deliver, halved_at_the_next_epoch, require, wait_for_ack

torch = require("torch")
transformers = require("transformers")
require("accelerate")

JOB = "hf-job"


class TinyRegressor(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
        prediction = self.layer(x)
        out = {"logits": prediction}
        if labels is not None:
            out["loss"] = torch.nn.functional.mse_loss(prediction, labels)
        return out


class Rows(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "labels": self.x[i].sum().unsqueeze(0)}


class Agent(transformers.TrainerCallback):  # type: ignore[misc]
    """Delivers `commands` (kind, params) once at step `at`, as remediate would."""

    def __init__(self, root: Path, at: int, *commands: tuple[str, dict[str, Any]]) -> None:
        self.root, self.at, self.commands = root, at, commands
        self.sent: list[str] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.at and not self.sent:
            self.sent.extend(deliver(self.root, JOB, kind, params).id for kind, params in self.commands)


class Observer(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.after: dict[int, dict[str, Any]] = {}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.after[state.global_step] = {
            "weight": kwargs["model"].layer.weight.detach().clone(),
            "lr": kwargs["optimizer"].param_groups[0]["lr"],
            "base_lrs": list(kwargs["lr_scheduler"].base_lrs),
        }


def ours(tmp_path: Path, **kwargs: Any) -> Any:
    """The callback under test, on tmp_path's control root and checkpoint directory."""
    from remediate.training.hf import RemediateTrainerCallback

    return RemediateTrainerCallback(
        JOB,
        root=tmp_path / "control",
        checkpoint_dir=tmp_path / "ckpt",
        options=ControlOptions(wake_signal=None),
        **kwargs,
    )


def train(tmp_path: Path, max_steps: int, rows: int, callbacks: list[Any], **arguments: Any) -> Any:
    """A CPU Trainer of `max_steps` (batches of 8, lr 0.01) with `callbacks` over `rows` seeded rows; the trainer."""
    torch.manual_seed(0)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=max_steps,
                                          per_device_train_batch_size=8, learning_rate=0.01, save_strategy="no",
                                          report_to="none", use_cpu=True, remove_unused_columns=False,
                                          disable_tqdm=True, dataloader_num_workers=0, **arguments)  # fmt: skip
    trainer = transformers.Trainer(model=TinyRegressor(), args=args, train_dataset=Rows(rows), callbacks=callbacks)
    trainer.train()
    return trainer


def test_the_hugging_face_callback_rolls_back_skips_and_cuts_the_lr(tmp_path: Path) -> None:
    root, callback, observer = tmp_path / "control", ours(tmp_path, every_n_steps=4, keep=10), Observer()
    rollback = {"checkpoint": "latest_good", "min_steps_back": 4, "skip_batches": 3}
    agent = Agent(root, 12, ("rollback", rollback), ("scale_lr", {"factor": 0.5}))
    trainer = train(tmp_path, 24, 512, [agent, callback, observer], lr_scheduler_type="linear", logging_steps=1)

    rollback = wait_for_ack(root, JOB, agent.sent[0])
    scale = wait_for_ack(root, JOB, agent.sent[1])
    assert rollback.status == APPLIED and scale.status == APPLIED
    assert (rollback.step_before, rollback.step_after) == (12, 8)
    assert rollback.job["framework"] == "transformers"
    assert rollback.result["checkpoint"]["good"] is True  # the loss the Trainer logged at step 7

    saved = torch.load(tmp_path / "ckpt" / "ckpt-000000008.pt", weights_only=True)
    after = observer.after
    assert torch.equal(after[12]["weight"], saved["model"]["layer.weight"])
    assert all(torch.equal(after[s]["weight"], after[12]["weight"]) for s in (13, 14, 15))
    assert not torch.equal(after[16]["weight"], after[12]["weight"])
    assert callback.control.batches_skipped == 3
    # The linear decay restarts from step 8's position at half the base lr, and keeps decaying from there.
    epoch = saved["schedulers"][0]["last_epoch"]
    # (the Trainer makes two param groups: with and without weight decay)
    assert scale.result["lr_before"] == [pytest.approx(0.01 * (24 - epoch) / 24)] * 2
    assert after[12]["base_lrs"] == [0.005, 0.005]
    assert after[12]["lr"] == pytest.approx(0.005 * (24 - epoch) / 24)
    assert after[20]["lr"] == pytest.approx(0.005 * (24 - epoch - 8) / 24)
    assert trainer.state.global_step == 24
    assert JobPaths(root, JOB).read_registration().closed_at is not None


def test_the_hugging_face_callback_serves_skip_batches(tmp_path: Path) -> None:
    root, callback, observer = tmp_path / "control", ours(tmp_path, every_n_steps=None), Observer()
    agent = Agent(root, 6, ("skip_batches", {"batches": 2}))
    train(tmp_path, 10, 256, [agent, callback, observer])

    ack = wait_for_ack(root, JOB, agent.sent[0])
    assert ack.status == APPLIED and ack.result["batches_skipped"] == 2
    after = observer.after
    assert all(torch.equal(after[s]["weight"], after[6]["weight"]) for s in (7, 8))  # two batches dropped
    assert not torch.equal(after[9]["weight"], after[6]["weight"])
    assert callback.control.batches_skipped == 2
    assert "skip_batches" in (JobPaths(root, JOB).read_registration().commands or {})


def test_the_hugging_face_callback_neither_declares_nor_applies_a_batch_size_it_cannot_change(tmp_path: Path) -> None:
    """As for Lightning: the Trainer fixes its loader and accumulation once per train()."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=32)
    callback = ours(tmp_path, batching=batching)
    callback.control.register()
    assert "reduce_batch_size" not in (JobPaths(root, JOB).read_registration().commands or {})
    command = deliver(root, JOB, "reduce_batch_size", {"factor": 0.5})
    callback.control.poll(1)
    ack = wait_for_ack(root, JOB, command.id)
    callback.control.close()
    assert ack.status == "rejected"
    assert ack.detail.startswith("'reduce_batch_size' is not supported by this integration (transformers): ")
    assert (batching.micro_batch_size, batching.accumulation_steps) == (32, 1)


class CountingRegressor(TinyRegressor):
    """Records the rows of every forward (one per micro-batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
        self.rows.append(len(x))
        return super().forward(x, labels)


class StepSamples(transformers.TrainerCallback):  # type: ignore[misc]
    """(epoch, micro-batches, samples) behind each optimizer step; (batch_size, workers, accumulation) per epoch."""

    def __init__(self, model: CountingRegressor) -> None:
        self.model = model
        self.per_step: list[tuple[int, int, int]] = []
        self.epochs: list[tuple[int, int, int]] = []

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = kwargs["train_dataloader"]
        workers = loader.base_dataloader.num_workers  # accelerate's wrapper forwards reads only: the torch loader's
        self.epochs.append((loader.batch_sampler.batch_size, workers, args.gradient_accumulation_steps))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.per_step.append((len(self.epochs) - 1, len(self.model.rows), sum(self.model.rows)))
        self.model.rows.clear()


def train_counting(tmp_path: Path, callbacks: list[Any], batching: Any, epochs: int, **arguments: Any) -> Any:
    """Trains CountingRegressor over 64 rows for `epochs` epochs as `batching` says; the StepSamples counter."""
    torch.manual_seed(0)
    model = CountingRegressor()
    counter = StepSamples(model)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=epochs,
                                          per_device_train_batch_size=batching.micro_batch_size,
                                          gradient_accumulation_steps=batching.accumulation_steps,
                                          dataloader_num_workers=batching.dataloader_workers or 0,
                                          learning_rate=0.01, save_strategy="no", report_to="none", use_cpu=True,
                                          remove_unused_columns=False, disable_tqdm=True, **arguments)  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows(64), callbacks=[*callbacks, counter])
    trainer.train()
    return counter, trainer


def test_the_hugging_face_callback_halves_the_micro_batch_at_the_next_epoch_keeping_the_effective_batch(
    tmp_path: Path,
) -> None:
    """reduce_batch_size and set_dataloader_workers were refused for HF jobs."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=16, dataloader_workers=1, max_dataloader_workers=4)
    agent = Agent(root, 2, ("reduce_batch_size", {"factor": 0.5}), ("set_dataloader_workers", {"workers": 0}))
    callback = ours(tmp_path, every_n_steps=None, batching=batching)
    counter, trainer = train_counting(tmp_path, [agent, callback], batching, epochs=3)

    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert {"reduce_batch_size", "set_dataloader_workers"} <= set(declared)
    _, workers = halved_at_the_next_epoch(root, JOB, agent.sent, effective=16)
    assert (workers.result["workers_before"], workers.result["workers_after"]) == (1, 0)
    assert counter.epochs == [(16, 1, 1), (8, 0, 2), (8, 0, 2)]
    assert [(e, b) for e, b, _ in counter.per_step] == [(0, 1)] * 4 + [(1, 2)] * 4 + [(2, 2)] * 4
    assert {samples for _, _, samples in counter.per_step} == {16}  # the effective batch, step by step
    assert trainer.state.global_step == 12


def test_the_hugging_face_callback_refuses_an_accumulation_that_does_not_divide_the_epoch(tmp_path: Path) -> None:
    """The Trainer steps at the epoch's micro-batch count it took at train() start (4 here): 16 x 1 -> 2 x 8
    would step after 4 of 8 micro-batches; refused, nothing changed."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=16)
    agent = Agent(root, 2, ("reduce_batch_size", {"to": 2}))
    counter, _ = train_counting(tmp_path, [agent, ours(tmp_path, every_n_steps=None, batching=batching)], batching, 2)

    ack = wait_for_ack(root, JOB, agent.sent[0])
    assert ack.status == "rejected" and "not a multiple of 8" in ack.detail, ack.detail
    assert counter.epochs == [(16, 0, 1), (16, 0, 1)]
    assert {samples for _, _, samples in counter.per_step} == {16}


def test_the_hugging_face_callback_refuses_both_batching_commands_when_the_epoch_is_not_whole_updates(
    tmp_path: Path,
) -> None:
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=24, dataloader_workers=0, max_dataloader_workers=2)
    agent = Agent(root, 1, ("reduce_batch_size", {"factor": 0.5}), ("set_dataloader_workers", {"workers": 1}))
    train_counting(tmp_path, [agent, ours(tmp_path, every_n_steps=None, batching=batching)], batching, 2)

    registration = JobPaths(root, JOB).read_registration()
    assert not {"reduce_batch_size", "set_dataloader_workers"} & set(registration.commands or {})
    # Refused at plan time, saying why and where to change it (it said only "does not declare command").
    action = TrainingCommandAction(root, ("training_job",))
    why = action.refusal(action.validate({"command": "reduce_batch_size", "params": {"factor": 0.5}}), registration)
    assert why is not None and why.startswith("training job 'hf-job' does not declare command 'reduce_batch_size'")
    assert (
        "its transformers integration cannot apply it: 64 rows per epoch are not a multiple of the effective batch "
        "24: the Trainer would cut the epoch's last update step at the boundary it counted at train() start; change "
        'that in the job (docs/training-protocol.md, "Batch size and data loader workers")'
    ) in why, why
    for sent in agent.sent:
        ack = wait_for_ack(root, JOB, sent)
        assert (
            ack.status == "rejected" and "64 rows per epoch are not a multiple of the effective batch 24" in ack.detail
        )
    assert (batching.micro_batch_size, batching.accumulation_steps, batching.dataloader_workers) == (24, 1, 0)


def test_the_hugging_face_callback_starts_workers_in_a_loader_built_without_any(tmp_path: Path) -> None:
    """A loader built with 0 workers has no prefetch_factor (None); given workers it must get torch's default,
    or its next iterator fails ("'<=' not supported between 'NoneType' and 'int'") and the training with it."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=16, dataloader_workers=0, max_dataloader_workers=2)
    agent = Agent(root, 2, ("set_dataloader_workers", {"workers": 1}))
    counter, trainer = train_counting(
        tmp_path, [agent, ours(tmp_path, every_n_steps=None, batching=batching)], batching, 2
    )

    ack = wait_for_ack(root, JOB, agent.sent[0])
    assert ack.status == APPLIED and (ack.result["workers_before"], ack.result["workers_after"]) == (0, 1)
    assert counter.epochs == [(16, 0, 1), (16, 1, 1)]
    assert trainer.state.global_step == 8


class PoisonedRows(Rows):
    """Rows whose labels are multiplied by `factor` (NaN: the loss is NaN, and after the update so are the
    weights) for the optimizer step `step` of batches of 8 read in order."""

    def __init__(self, n: int, step: int, factor: float) -> None:
        super().__init__(n)
        self.rows, self.factor = range((step - 1) * 8, step * 8), factor

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = super().__getitem__(i)
        return {**row, "labels": row["labels"] * self.factor} if i in self.rows else row


def train_poisoned(tmp_path: Path, callbacks: list[Any], rows: Rows, max_steps: int, **arguments: Any) -> Any:
    torch.manual_seed(0)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=max_steps,
                                          per_device_train_batch_size=8, learning_rate=0.01, save_strategy="no",
                                          report_to="none", use_cpu=True, remove_unused_columns=False,
                                          disable_tqdm=True, dataloader_num_workers=0, logging_steps=1,
                                          train_sampling_strategy="sequential", **arguments)  # fmt: skip
    trainer = transformers.Trainer(model=TinyRegressor(), args=args, train_dataset=rows, callbacks=callbacks)
    trainer.train()
    return trainer


def _logged_losses(trainer: Any) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}


def test_a_checkpoint_of_nan_weights_is_never_good_under_the_trainers_default_nan_filter(tmp_path: Path) -> None:
    """The field case: with logging_nan_inf_filter=True (the default) the Trainer logs a finite loss for a NaN
    step (0 right after a log), the callback took it for the checkpoint's, marked checkpoints of NaN weights good,
    and the loss-nan ladder's rollback "succeeded" by restoring NaN weights."""
    import math

    root, callback = tmp_path / "control", ours(tmp_path, every_n_steps=2, keep=10)
    index: dict[int, Any] = {}
    weights_finite: dict[int, bool] = {}

    class LossNanLadder(Agent):
        """At step 11, what remediate's loss-nan ladder does: roll back to the newest good checkpoint."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == self.at and not self.sent:
                index.update({c.step: c for c in callback.checkpoints.list()})
                for c in index.values():
                    saved = torch.load(c.path, weights_only=True)["model"]["layer.weight"]
                    weights_finite[c.step] = bool(torch.isfinite(saved).all())
            super().on_step_end(args, state, control, **kwargs)

    ladder = LossNanLadder(root, 11, ("rollback", {"checkpoint": "latest_good", "min_steps_back": 0}))
    observer = Observer()
    trainer = train_poisoned(tmp_path, [ladder, callback, observer], PoisonedRows(512, 5, math.nan), 14)

    logged = _logged_losses(trainer)
    assert all(math.isfinite(logged[s]) for s in range(5, 12)), logged  # what the filter made of the NaN steps
    assert weights_finite == {2: True, 4: True, 6: False, 8: False, 10: False}
    assert [s for s in sorted(index) if index[s].good] == [2, 4]
    assert all(math.isnan(index[s].loss) for s in (6, 8, 10)), index  # each its own step's loss
    ack = wait_for_ack(root, JOB, ladder.sent[0])
    assert ack.status == APPLIED and ack.step_after == 4, ack.detail
    restored = observer.after[11]["weight"]  # the rollback runs in our on_step_end, before the observer's
    assert torch.isfinite(restored).all()
    saved = torch.load(tmp_path / "ckpt" / "ckpt-000000004.pt", weights_only=True)
    assert torch.equal(restored, saved["model"]["layer.weight"])


def test_without_the_nan_filter_a_checkpoint_is_judged_by_the_loss_of_its_own_step(tmp_path: Path) -> None:
    """With logging_nan_inf_filter=False a checkpoint took the loss logged at the step before it (the Trainer logs
    a step after its on_step_end): a checkpoint saved at a spike was good by the loss before the spike."""
    callback = ours(tmp_path, every_n_steps=2, keep=10)
    trainer = train_poisoned(tmp_path, [callback], PoisonedRows(512, 6, 1000.0), 10, logging_nan_inf_filter=False)

    logged = _logged_losses(trainer)
    index = {c.step: c for c in callback.checkpoints.list()}
    assert sorted(index) == [2, 4, 6, 8, 10]
    for step, info in index.items():
        assert info.loss == pytest.approx(logged[step], rel=1e-5), (step, info, logged)
    assert logged[6] > 100 * logged[5]  # the spike is step 6's own
    assert [s for s in sorted(index) if index[s].good] == [2, 4, 8, 10]


def test_the_grad_norm_callback_exports_the_norm_the_trainer_logs(tmp_path: Path) -> None:
    from dataclasses import asdict

    from prometheus_client import CollectorRegistry

    from remediate.training.hf import GradNormLogCallback
    from remediate.training.metrics import RankLabels, StepMetrics

    registry, labels = CollectorRegistry(), RankLabels(training_job=JOB, rank="0", world_size="1", node="n", gpu="")
    metrics = StepMetrics(JOB, registry=registry, labels=labels, grad_norm_sync_every_s=0)
    trainer = train(tmp_path, 6, 64, [GradNormLogCallback(metrics)], logging_steps=1)

    logged = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    assert len(logged) == 6 and all(norm > 0 for norm in logged)
    assert registry.get_sample_value("training_grad_norm", asdict(labels)) == pytest.approx(logged[-1])
