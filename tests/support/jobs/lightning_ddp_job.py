"""A Lightning DDP job (2 gloo ranks on CPU under torchrun) whose loader follows a `Batching` (not a test module).

Rank 0 delivers reduce_batch_size (factor 0.5) and set_dataloader_workers (workers 0) into its own
inbox at optimizer step 2, as remediate would; the callback broadcasts them to both ranks. Each rank
writes <out>/rank<r>.json: the loader and accumulation of every epoch and, per optimizer step, the
epoch, micro-batches and samples behind it, and the command ids.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from remediate.training import ControlOptions
from remediate.training.batching import Batching
from remediate.training.lightning import RemediateCallback
from tests.support.training import deliver

JOB = "lightning-ddp"


class Module(pl.LightningModule):
    def __init__(self, batching: Batching, samples: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.batching = batching
        x = torch.randn(samples, 4, generator=torch.Generator().manual_seed(0))
        self.data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=self.batching.micro_batch_size,
                                           num_workers=self.batching.dataloader_workers or 0)  # fmt: skip


class Record(pl.Callback):
    """Delivers the commands on rank 0 at step 2; counts the samples behind each optimizer step."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sent: list[str] = []
        self.epochs: list[list[int]] = []
        self.per_step: list[list[int]] = []
        self._batches: list[int] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:  # after every on_train_epoch_start hook (the callback's sets the accumulation)
            loader = trainer.train_dataloader
            self.epochs.append([loader.batch_size, loader.num_workers, trainer.accumulate_grad_batches])
        self._batches.append(len(batch[0]))

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.per_step.append([trainer.current_epoch, len(self._batches), sum(self._batches)])
        self._batches = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.is_global_zero and trainer.global_step == 2 and not self.sent:
            self.sent = [deliver(self.root, JOB, "reduce_batch_size", {"factor": 0.5}).id,
                         deliver(self.root, JOB, "set_dataloader_workers", {"workers": 0}).id]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--watchdog", type=float, default=0, help="dump every stack and exit after this long")
    args = parser.parse_args()
    if args.watchdog:  # a hang ends with every thread's stack on stderr, not in the test's kill
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    torch.manual_seed(0)
    batching = Batching(micro_batch_size=16, dataloader_workers=1, max_dataloader_workers=4)
    record = Record(Path(args.root))
    callback = RemediateCallback(
        JOB,
        root=args.root,
        checkpoint_dir=Path(args.out) / "ckpt",
        every_n_steps=None,
        batching=batching,
        options=ControlOptions(wake_signal=None, sync_every_s=0),
    )
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=args.out, reload_dataloaders_every_n_epochs=1,
                         callbacks=[record, callback])  # fmt: skip
    trainer.fit(Module(batching, samples=128))
    result = {
        "epochs": record.epochs,
        "per_step": record.per_step,
        "sent": record.sent,
        "global_step": trainer.global_step,
        "batching": [batching.micro_batch_size, batching.accumulation_steps],
    }
    (Path(args.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
