"""A small torch-free training job run as a subprocess by tests/integration/test_training_jobs.py (not a test module).

Its loop is the quick start of docs/training-protocol.md as written (``if control.skip_batch():
continue`` ... ``step = control.poll(step, loss)``); the data loader takes ``--batch-seconds`` per
batch, skipped or not, as a slow loader does. The "model" is one number and the optimizer a
stand-in with ``param_groups``, so the job starts in a fraction of a second. It checkpoints
every ``--checkpoint-every`` steps through `CallableCheckpoints` with the library's default good
mark (each checkpoint a small JSON file in ``--checkpoints``, keeping the last ``--keep``); from
step ``--spike-at`` on, its loss is ``--spike-loss`` (the field case: ~2, then 133). With
``--resume`` it starts from the newest checkpoint of the previous run (`CheckpointIndex.resume`),
else from scratch.

Events are printed as ``EVENT {json}`` lines; a name already held by a live process makes it
print ``REFUSED <message>`` and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from remediate.training import CallableCheckpoints, CheckpointInfo, ControlOptions, TrainingControl
from remediate.training.client import JobNameInUse


class Optimizer:
    def __init__(self, lr: float) -> None:
        self.param_groups: list[dict[str, Any]] = [{"lr": lr, "params": []}]


def emit(event: str, **fields: Any) -> None:
    print("EVENT " + json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def loader(seconds: float) -> Iterator[int]:
    index = 0
    while True:
        time.sleep(seconds)  # a slow data loader: skipping a batch costs as much as reading it
        index += 1
        yield index


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--batch-seconds", type=float, default=0.02)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--spike-at", type=int, default=10**9)
    parser.add_argument("--spike-loss", type=float, default=133.2)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--keep", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    optimizer = Optimizer(0.01)
    weights = {"w": 0.0}

    def save(step: int) -> str:
        path = os.path.join(args.checkpoints, f"w-{step:06d}.json")
        with open(path, "w") as file:
            json.dump({"w": weights["w"], "run": checkpoints.run_id, "pid": os.getpid()}, file)
        return path

    def load(info: CheckpointInfo) -> None:
        with open(str(info.path)) as file:
            saved = json.load(file)
        weights["w"] = saved["w"]
        emit("loaded", step=info.step, loss=info.loss, run=saved["run"], pid=saved["pid"])

    def delete(info: CheckpointInfo) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(info.path))

    checkpoints = CallableCheckpoints(
        args.checkpoints, save=save, load=load, delete=delete, keep=args.keep, writer=True
    )
    control = TrainingControl(
        args.job,
        root=args.root,
        checkpoints=checkpoints,
        optimizer=optimizer,
        options=ControlOptions(
            heartbeat_interval=0.2, wake_signal=None, on_ack=lambda ack: emit("ack", ack=ack.to_dict())
        ),
    )
    try:
        control.register()
    except JobNameInUse as exc:
        print(f"REFUSED {exc}", flush=True)
        return 2
    emit("registered", pid=control.paths.read_registration().pid, run=checkpoints.run_id)

    step = 0
    if args.resume:
        resumed = checkpoints.resume()
        step = resumed.step if resumed is not None else 0
        emit("resumed", step=step)
    deadline = time.monotonic() + args.max_seconds
    for _batch in loader(args.batch_seconds):
        if time.monotonic() >= deadline:
            break
        if control.skip_batch():
            continue
        weights["w"] += 0.001
        loss = args.spike_loss if step + 1 >= args.spike_at else 2.0 + 0.01 * (step % 3)
        step += 1
        if step % args.checkpoint_every == 0:
            info = checkpoints.save(step, loss)
            emit("checkpoint", step=step, loss=loss, good=info.good, run=info.run)
        new_step = control.poll(step, loss)
        if new_step != step:
            emit("rolled_back", from_step=step, to_step=new_step)
            step = new_step
    control.close()
    emit("final", step=step, lr=optimizer.param_groups[0]["lr"], skipped=control.batches_skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
