"""What the per-rank step metrics cost a training loop: `StepMetrics.start` + `step` and `TrainingControl.poll`, per
step, beside the same loop without them, in the same run.

    .venv/bin/python bench/training_metrics.py            # ~15 s
    .venv/bin/python bench/training_metrics.py --rounds 5 # quicker

Three loops over the same work, interleaved round by round (so a busy machine slows all three alike):

1. bare: the step alone;
2. metrics: `metrics.start()`, the step, `metrics.step(loss=..., samples=...)` (rank 0: step time, loss, samples);
3. poll + metrics: as 2, then `control.poll(step)` with an empty inbox (a real control directory in /tmp).

Twice: with an empty step (the µs the helper adds, alone) and, when torch is installed, a tiny CPU training step
(Linear 64 -> 1, batch 32, AdamW: about a millisecond, far shorter than any real step, so its ratio is an upper
bound). Reported:
µs per step (mean of the rounds' means), what the helper adds, and the ratio to the bare loop. Asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _common as c
from prometheus_client import CollectorRegistry

from remediate.training import ControlOptions, TrainingControl
from remediate.training.metrics import RankLabels, StepMetrics

STEPS = 2_000
MODES = ("bare", "metrics", "poll+metrics")


def make_steps() -> list[tuple[str, Callable[[], float]]]:
    """The empty step (what the helper adds, without the noise of real work) and, with torch, the tiny one."""
    empty: tuple[str, Callable[[], float]] = ("empty step", lambda: 1.0)
    try:
        import torch
    except ImportError:
        return [empty]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        value = loss.item()
        loss.backward()
        optimizer.step()
        return value

    return [empty, ("tiny CPU step (torch Linear 64->1, batch 32, AdamW, 1 thread)", step)]


def run_round(step: Callable[[], float], metrics: StepMetrics, control: TrainingControl, mode: str) -> float:
    """Mean µs per step of one round of STEPS steps in `mode` (bare, metrics, poll+metrics)."""
    started = time.perf_counter()
    if mode == "bare":
        for _ in range(STEPS):
            step()
    elif mode == "metrics":
        for _ in range(STEPS):
            metrics.start()
            metrics.step(loss=step(), samples=32)
    else:
        for i in range(STEPS):
            metrics.start()
            metrics.step(loss=step(), samples=32)
            control.poll(i)
    return (time.perf_counter() - started) / STEPS * 1e6


def measure(step: Callable[[], float], rounds: int) -> dict[str, list[float]]:
    labels = RankLabels("bench", "0", "2", "node-a", "0")  # rank 0: all three series
    metrics = StepMetrics("bench", registry=CollectorRegistry(), labels=labels)
    means: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="remediate-bench-metrics-") as tmp:
        control = TrainingControl(
            "bench", root=Path(tmp), options=ControlOptions(wake_signal=None, heartbeat_interval=3600)
        )
        control.register()
        time.sleep(0.1)  # past the racy window after the inbox was made
        for mode in MODES:  # warm-up
            run_round(step, metrics, control, mode)
        gc.disable()
        try:
            for _ in range(rounds):
                for mode in MODES:
                    means[mode].append(run_round(step, metrics, control, mode))
        finally:
            gc.enable()
            control.close()
    return means


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"machine: {c.machine_line()}; {args.rounds} rounds of {STEPS} steps per loop, loops interleaved")
    for what, step in make_steps():
        means = measure(step, args.rounds)
        bare = statistics.fmean(means["bare"])
        print(f"{what}:")
        for mode in MODES:
            mean = statistics.fmean(means[mode])
            p50 = statistics.median(means[mode])
            # an empty step costs next to nothing: a ratio to it says nothing
            ratio = f"; ratio to bare {mean / bare:.3f}" if bare > 1.0 else ""
            print(f"  {mode:>13}: {mean:8.2f} µs per step (rounds' p50 {p50:.2f}); adds {mean - bare:6.2f} µs{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
