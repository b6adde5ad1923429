"""A Hugging Face Trainer job (2 gloo ranks on CPU under torchrun) run with a `Batching` (not a test module).

Rank 0 delivers reduce_batch_size (factor 0.5) and set_dataloader_workers (workers 0) into its own
inbox at optimizer step 2, as remediate would; the callback broadcasts them to both ranks. Each rank
writes <out>/rank<r>.json: the loader and accumulation of every epoch and, per optimizer step, the
epoch, micro-batches and samples behind it and whether a DataLoader worker process loaded them (the
loader's real workers, not the attribute), the command ids and the final weights.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
from pathlib import Path
from typing import Any

import torch
import transformers

from remediate.training import ControlOptions
from remediate.training.batching import Batching
from remediate.training.hf import RemediateTrainerCallback
from tests.support.training import deliver

JOB = "hf-ddp"


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.rows: list[int] = []
        self.from_worker: list[bool] = []

    def forward(self, x: Any, labels: Any = None, worker: Any = None) -> dict[str, Any]:
        self.rows.append(len(x))
        self.from_worker.append(bool((worker >= 0).all()))
        prediction = self.layer(x)
        return {"logits": prediction, "loss": torch.nn.functional.mse_loss(prediction, labels)}


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        info = torch.utils.data.get_worker_info()  # None in the training process itself
        return {"x": self.x[i], "labels": self.x[i].sum().unsqueeze(0), "worker": -1 if info is None else info.id}


class Record(transformers.TrainerCallback):
    def __init__(self, root: Path, model: Counting) -> None:
        self.root, self.model = root, model
        self.sent: list[str] = []
        self.epochs: list[list[int]] = []
        self.per_step: list[list[int]] = []
        self._epoch_started = False

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._epoch_started = True  # recorded at its first step: every callback's on_epoch_begin has run then

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._epoch_started:
            self._epoch_started = False
            loader = kwargs["train_dataloader"]
            shard = loader.batch_sampler  # accelerate's BatchSamplerShard around the torch BatchSampler
            assert shard.batch_size == shard.batch_sampler.batch_size, "the shard and its sampler disagree"
            workers = loader.base_dataloader.num_workers  # the torch loader's, not its wrapper's
            self.epochs.append([shard.batch_size, workers, args.gradient_accumulation_steps])

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = self.model
        self.per_step.append([len(self.epochs) - 1, len(model.rows), sum(model.rows), all(model.from_worker)])
        model.rows.clear()
        model.from_worker.clear()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero and state.global_step == 2 and not self.sent:
            self.sent = [deliver(self.root, JOB, "reduce_batch_size", {"factor": 0.5}).id,
                         deliver(self.root, JOB, "set_dataloader_workers", {"workers": 0}).id]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--watchdog", type=float, default=0, help="dump every stack and exit after this long")
    options = parser.parse_args()
    if options.watchdog:  # a hang ends with every thread's stack on stderr, not in the test's kill
        faulthandler.dump_traceback_later(options.watchdog, exit=True)
    torch.manual_seed(0)
    batching = Batching(micro_batch_size=16, dataloader_workers=1, max_dataloader_workers=4)
    model = Counting()
    record = Record(Path(options.root), model)
    callback = RemediateTrainerCallback(
        JOB,
        root=options.root,
        checkpoint_dir=Path(options.out) / "ckpt",
        every_n_steps=None,
        batching=batching,
        options=ControlOptions(wake_signal=None, sync_every_s=0),
    )
    args = transformers.TrainingArguments(output_dir=str(Path(options.out) / "hf"), num_train_epochs=3,
                                          per_device_train_batch_size=16, gradient_accumulation_steps=1,
                                          dataloader_num_workers=1, learning_rate=0.01, save_strategy="no",
                                          report_to="none", use_cpu=True, ddp_backend="gloo",
                                          remove_unused_columns=False, disable_tqdm=True)  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Rows(128), callbacks=[record, callback])
    trainer.train()
    result = {
        "epochs": record.epochs,
        "per_step": record.per_step,
        "sent": record.sent,
        "global_step": trainer.state.global_step,
        "world_size": args.world_size,
        "batching": [batching.micro_batch_size, batching.accumulation_steps],
        "weights": [*model.layer.weight.flatten().tolist(), *model.layer.bias.tolist()],
    }
    (Path(options.out) / f"rank{args.process_index}.json").write_text(json.dumps(result))
    # The Trainer leaves its process group open. Left to the interpreter's exit, a rank now and then aborted as
    # its gloo threads were torn down ("terminate called without an active exception", exit -6); destroyed while
    # the peer was still in the Trainer's last collectives, it once hung (pytorch/pytorch#75097). Both ranks meet
    # at a barrier first, then end the group, as torch's docs on shutdown say.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
