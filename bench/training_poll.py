"""What TrainingControl.poll costs a training loop: per poll with no command (target < 20 µs), and the rest.

    .venv/bin/python bench/training_poll.py             # ~10 s
    .venv/bin/python bench/training_poll.py --no-gloo   # without the 2-rank torch.distributed part

Measured on a real control directory in /tmp (the same filesystem kind a hostPath gives a pod):

1. ``poll(step)`` with an empty inbox, in a tight loop: one ``os.stat`` of the inbox and a compare.
   Reported as the mean over 20 rounds of 20,000 polls (p50 and p99 of the rounds' means too), next
   to a bare loop that only increments the step, so the difference is what the library adds.
2. The heartbeat: every ``heartbeat_interval`` (2 s by default) one poll also rewrites job.json
   and lists the inbox; its cost, and its share of the wall time.
3. A poll that finds a command and applies it (scale_lr on two param groups): claim, applied.log
   append + fsync, the handler, the acknowledgement (temp + rename + fsync).
4. With torch installed, a 2-process gloo group on the CPU: ``poll`` on every rank with no command, in a
   tight loop (the ranks exchange a non-blocking 16-byte announcement every 32 polls at such a pace;
   bench/training_ddp.py measures it beside a real DDP step).

Prints the numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as c

from remediate.training import ControlOptions, TrainingControl
from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.protocol import Command

TARGET_US = 20.0
ROUNDS = 20
POLLS = 20_000


class _Optimizer:
    def __init__(self) -> None:
        self.param_groups = [{"lr": 3e-4, "params": []}, {"lr": 3e-4, "params": []}]


def _settle(control: TrainingControl) -> None:
    time.sleep(0.1)  # past the racy window after the last change of the inbox
    control.poll(0)
    control.poll(0)


def bench_idle(root: Path) -> tuple[list[float], list[float]]:
    control = TrainingControl(
        "bench", root=root, optimizer=_Optimizer(), options=ControlOptions(wake_signal=None, heartbeat_interval=3600)
    )
    control.register()
    _settle(control)
    poll = control.poll
    idle, bare = [], []
    gc.disable()
    try:
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for step in range(POLLS):
                poll(step)
            idle.append((time.perf_counter() - started) / POLLS * 1e6)
            started = time.perf_counter()
            for step in range(POLLS):
                step += 1
            bare.append((time.perf_counter() - started) / POLLS * 1e6)
    finally:
        gc.enable()
    control.close()
    return idle, bare


def bench_heartbeat(root: Path) -> float:
    control = TrainingControl(
        "beat", root=root, optimizer=_Optimizer(), options=ControlOptions(wake_signal=None, heartbeat_interval=3600)
    )
    control.register()
    _settle(control)
    samples = []
    for step in range(200):
        control._job_file.next_heartbeat = 0.0  # due now
        started = time.perf_counter()
        control.poll(step)
        samples.append((time.perf_counter() - started) * 1e6)
    control.close()
    return statistics.median(samples)


def bench_command(root: Path) -> float:
    optimizer = _Optimizer()
    control = TrainingControl(
        "apply", root=root, optimizer=optimizer, options=ControlOptions(wake_signal=None, heartbeat_interval=3600)
    )
    control.register()
    paths = JobPaths(root, "apply")
    samples = []
    for i in range(200):
        now = time.time()
        command = Command(f"cmd-{i}", "scale_lr", {"factor": 0.999}, now, now + 60)
        atomic_write_json(paths.command(command.id), command.to_dict(), tmp_dir=paths.tmp)
        started = time.perf_counter()
        control.poll(i)
        samples.append((time.perf_counter() - started) * 1e3)
        assert paths.read_ack(command.id) is not None
    control.close()
    return statistics.median(samples)


def _gloo_rank(rank: int, root: str, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    control = TrainingControl("gloo", root=root, options=ControlOptions(wake_signal=None, heartbeat_interval=3600))
    control.register()
    for step in range(200):  # warm up, and let the racy window pass
        control.poll(step)
    time.sleep(0.1)
    polls = 5000
    dist.barrier()
    started = time.perf_counter()
    for step in range(polls):
        control.poll(step)
    per_poll = (time.perf_counter() - started) / polls * 1e6
    control.close()
    if rank == 0:
        Path(out).write_text(f"{per_poll}")
    dist.destroy_process_group()


def bench_gloo(root: Path) -> float | None:
    try:
        import torch.multiprocessing as mp
    except ImportError:
        return None
    out = root / "gloo.txt"
    mp.start_processes(_gloo_rank, args=(str(root), c.free_port(), str(out)), nprocs=2, start_method="spawn")
    return float(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-gloo", action="store_true", help="skip the 2-rank torch.distributed measurement")
    args = parser.parse_args()
    print(f"machine: {c.machine_line()}")
    with tempfile.TemporaryDirectory(prefix="remediate-bench-training-") as tmp:
        root = Path(tmp)
        print(f"control root: {root} ({os.statvfs(root).f_bsize} B blocks)")
        idle, bare = bench_idle(root)
        mean = statistics.fmean(idle)
        added = mean - statistics.fmean(bare)
        p50 = statistics.median(idle)
        p99 = c.percentile(idle, 99)
        verdict = "OK" if mean < TARGET_US else "OVER TARGET"
        print(
            f"poll, no command:          {mean:6.2f} µs per poll (rounds: p50 {p50:.2f}, p99 {p99:.2f}; "
            f"bare loop {statistics.fmean(bare):.3f} µs; library adds {added:.2f} µs) "
            f"target < {TARGET_US:g} µs: {verdict}"
        )
        beat = bench_heartbeat(root)
        share = beat / 2e6 * 100  # one heartbeat per 2 s of wall time, whatever the step time
        print(f"poll with a heartbeat:     {beat:6.1f} µs (once per 2 s: {share:.3f}% of the wall time)")
        print(f"poll applying a command:   {bench_command(root):6.2f} ms (scale_lr, incl. two fsyncs)")
        if not args.no_gloo:
            gloo = bench_gloo(root)
            if gloo is None:
                print("2 ranks, gloo:             skipped (torch is not installed)")
            else:
                print(f"2 ranks, gloo, no command: {gloo:6.1f} µs per poll on rank 0 (an exchange every 32 polls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
