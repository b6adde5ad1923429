"""A torch-free training job run as a real process by the action tests (not a test module).

It registers under --root as --job, polls every 10 ms (one step per poll), has four good
checkpoint stand-ins (steps 100-400, saved an hour before it starts) and one optimizer param group (lr 3e-4); a rollback
sleeps --load-delay seconds in the checkpoint load, as loading a big checkpoint does. It
prints ``READY <pid>`` once registered and stops after --max-seconds.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from remediate.training import CallableCheckpoints, CheckpointInfo, ControlOptions, TrainingControl


class Optimizer:
    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = [{"lr": 3e-4, "params": []}]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--load-delay", type=float, default=0.0)
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--start-step", type=int, default=500)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()

    def load(info: Any) -> None:
        time.sleep(args.load_delay)
        print(f"LOADED {info.step}", flush=True)

    root = Path(args.root)
    checkpoints = CallableCheckpoints(
        root.parent / f"ckpt-{args.job}-{os.getpid()}", save=lambda step: f"/ckpt/{step}", load=load, writer=True
    )
    saved = time.time() - 3600  # saved an hour ago: well before any alert (rollbacks exclude the rule's pending time)
    for step, loss in ((100, 2.0), (200, 1.9), (300, 1.8), (400, 1.7)):
        good = checkpoints.judge(step, loss)
        checkpoints.record(CheckpointInfo(step, loss, good, f"/ckpt/{step}", saved + step))
    control = TrainingControl(
        args.job,
        root=root,
        checkpoints=checkpoints,
        optimizer=Optimizer(),
        options=ControlOptions(wake_signal=None, heartbeat_interval=args.heartbeat),
    )
    control.register()
    step = control.poll(args.start_step)
    print(f"READY {os.getpid()}", flush=True)
    end = time.monotonic() + args.max_seconds
    while time.monotonic() < end:
        step = control.poll(step + 1, 1.5)
        time.sleep(0.01)
    control.close()


if __name__ == "__main__":
    main()
