"""A small torch-free training job with gradient accumulation, run as a subprocess by
tests/integration/test_training_commands.py (not a test module).

Its loop is the one docs/training-protocol.md shows for `Batching`: batches come from
``batching.batch_sampler(...)`` (the current micro-batch size, read at every batch), one
optimizer step every ``batching.accumulation_steps`` micro-batches, ``control.poll`` after each
optimizer step. Every optimizer step prints ``EVENT {"event": "step", "samples": ..., ...}``
(samples = what that step saw: the effective batch of this single-rank job); every
acknowledgement prints ``EVENT {"event": "ack", ...}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from typing import Any

from remediate.training import ControlOptions, TrainingControl
from remediate.training.batching import Batching


def emit(event: str, **fields: Any) -> None:
    print("EVENT " + json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--micro", type=int, default=32)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--workers", type=int, default=None, help="declare set_dataloader_workers with this many")
    parser.add_argument("--batch-seconds", type=float, default=0.005)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()

    batching = Batching(args.micro, args.accumulation, dataloader_workers=args.workers, max_dataloader_workers=16)
    control = TrainingControl(
        args.job,
        root=args.root,
        batching=batching,
        options=ControlOptions(
            heartbeat_interval=0.2, wake_signal=None, on_ack=lambda ack: emit("ack", ack=ack.to_dict())
        ),
    )
    control.register()
    emit("registered", pid=control.paths.read_registration().pid)

    step, samples, micro_batches = 0, 0, 0
    deadline = time.monotonic() + args.max_seconds
    for batch in batching.batch_sampler(itertools.count()):
        if time.monotonic() >= deadline:
            break
        if control.skip_batch():
            continue
        time.sleep(args.batch_seconds)  # forward and backward of one micro-batch
        samples += len(batch)
        micro_batches += 1
        if micro_batches < batching.accumulation_steps:
            continue
        step += 1  # optimizer.step(); optimizer.zero_grad()
        emit("step", step=step, samples=samples, micro_batches=micro_batches, micro=batching.micro_batch_size)
        samples, micro_batches = 0, 0
        step = control.poll(step)
    control.close()
    emit("final", step=step, micro=batching.micro_batch_size, accumulation=batching.accumulation_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
