"""What `TrainingControl.poll` costs a data-parallel training loop: 2 gloo ranks on the CPU, per step.

    .venv/bin/python bench/training_ddp.py              # ~1 min
    .venv/bin/python bench/training_ddp.py --rounds 3   # quicker

Two processes (torch.multiprocessing, spawn) form a gloo group and train the same small
DistributedDataParallel model (an MLP, batch 64: a few ms per step, DDP's gradient all-reduce included).
Three loops over the same steps, interleaved round by round so a busy machine slows them alike:

1. bare: the step alone;
2. poll: the step, then ``control.poll(step, loss)`` with an empty inbox (a real control directory in /tmp),
   on both ranks, as docs/training-protocol.md says;
3. blocking broadcast: the step, then one blocking 8-byte ``dist.broadcast`` from rank 0 and ``.item()`` — what a
   poll that agrees with the other ranks at every step costs (the reference the poll is compared with).

Reported per mode, rank 0 and rank 1: µs per step (mean of the rounds' means), the time spent inside the poll (or
the broadcast) per step, and what it adds to the bare step (µs and % of the step). Target: the poll adds at most
2% of the step or 50 µs. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as c

from remediate.training import ControlOptions, TrainingControl

MODES = ("bare", "poll", "blocking broadcast")
TARGET_SHARE = 0.02
TARGET_US = 50.0


def _rank(rank: int, port: int, root: str, out: str, rounds: int, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randn(64, 1)
    control = TrainingControl(
        "ddp-bench", root=root, optimizer=optimizer, options=ControlOptions(wake_signal=None, heartbeat_interval=3600)
    )
    control.register()
    length = torch.zeros(1, dtype=torch.int64)

    def train_step() -> object:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    def loop(mode: str, first: int) -> tuple[float, float]:
        inside = 0.0
        dist.barrier()
        started = time.perf_counter()
        for step in range(first, first + steps):
            loss = train_step()
            before = time.perf_counter()
            if mode == "poll":
                control.poll(step, loss)
            elif mode == "blocking broadcast":
                dist.broadcast(length, src=0)
                int(length.item())
            inside += time.perf_counter() - before
        return (time.perf_counter() - started) / steps * 1e6, inside / steps * 1e6

    step = 0
    for mode in MODES:  # warm up every path (and let the inbox's racy window after register() pass)
        loop(mode, step)
        step += steps
    figures: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            figures[mode].append(loop(mode, step))
            step += steps
    control.close()
    dist.barrier()
    Path(out, f"rank{rank}.json").write_text(json.dumps(figures))
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300, help="steps per mode and round")
    args = parser.parse_args()
    import torch.multiprocessing as mp

    print(f"machine: {c.machine_line()}")
    with tempfile.TemporaryDirectory(prefix="remediate-bench-ddp-") as tmp:
        mp.start_processes(
            _rank, args=(c.free_port(), tmp, tmp, args.rounds, args.steps), nprocs=2, start_method="spawn"
        )
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in (0, 1)]
    print(f"2 gloo ranks, {args.rounds} rounds x {args.steps} steps per mode, interleaved")
    verdicts = []
    for rank, figures in enumerate(ranks):
        bare = statistics.fmean(s for s, _ in figures["bare"])
        for mode in MODES:
            step_us = statistics.fmean(s for s, _ in figures[mode])
            inside = statistics.fmean(i for _, i in figures[mode])
            line = f"rank {rank} {mode:<19} {step_us:8.1f} µs per step"
            if mode != "bare":
                share = inside / bare
                line += (
                    f", inside {inside:7.1f} µs per step ({share:6.2%} of the bare step); "
                    f"step {step_us - bare:+7.1f} µs against bare (ratio {step_us / bare:.3f})"
                )
                if mode == "poll":
                    verdicts.append(inside <= TARGET_US or share <= TARGET_SHARE)
            print(line)
    ok = all(verdicts)
    print(
        f"target: poll adds <= {TARGET_SHARE:.0%} of the step or <= {TARGET_US:g} µs (inside the poll, both ranks): "
        f"{c.verdict(ok)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
