"""TrainingGradNormSpike against TrainingLossSpike on a real torch job (CPU) with an injected bad batch window: how
many steps earlier the gradient norm rule fires, and how often either fires over clean runs (false positives).

    .venv/bin/python bench/training_gradnorm.py           # ~10 min on 2 shared cores
    .venv/bin/python bench/training_gradnorm.py --quick   # one seed, two windows, a 2 h clean run: ~1 min

The job: a 3-layer MLP classifier (32 features, 10 classes, labels from a fixed random teacher), AdamW (lr 3e-3,
weight decay 0.1, 200 warm-up steps), batches of 64, gradients clipped at 1.0 with
`torch.nn.utils.clip_grad_norm_` (the usual LLM setting; its pre-clip norm hovers around the clip, as in
LLM runs). Four of the features are always 0 in clean data (a missing-value slot); the bad batch window is a bad
shard whose preprocessing wrote a sentinel value into that slot, for `window` consecutive batches, 50 minutes into
the run (past the rules' 35 minutes of history). Severities: sentinel 8, 16, 32, 64, windows of 60 and 300 steps;
and one model that the shock collapses (lr 1e-2, not clipped: its norm spikes for a few steps, then falls to a
tenth while its loss stays high).

What the rules see is what `StepMetrics` exports: `step(loss=loss.item())` each step and
`observe_grad_norm(norm)` with the tensor clip_grad_norm_ returned (read at most every 5 s: the largest norm since
the last read), on the job's own clock, one step = `--step-seconds` (default: 1 s, then 5 s: a small job's step
and a large one's; the rules' `for: 1m` is time, so the same minute is 60 steps or 12). The registry is scraped every
15 s of that clock (the sample a Prometheus scrape would read). The shipped rules
(alertmanager/rules/training.rules.yml) are then evaluated on those series by `promtool test rules`, the real
rule engine, every 15 s: each evaluation expects no alert, so promtool lists every evaluation at which a rule was
firing, which gives the firing timeline. Reported: per severity and seed, the step (from the window's start)
at which each rule first fired and the lead of the norm rule in steps; per clean run, the firing episodes of each
rule (false positives). Asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from remediate.training.metrics import RankLabels, StepMetrics

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "alertmanager" / "rules" / "training.rules.yml"
SCRAPE_S = 15
LABELS = RankLabels(training_job="bench", rank="0", world_size="1", node="cpu", gpu="")
ALERTS = ("TrainingGradNormSpike", "TrainingLossSpike")
WINDOW_AT_S = 3000
"""The bad window starts 50 minutes into the run, past the rules' 35 minutes of history."""
AFTER_S = 900
"""The run goes on 15 minutes after the window: time for the loss rule to fire late."""


@dataclass(frozen=True)
class Window:
    sentinel: float
    steps: int
    lr: float = 3e-3
    clip: float = 1.0
    """inf: not clipped (clip_grad_norm_ still returns the norm)."""

    @property
    def note(self) -> str:
        return "" if (self.lr, self.clip) == (3e-3, 1.0) else f"  [lr {self.lr:g}, not clipped]"


def train(seed: int, total: int, window: Window | None, step_s: float) -> tuple[list[float], list[float]]:
    """The job; the loss and grad norm samples a scrape every SCRAPE_S seconds of its clock reads."""
    window_at = round(WINDOW_AT_S / step_s)
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    features, classes = 32, 10
    teacher = torch.randn(features, classes, generator=data)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
        torch.nn.Linear(64, classes),
    )  # fmt: skip
    lr, clip = (window.lr, window.clip) if window is not None else (3e-3, 1.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 200))
    now = [0.0]
    registry = CollectorRegistry()
    metrics = StepMetrics("bench", registry=registry, labels=LABELS, clock=lambda: now[0])
    values = {"training_job": "bench", "rank": "0", "world_size": "1", "node": "cpu", "gpu": ""}
    losses: list[float] = []
    norms: list[float] = []
    next_scrape = SCRAPE_S
    for step in range(total):
        x = torch.randn(64, features, generator=data)
        x[:, -4:] = 0.0
        y = (x @ teacher + 0.5 * torch.randn(64, classes, generator=data)).argmax(1)
        if window is not None and window_at <= step < window_at + window.steps:
            x[:, -4:] = window.sentinel
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        warmup.step()
        now[0] = (step + 1) * step_s
        metrics.step(loss=loss.item(), grad_norm=norm)
        while now[0] >= next_scrape:
            losses.append(registry.get_sample_value("training_loss", values) or 0.0)
            norms.append(registry.get_sample_value("training_grad_norm", values) or 0.0)
            next_scrape += SCRAPE_S
    return losses, norms


def duration_s(text: str) -> int:
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", text))


def firing(losses: list[float], norms: list[float], workdir: Path, norm_for: str | None) -> dict[str, list[int]]:
    """Per alert, the evaluation times (s) at which promtool found it firing on these series (`norm_for`: another
    `for` for TrainingGradNormSpike than the shipped one)."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == "TrainingGradNormSpike" and norm_for is not None:
                rule["for"] = norm_for
    (workdir / "training.rules.yml").write_text(yaml.safe_dump(rules, width=1 << 30))
    evals = [SCRAPE_S * (i + 1) for i in range(len(losses) - 1)]
    series = 'training_job="bench", instance="cpu:9400", job="trainer-metrics"'
    test = {
        "rule_files": ["training.rules.yml"],
        "evaluation_interval": f"{SCRAPE_S}s",
        "tests": [
            {
                "interval": f"{SCRAPE_S}s",
                "input_series": [
                    {"series": f"training_loss{{{series}}}", "values": " ".join(repr(v) for v in losses)},
                    {"series": f"training_grad_norm{{{series}}}", "values": " ".join(repr(v) for v in norms)},
                ],
                "alert_rule_test": [
                    {"eval_time": f"{t}s", "alertname": alert, "exp_alerts": []} for t in evals for alert in ALERTS
                ],
            }
        ],
    }
    (workdir / "bench.test.yml").write_text(yaml.safe_dump(test, width=1 << 30))
    done = subprocess.run(
        ["promtool", "test", "rules", "bench.test.yml"], cwd=workdir, capture_output=True, text=True, check=False
    )
    found: dict[str, list[int]] = {alert: [] for alert in ALERTS}
    for alert, at in re.findall(r"alertname: (\w+), time: ([0-9hms]+),", done.stdout + done.stderr):
        found[alert].append(duration_s(at))
    if done.returncode != 0 and not any(found.values()):
        sys.exit(f"promtool failed: {done.stdout}{done.stderr}")
    return {alert: sorted(times) for alert, times in found.items()}


def episodes(times: list[int]) -> int:
    """Firing episodes: runs of consecutive evaluations."""
    return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > SCRAPE_S)


def first_step(times: list[int], step_s: float) -> int | None:
    """The step (from the window's first) at which the rule first fired in or after the window, None: never."""
    after = [t for t in times if t >= WINDOW_AT_S]
    return None if not after else round((after[0] - WINDOW_AT_S) / step_s)


def before_window(times: list[int]) -> int:
    """Firing episodes that began before the bad window: false positives."""
    return episodes([t for t in times if t < WINDOW_AT_S])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clean-hours", type=float, default=4.0, help="simulated hours of each clean run")
    parser.add_argument("--step-seconds", type=float, nargs="+", default=[1.0, 5.0], help="one step's time(s)")
    parser.add_argument("--norm-for", help="try another `for` for TrainingGradNormSpike (e.g. 30s); default: shipped")
    parser.add_argument("--quick", action="store_true", help="one seed, two windows, 1 s steps, a 2 h clean run")
    args = parser.parse_args()
    if shutil.which("promtool") is None:
        sys.exit("promtool is needed (Debian: apt-get install prometheus)")
    seeds = range(1 if args.quick else args.seeds)
    severities = [Window(32.0, 300), Window(64.0, 300)] if args.quick else [
        *(Window(s, n) for s in (8.0, 16.0, 32.0, 64.0) for n in (60, 300)),
        Window(16.0, 300, lr=1e-2, clip=float("inf")),  # the shock collapses an unclipped, hotter model
    ]  # fmt: skip
    clean_hours = 2.0 if args.quick else args.clean_hours
    with tempfile.TemporaryDirectory(prefix="bench-gradnorm-") as scratch:
        for step_s in [1.0] if args.quick else args.step_seconds:
            report(step_s, severities, seeds, clean_hours, Path(scratch), args.norm_for)


def report(
    step_s: float, severities: list[Window], seeds: range, clean_hours: float, workdir: Path, norm_for: str | None
) -> None:
    rule = "the shipped rules" if norm_for is None else f"TrainingGradNormSpike with for: {norm_for}"
    print(f"\nstep {step_s:g} s, {rule}, scrape and evaluation every {SCRAPE_S} s; window {WINDOW_AT_S // 60} min in")
    print(f"{'sentinel':>8} {'window':>6} {'seed':>4}  {'norm rule fires':>15}  {'loss rule fires':>15}  lead (steps)")
    leads: list[int] = []
    fired_count = {alert: 0 for alert in ALERTS}
    early_count = {alert: 0 for alert in ALERTS}
    for window in severities:
        for seed in seeds:
            losses, norms = train(seed, round((WINDOW_AT_S + AFTER_S) / step_s) + window.steps, window, step_s)
            fired = firing(losses, norms, workdir, norm_for)
            norm_at = first_step(fired["TrainingGradNormSpike"], step_s)
            loss_at = first_step(fired["TrainingLossSpike"], step_s)
            for alert, at in zip(ALERTS, (norm_at, loss_at), strict=True):
                fired_count[alert] += at is not None
            if norm_at is not None and loss_at is not None:
                lead = str(loss_at - norm_at)
                leads.append(loss_at - norm_at)
            else:
                lead = "loss rule silent" if norm_at is not None else "-" if loss_at is None else "norm rule silent"
            shown = [f"step {a:+d}" if a is not None else "never" for a in (norm_at, loss_at)]
            early = [before_window(fired[alert]) for alert in ALERTS]
            for alert, count in zip(ALERTS, early, strict=True):
                early_count[alert] += count
            note = f"  [{early[0]} / {early[1]} episodes before the window]" if any(early) else ""
            row = f"{window.sentinel:>8g} {window.steps:>6} {seed:>4}  {shown[0]:>15}  {shown[1]:>15}"
            print(f"{row}  {lead}{window.note}{note}")
    runs = len(severities) * len(seeds)
    print(f"fired in {runs} injected runs: " + ", ".join(f"{a} {n}" for a, n in fired_count.items()))
    print("false positives before the window: " + ", ".join(f"{a} {n}" for a, n in early_count.items()))
    if leads:
        median = statistics.median(leads)
        spread = f"{min(leads)} to {max(leads)}"
        print(f"lead of the norm rule where both fired (negative: later): median {median:g} steps, {spread}")
    total = round(clean_hours * 3600 / step_s)
    print(f"clean runs: {clean_hours:g} h ({total} steps) each, no bad window")
    for seed in seeds:
        fired = firing(*train(seed, total, None, step_s), workdir, norm_for)
        counts = ", ".join(f"{alert} {episodes(fired[alert])}" for alert in ALERTS)
        print(f"  seed {seed}: firing episodes (false positives): {counts}")


if __name__ == "__main__":
    main()
