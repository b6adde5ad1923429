"""A small but real CPU training job for the end-to-end test (run as a subprocess; not a test module).

A linear regression trained with AdamW and a decaying LambdaLR schedule, one batch per step
(~30 ms each), checkpointed every 25 steps with TorchCheckpoints (good = loss below 1.0). Data
batches BAD_START..BAD_START+BAD_COUNT-1 have corrupted targets, so the loss spikes there and
stays up while training eats them — the kind of spike PaLM's team answered by rolling back and
skipping batches. The job exports ``training_loss`` and ``training_step`` with prometheus_client,
polls remediate's inbox after every step through TrainingControl, and prints one JSON line per
event (``EVENT {...}``) so the test can check from the job's own output what happened.

It stops 60 steps after it has applied both a rollback and an lr cut, or after --max-seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import torch
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from remediate.training import ControlOptions, TorchCheckpoints, TrainingControl
from remediate.training.protocol import Ack

BAD_START, BAD_COUNT = 151, 200
BASE_LR = 0.05
GOOD_BELOW = 1.0


def emit(event: str, **fields: Any) -> None:
    print("EVENT " + json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(index)
    x = torch.randn(16, 8, generator=generator)
    y = x @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    if BAD_START <= index < BAD_START + BAD_COUNT:
        y = y * -40.0  # corrupted targets: the loss jumps
    return x, y


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, default=90.0)
    parser.add_argument("--step-seconds", type=float, default=0.03)
    args = parser.parse_args()

    registry = CollectorRegistry()
    loss_gauge = Gauge("training_loss", "latest training loss", ["training_job"], registry=registry)
    step_gauge = Gauge("training_step", "optimizer step of training_loss", ["training_job"], registry=registry)
    start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=BASE_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1.0 + 0.002 * s))
    checkpoints = TorchCheckpoints(
        args.checkpoints, model=model, optimizer=optimizer, scheduler=scheduler, keep=12, good_loss_below=GOOD_BELOW
    )

    applied: list[str] = []

    def on_ack(ack: Ack) -> None:
        emit("ack", ack=ack.to_dict())
        if ack.status == "applied":
            applied.append(ack.kind)

    control = TrainingControl(
        args.job,
        root=args.root,
        checkpoints=checkpoints,
        optimizer=optimizer,
        scheduler=scheduler,
        options=ControlOptions(heartbeat_interval=0.5, on_ack=on_ack),
    )
    control.register()
    emit("registered", job=args.job, control_dir=str(control.paths.dir))

    step = data = 0
    done_at: int | None = None
    resumed_pending = False
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        data += 1
        if control.skip_batch():
            continue
        x, y = batch(data)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        value = float(loss.detach())
        loss_gauge.labels(args.job).set(value)
        step_gauge.labels(args.job).set(step)
        if resumed_pending:
            resumed_pending = False
            emit("resumed", step=step, data=data, loss=value, lr=optimizer.param_groups[0]["lr"])
        if step % 25 == 0:
            info = checkpoints.save(step, value)
            emit("checkpoint", step=step, loss=value, good=info.good, lr=optimizer.param_groups[0]["lr"])
        new_step = control.poll(step, loss)
        if new_step != step:
            emit("rolled_back", from_step=step, to_step=new_step, data=data, lr=optimizer.param_groups[0]["lr"],
                 skip=control.batches_to_skip)  # fmt: skip
            step = new_step
            resumed_pending = True
        if done_at is None and "rollback" in applied and "scale_lr" in applied:
            done_at = step
            emit("both_applied", step=step, lr=optimizer.param_groups[0]["lr"], base_lrs=list(scheduler.base_lrs))
        if done_at is not None and step >= done_at + 60:
            break
        time.sleep(args.step_seconds)
    control.close()
    emit(
        "final",
        step=step,
        data=data,
        loss=value,
        finite=math.isfinite(value),
        lr=optimizer.param_groups[0]["lr"],
        base_lrs=list(scheduler.base_lrs),
        batches_skipped=control.batches_skipped,
        checkpoints=[c.step for c in checkpoints.list()],
    )
    return 0 if done_at is not None else 3


if __name__ == "__main__":
    sys.exit(main())
