"""Per-rank step metrics under the names the shipped rules read (docs/training-protocol.md, "Per-rank step metrics").

    metrics = StepMetrics("llm-7b", port=9400)   # or registry=<the job's CollectorRegistry>
    for batch in loader:
        metrics.start()
        loss = model(batch)
        metrics.step(loss=loss.item(), samples=len(batch))   # .item() waits for the GPU: its work is counted
        loss.backward()
        ...

Every rank calls `step` once per optimizer step. It observes the time since the previous `step` or `start` call on
`training_step_duration_seconds`, a Summary without quantiles (Prometheus computes a rank's mean step time as
rate(_sum) / rate(_count), the input of TrainingStragglerRank and TrainingStepTimeRegression).

In synchronous data parallel every rank waits for the slowest one in the gradient all-reduce (and in
TrainingControl.poll's broadcast), so the whole step lasts as long on every rank and a straggler cannot be told
apart by it. Time the rank's own work instead: `start()` at the top of the step, `step()` before
`loss.backward()` (data loading and forward, where a slow GPU or a starved loader shows). Without data parallel,
`step()` alone times whole steps.

The global gradient norm, when the job gives it (`observe_grad_norm(norm)` after clipping, or
`step(..., grad_norm=norm)`), becomes `training_grad_norm`, the input of TrainingGradNormSpike, the signal that
usually comes before a loss spike or a NaN:

        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # a tensor: not read here
        metrics.observe_grad_norm(norm)                                   # no GPU sync (remediate.training.gradnorm)
        optimizer.step()

A tensor is not read when given: the largest norm since the last read stays on the device and is read at most
once every `grad_norm_sync_every_s` seconds (default 5), so the norm costs no GPU sync per step; the gauge holds
the largest norm of the steps between two reads, so a spike between them is not lost.

`training_loss`, `training_grad_norm` and `training_samples_total` are exported by rank 0 only: the loss and grad
norm rules and TrainingThroughputDrop alert per series, and one series per job keeps them to one alert per job.

Every series carries `training_job`, `rank`, `world_size`, `node` and `gpu` (RankLabels.detect). `training_job`,
not `job`: Prometheus' scrape sets `job` and renames the job's own to `exported_job`.

Only prometheus_client is needed; torch is read only when the job has already imported it.

PyTorch Lightning: `remediate.training.lightning.StepMetricsCallback` makes these two calls from the Trainer's hooks.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Summary, start_http_server

from remediate.training.gradnorm import DEFAULT_SYNC_EVERY_S, GradNormExport
from remediate.training.placement import PlacementError, from_environment

LABELS = ("training_job", "rank", "world_size", "node", "gpu")


class MetricsLabelError(ValueError):
    """A label StepMetrics needs is missing or malformed (the message names it)."""


@dataclass(frozen=True)
class RankLabels:
    """The labels of one rank's series; "" where unknown (gpu on a CPU job)."""

    training_job: str
    rank: str
    world_size: str
    node: str
    gpu: str

    @classmethod
    def detect(cls, training_job: str, environ: Mapping[str, str] = os.environ) -> RankLabels:
        """rank/world_size from torch.distributed when initialised, else from the launcher's environment
        (torchrun's RANK/WORLD_SIZE, else Slurm's SLURM_PROCID/SLURM_NTASKS: remediate.training.placement), else
        0/1; node from NODE_NAME (the downward API's spec.nodeName), else SLURMD_NODENAME (Slurm's NodeName), else
        the host name; gpu: the current CUDA device when torch has CUDA, else the index on the node (LOCAL_RANK,
        SLURM_LOCALID: the GPU with one process per GPU), else ""."""
        if not training_job:
            raise MetricsLabelError("training_job: a job name is required (the name given to TrainingControl)")
        try:
            placed = from_environment(environ)
        except PlacementError as exc:
            raise MetricsLabelError(str(exc)) from exc
        rank, world_size, node = str(placed.rank), str(placed.world_size), placed.node
        gpu = "" if placed.local_rank is None else str(placed.local_rank)
        torch = sys.modules.get("torch")
        if torch is not None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = str(dist.get_rank()), str(dist.get_world_size())
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                gpu = str(torch.cuda.current_device())
        return cls(training_job=training_job, rank=rank, world_size=world_size, node=node, gpu=gpu)


class StepMetrics:
    """The training series of one rank, in `registry` (default: prometheus_client's global one), served on
    `port` when given (start_http_server; leave it out when the job already serves its registry)."""

    def __init__(
        self,
        training_job: str,
        *,
        registry: CollectorRegistry | None = None,
        port: int | None = None,
        addr: str = "0.0.0.0",  # noqa: S104  Prometheus scrapes the job from another host
        labels: RankLabels | None = None,
        clock: Callable[[], float] = time.perf_counter,
        grad_norm_sync_every_s: float = DEFAULT_SYNC_EVERY_S,
    ) -> None:
        self.labels = labels or RankLabels.detect(training_job)
        registry = registry if registry is not None else REGISTRY
        values = asdict(self.labels)
        self._duration = Summary(
            "training_step_duration_seconds", "wall time of one training step on this rank", LABELS, registry=registry
        ).labels(**values)
        # rank 0 only (module docstring); the other ranks register nothing that the rules would see twice.
        self._loss: Any = None
        self._samples: Any = None
        self._grad_norm: GradNormExport | None = None
        if self.labels.rank == "0":
            self._loss = Gauge("training_loss", "latest training loss", LABELS, registry=registry).labels(**values)
            self._samples = Counter("training_samples", "samples trained, all ranks", LABELS, registry=registry).labels(
                **values
            )
            norm = Gauge(
                "training_grad_norm",
                "largest global gradient norm (before clipping) of the steps since the previous export",
                LABELS,
                registry=registry,
            )
            # The series appears with the job's first norm: a job that gives none exports no norm of 0.
            self._grad_norm = GradNormExport(
                lambda: norm.labels(**values), clock=clock, sync_every_s=grad_norm_sync_every_s
            )
        self._clock = clock
        self._last = clock()
        self._server: Any = None
        if port is not None:
            self._server, _ = start_http_server(port, addr=addr, registry=registry)

    def close(self) -> None:
        """Stop serving `port` (nothing to do without one)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def start(self) -> None:
        """The step begins now: the next `step` observes the time since this call (module docstring: call it at
        the top of the step in data parallel; after an evaluation or a checkpoint save it leaves the pause out)."""
        self._last = self._clock()

    @property
    def exports_grad_norm(self) -> bool:
        """Does this rank export the norm (rank 0): the other ranks need not compute it."""
        return self._grad_norm is not None

    @property
    def grad_norm_reads(self) -> int:
        """How many times the norm was read into the gauge (for a tensor, each read is one GPU sync)."""
        return 0 if self._grad_norm is None else self._grad_norm.reads

    def observe_grad_norm(self, value: Any) -> None:
        """The step's global gradient norm: a float, or the one-element tensor clip_grad_norm_ returned (kept on
        its device, read at most once every `grad_norm_sync_every_s`: module docstring). Other ranks ignore it
        (in data parallel every rank clips the same all-reduced gradients)."""
        if self._grad_norm is not None:
            self._grad_norm.observe(value)

    def flush_grad_norm(self) -> None:
        """Export the norm kept since the last read now (the end of training, before a long pause)."""
        if self._grad_norm is not None:
            self._grad_norm.flush()

    def step(self, *, loss: float | None = None, samples: int = 0, grad_norm: Any = None) -> float:
        """Record one step, timed since the last `start` or `step` call; returns its duration in seconds.
        `samples`: this rank's samples in the step (rank 0 counts them times world_size: every rank trains as many).
        NaN/Inf losses are exported as they are (TrainingLossNaN reads them). `grad_norm`: as `observe_grad_norm`,
        for a loop that calls `step` after clipping."""
        if grad_norm is not None:
            self.observe_grad_norm(grad_norm)
        now = self._clock()
        seconds, self._last = now - self._last, now
        self._duration.observe(seconds)
        if self._loss is not None:
            if loss is not None:
                self._loss.set(loss)
            if samples:
                self._samples.inc(samples * int(self.labels.world_size))
        return seconds
