"""RemediateCallback inside a real PyTorch Lightning Trainer (CPU, a tiny local model and data, no downloads).

An "agent" callback ahead of ours delivers a rollback and an lr cut at step 12, as remediate
would; an observer behind ours records what the model and optimizer look like after each step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediate.training import ControlOptions
from remediate.training.files import JobPaths
from remediate.training.protocol import APPLIED, REJECTED
from tests.support.training import deliver, halved_at_the_next_epoch, require, wait_for_ack

torch = require("torch")
pl = require("lightning.pytorch")

# Lightning's own advice (few dataloader workers, ...) and deprecation notices between its release and torch's.
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:lightning.*"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]

JOB = "lightning-job"


class TinyModule(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + 0.01 * s))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Agent(pl.Callback):  # type: ignore[misc]
    """Delivers `commands` (kind, params) once at step `at`, as remediate would; records each batch's size."""

    def __init__(self, root: Path, at: int, *commands: tuple[str, dict[str, Any]]) -> None:
        self.root, self.at, self.commands = root, at, commands
        self.sent: list[str] = []
        self.batch_sizes: list[int] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_sizes.append(len(batch[0]))
        if trainer.global_step == self.at and not self.sent:
            self.sent.extend(deliver(self.root, JOB, kind, params).id for kind, params in self.commands)


class Observer(pl.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.after: dict[int, dict[str, Any]] = {}

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        self.after[trainer.global_step] = {
            "weight": module.layer.weight.detach().clone(),
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "base_lrs": list(scheduler.base_lrs),
        }


def ours(tmp_path: Path, **kwargs: Any) -> Any:
    """The callback under test, on tmp_path's control root and checkpoint directory."""
    from remediate.training.lightning import RemediateCallback

    return RemediateCallback(
        JOB,
        root=tmp_path / "control",
        checkpoint_dir=tmp_path / "ckpt",
        options=ControlOptions(wake_signal=None),
        **kwargs,
    )


def fit(tmp_path: Path, max_steps: int, callbacks: list[Any], samples: int = 256, batch_size: int = 8) -> Any:
    """A CPU Trainer of `max_steps` with `callbacks` over `samples` rows of tiny seeded data; the trainer."""
    torch.manual_seed(0)
    x = torch.randn(samples, 4)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)
    trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(TinyModule(), data)
    return trainer


def test_the_lightning_callback_rolls_back_skips_and_cuts_the_lr(tmp_path: Path) -> None:
    root, callback, observer = tmp_path / "control", ours(tmp_path, every_n_steps=4, keep=10), Observer()
    rollback = {"checkpoint": "latest_good", "min_steps_back": 4, "skip_batches": 3}
    agent = Agent(root, 12, ("rollback", rollback), ("scale_lr", {"factor": 0.5, "min_lr": 1e-4}))
    trainer = fit(tmp_path, 24, [agent, callback, observer])

    rollback = wait_for_ack(root, JOB, agent.sent[0])
    scale = wait_for_ack(root, JOB, agent.sent[1])
    assert rollback.status == APPLIED and scale.status == APPLIED
    assert (rollback.step_before, rollback.step_after) == (12, 8)
    assert rollback.result["step_counter_rewound"] is False
    assert "trainer's step counter continues" in rollback.detail
    assert rollback.job["framework"] == "lightning"

    saved = torch.load(tmp_path / "ckpt" / "ckpt-000000008.pt", weights_only=True)
    after = observer.after
    assert torch.equal(after[12]["weight"], saved["model"]["layer.weight"])
    # The next 3 optimizer steps were skipped: the weights did not move; then training went on.
    assert all(torch.equal(after[s]["weight"], after[12]["weight"]) for s in (13, 14, 15))
    assert not torch.equal(after[16]["weight"], after[12]["weight"])
    assert callback.control.batches_skipped == 3
    # lr: restored with the scheduler of step 8, then halved, and the scheduler's base lr with it, so that
    # the scheduler's later steps keep the cut.
    epoch = saved["schedulers"][0]["last_epoch"]
    assert scale.result["lr_before"] == [pytest.approx(0.01 / (1 + 0.01 * epoch))]
    assert scale.result["lr_after"] == [pytest.approx(0.005 / (1 + 0.01 * epoch))]
    assert after[12]["base_lrs"] == [0.005]
    assert after[20]["lr"] == pytest.approx(0.005 / (1 + 0.01 * (epoch + 8)))
    assert trainer.global_step == 24  # Lightning's own counter was not rewound
    registration = JobPaths(root, JOB).read_registration()
    assert registration.framework == "lightning" and registration.closed_at is not None
    assert [c.step for c in registration.checkpoints] == [4, 8, 16, 20, 24]  # 12 belonged to the abandoned run


def test_the_lightning_callback_serves_skip_batches_and_declares_the_commands(tmp_path: Path) -> None:
    root, callback, observer = tmp_path / "control", ours(tmp_path, every_n_steps=None), Observer()
    agent = Agent(root, 6, ("skip_batches", {"batches": 2}))
    fit(tmp_path, 10, [agent, callback, observer], samples=128)

    ack = wait_for_ack(root, JOB, agent.sent[0])
    assert ack.status == APPLIED and ack.result["batches_skipped"] == 2
    after = observer.after
    assert all(torch.equal(after[s]["weight"], after[6]["weight"]) for s in (7, 8))  # two batches dropped
    assert not torch.equal(after[9]["weight"], after[6]["weight"])
    assert callback.control.batches_skipped == 2
    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert declared["skip_batches"]["required"] == ["batches"] and "rollback" in declared


def test_the_lightning_callback_neither_declares_nor_acknowledges_a_batch_size_it_cannot_change(
    tmp_path: Path,
) -> None:
    """With batching= passed through, reduce_batch_size was declared and acknowledged
    "applied ... effective batch stays 32" while the Trainer kept running 32 x 1."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=32)
    agent = Agent(root, 3, ("reduce_batch_size", {"factor": 0.5}))
    trainer = fit(tmp_path, 8, [agent, ours(tmp_path, every_n_steps=None, batching=batching)], 320, batch_size=32)

    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert "reduce_batch_size" not in declared and "skip_batches" in declared  # remediate refuses it at plan time
    ack = wait_for_ack(root, JOB, agent.sent[0])
    assert ack.status == REJECTED
    assert ack.detail.startswith("'reduce_batch_size' is not supported by this integration (lightning): ")
    assert "nothing was changed" in ack.detail
    assert (batching.micro_batch_size, batching.accumulation_steps) == (32, 1)
    assert set(agent.batch_sizes) == {32}  # what the Trainer ran, before and after
    assert trainer.accumulate_grad_batches == 1


def test_a_lightning_job_restarted_from_scratch_keeps_its_own_checkpoints(tmp_path: Path) -> None:
    """With the callback's own TorchCheckpoints: the second fit's checkpoints (steps 4, 8)
    were deleted as they were written, because the first fit had left 8 and 12 (keep=2)."""
    runs = []
    for max_steps in (12, 8):  # the same job, the same checkpoint directory, started again from scratch
        callback = ours(tmp_path, every_n_steps=4, keep=2)
        fit(tmp_path, max_steps, [callback])
        runs.append(callback.checkpoints.run_id)
        kept = [(c.step, c.run) for c in callback.checkpoints.list()]
        assert kept == [(max_steps - 4, runs[-1]), (max_steps, runs[-1])]
    assert runs[0] != runs[1]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("ckpt-*.pt")) == ["ckpt-000000004.pt", "ckpt-000000008.pt"]


class BatchedModule(TinyModule):
    """A module whose train_dataloader() builds its loader from the `Batching` (as the callback's docs ask)."""

    def __init__(self, batching: Any, samples: int) -> None:
        super().__init__()
        self.batching = batching
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(samples, 4, generator=generator)
        self.data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=self.batching.micro_batch_size,
                                           num_workers=self.batching.dataloader_workers or 0)  # fmt: skip


class StepSamples(pl.Callback):  # type: ignore[misc]
    """Counts the samples behind each optimizer step, and the loader each epoch ran."""

    def __init__(self) -> None:
        self.per_step: list[tuple[int, int, int]] = []
        """(epoch, micro-batches, samples) per optimizer step."""
        self.epochs: list[tuple[int, int, int]] = []
        """(batch_size, num_workers, accumulate_grad_batches) per epoch."""
        self._batches: list[int] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        loader = trainer.train_dataloader
        self.epochs.append((loader.batch_size, loader.num_workers, trainer.accumulate_grad_batches))

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self._batches.append(len(batch[0]))

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.per_step.append((trainer.current_epoch, len(self._batches), sum(self._batches)))
        self._batches = []


def test_the_lightning_callback_halves_the_micro_batch_at_the_next_epoch_keeping_the_effective_batch(
    tmp_path: Path,
) -> None:
    """reduce_batch_size and set_dataloader_workers were refused for Lightning jobs."""
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=16, dataloader_workers=1, max_dataloader_workers=4)
    agent = Agent(root, 2, ("reduce_batch_size", {"factor": 0.5}), ("set_dataloader_workers", {"workers": 0}))
    counter = StepSamples()
    callback = ours(tmp_path, every_n_steps=None, batching=batching)
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         reload_dataloaders_every_n_epochs=1, callbacks=[agent, callback, counter])  # fmt: skip
    trainer.fit(BatchedModule(batching, samples=64))

    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert {"reduce_batch_size", "set_dataloader_workers"} <= set(declared)
    _, workers = halved_at_the_next_epoch(root, JOB, agent.sent, effective=16)
    assert (workers.result["workers_before"], workers.result["workers_after"]) == (1, 0)
    # Epoch 0 finishes as it began (the loader and the accumulation are Lightning's until the epoch ends);
    # from epoch 1 on: half the micro-batch, twice the accumulation, no workers.
    assert counter.epochs == [(16, 1, 1), (8, 0, 2), (8, 0, 2)]
    assert [(e, b) for e, b, _ in counter.per_step] == [(0, 1)] * 4 + [(1, 2)] * 4 + [(2, 2)] * 4
    assert {samples for _, _, samples in counter.per_step} == {16}  # the effective batch, step by step
    assert trainer.global_step == 12


def test_the_lightning_callback_refuses_the_batch_commands_when_the_trainer_never_reloads_its_loader(
    tmp_path: Path,
) -> None:
    from remediate.training.batching import Batching

    root, batching = tmp_path / "control", Batching(micro_batch_size=16, dataloader_workers=0)
    agent = Agent(root, 2, ("reduce_batch_size", {"to": 8}), ("set_dataloader_workers", {"workers": 0}))
    counter = StepSamples()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[agent, ours(tmp_path, every_n_steps=None, batching=batching), counter])  # fmt: skip
    trainer.fit(BatchedModule(batching, samples=64))

    declared = JobPaths(root, JOB).read_registration().commands or {}
    assert not {"reduce_batch_size", "set_dataloader_workers"} & set(declared)  # refused at plan time
    for ack in (wait_for_ack(root, JOB, sent) for sent in agent.sent):
        assert ack.status == REJECTED and "reload_dataloaders_every_n_epochs=1" in ack.detail
    assert (batching.micro_batch_size, batching.accumulation_steps) == (16, 1)
    assert counter.epochs == [(16, 0, 1), (16, 0, 1)]


def test_the_callback_takes_control_options_and_sets_what_the_integration_owns(tmp_path: Path) -> None:
    from remediate.training.lightning import RemediateCallback

    restart = "the launcher of this job never restarts it"
    callback = RemediateCallback(
        JOB,
        root=tmp_path / "control",
        checkpoint_dir=tmp_path / "ckpt",
        options=ControlOptions(
            wake_signal=None, heartbeat_interval=4.0, framework="mine", unsupported={"restart": restart}
        ),
    )
    options = callback.control.options
    assert (options.wake_signal, options.heartbeat_interval) == (None, 4.0)
    assert (options.framework, options.rewinds_step) == ("lightning", False)  # the callback's, whatever was given
    assert "restart" not in callback.control.commands and callback.control.refused["restart"] == restart
    assert "reduce_batch_size" in callback.control.refused  # its own refusal, beside the one given


def test_the_callback_s_old_keywords_still_work_with_a_warning(tmp_path: Path) -> None:
    from remediate.training.lightning import RemediateCallback

    with pytest.deprecated_call(match=r"RemediateCallback\(wake_signal=\.\.\., sync_every_s=\.\.\.\) is deprecated"):
        callback = RemediateCallback(JOB, root=tmp_path / "control", checkpoint_dir=tmp_path / "ckpt",
                                     wake_signal=None, sync_every_s=0, handlers={"note": lambda ctx: None})  # fmt: skip
    options = callback.control.options
    assert (options.wake_signal, options.sync_every_s, options.framework) == (None, 0, "lightning")
    assert "note" in callback.control.kinds


class LossRecorder(pl.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))


def test_the_metrics_callback_exports_each_step_s_time_loss_and_samples_from_a_real_trainer(tmp_path: Path) -> None:
    from dataclasses import asdict

    from prometheus_client import CollectorRegistry

    from remediate.training.lightning import StepMetricsCallback
    from remediate.training.metrics import RankLabels, StepMetrics

    registry, labels = CollectorRegistry(), RankLabels(training_job=JOB, rank="0", world_size="1", node="n", gpu="")
    recorder = LossRecorder()
    fit(tmp_path, 6, [StepMetricsCallback(StepMetrics(JOB, registry=registry, labels=labels)), recorder], samples=64)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, asdict(labels))

    assert value("training_step_duration_seconds_count") == 6  # one observation per batch
    assert (value("training_step_duration_seconds_sum") or 0.0) > 0
    assert value("training_samples_total") == 6 * 8  # batches of 8 rows
    assert value("training_loss") == pytest.approx(recorder.losses[-1])  # the last step's, read before backward


def test_the_samples_of_a_batch_are_the_first_dimension_of_its_first_tensor() -> None:
    from remediate.training.lightning import batch_samples

    assert batch_samples((torch.zeros(5, 4), torch.zeros(5, 1))) == 5  # a TensorDataset's (x, y)
    assert batch_samples({"input_ids": torch.zeros(3, 16), "labels": torch.zeros(3, 16)}) == 3
    assert batch_samples(torch.zeros(7, 2)) == 7
    assert batch_samples(torch.tensor(1.0)) == 0  # a scalar: no sample count to tell
    assert batch_samples("not a batch") == 0 and batch_samples(()) == 0


class NormRecorder(pl.Callback):  # type: ignore[misc]
    """The global gradient norm of each optimizer step, computed here from the gradients the optimizer is handed."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))))


def test_the_metrics_callback_exports_the_largest_gradient_norm_read_once_per_interval(tmp_path: Path) -> None:
    from dataclasses import asdict

    from prometheus_client import CollectorRegistry

    from remediate.training.lightning import StepMetricsCallback
    from remediate.training.metrics import RankLabels, StepMetrics

    registry, labels = CollectorRegistry(), RankLabels(training_job=JOB, rank="0", world_size="1", node="n", gpu="")
    metrics = StepMetrics(JOB, registry=registry, labels=labels)  # the default interval (5 s): longer than the fit
    recorder = NormRecorder()
    fit(tmp_path, 12, [StepMetricsCallback(metrics, grad_norm=True), recorder], samples=128)

    assert len(recorder.norms) == 12
    # Read at the first step, then kept on the device until the end of training flushed the largest of the rest.
    assert metrics.grad_norm_reads == 2
    assert registry.get_sample_value("training_grad_norm", asdict(labels)) == pytest.approx(max(recorder.norms[1:]))


def test_without_grad_norm_the_metrics_callback_exports_no_norm(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from remediate.training.lightning import StepMetricsCallback
    from remediate.training.metrics import RankLabels, StepMetrics

    registry, labels = CollectorRegistry(), RankLabels(training_job=JOB, rank="0", world_size="1", node="n", gpu="")
    fit(tmp_path, 3, [StepMetricsCallback(StepMetrics(JOB, registry=registry, labels=labels))], samples=64)

    assert "training_grad_norm" not in {s.name for family in registry.collect() for s in family.samples}
