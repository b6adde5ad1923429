"""The benchmark: all-reduce of a float32 tensor across `ranks` processes on this node, timed as nccl-tests
times it (bus bandwidth = bytes / seconds per all-reduce x 2(n-1)/n, in GB/s), every sum checked.

One process per rank, started here (spawn) and meeting over TCP on 127.0.0.1: the burn-in proves one node,
so no rendezvous crosses the network and nothing needs Slurm's or Kubernetes' view of the job. gloo runs on
CPU; nccl puts rank r on GPU r. torch is imported here only (the actions that judge the output never load it).
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from dataclasses import dataclass
from typing import Any

from remediate.burnin.verdict import CPU_MODEL, Measurement

GB = 1e9


@dataclass(frozen=True)
class BurninSpec:
    backend: str
    ranks: int
    megabytes: int
    iters: int
    warmup: int = 3
    seconds: float = 300.0
    """The whole run's time limit: past it, every rank is ended and the burn-in fails."""


class BurninFailed(RuntimeError):
    """A rank of the benchmark failed or did not report."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank(rank: int, spec: BurninSpec, port: int, results: Any) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(spec.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=spec.ranks)
    try:
        device = torch.device("cuda", rank) if spec.backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        elements = spec.megabytes * 1_000_000 // 4
        data = torch.ones(elements, dtype=torch.float32, device=device)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        for _ in range(spec.warmup):
            data.fill_(1.0)
            dist.all_reduce(data)
        correct = True
        sync()
        dist.barrier()
        elapsed = 0.0
        for _ in range(spec.iters):
            data.fill_(1.0)  # outside the timed part: only the all-reduce is measured
            sync()
            start = time.perf_counter()
            dist.all_reduce(data)
            sync()
            elapsed += time.perf_counter() - start
            # Every element must be exactly the number of ranks (small integers are exact in float32).
            correct = correct and bool(torch.all(data == float(spec.ranks)).item())
        # The slowest rank's time is the collective's; a wrong sum on any rank fails them all.
        summary = torch.tensor([elapsed, 0.0 if correct else 1.0], dtype=torch.float64, device=device)
        dist.all_reduce(summary, op=dist.ReduceOp.MAX)
        if rank == 0:
            model = torch.cuda.get_device_name(device) if device.type == "cuda" else CPU_MODEL
            results.put((float(summary[0].item()), bool(summary[1].item() == 0.0), model))
    finally:
        dist.destroy_process_group()


def measure(spec: BurninSpec) -> Measurement:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    procs = [context.Process(target=_rank, args=(rank, spec, port, results)) for rank in range(spec.ranks)]
    deadline = time.monotonic() + spec.seconds
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    if late := [rank for rank, proc in enumerate(procs) if proc.is_alive()]:
        for proc in procs:
            proc.kill()
            proc.join(5)
        raise BurninFailed(f"ranks {late} still running after {spec.seconds:g} s: ended")
    failed = [f"rank {rank}: exit status {proc.exitcode}" for rank, proc in enumerate(procs) if proc.exitcode != 0]
    if failed:
        raise BurninFailed("; ".join(failed))
    if results.empty():
        raise BurninFailed("rank 0 reported nothing")
    elapsed, correct, model = results.get(timeout=5)
    size = spec.megabytes * 1_000_000 // 4 * 4
    per_iter = elapsed / spec.iters
    bus = size / per_iter * 2 * (spec.ranks - 1) / spec.ranks / GB if per_iter > 0 else 0.0
    return Measurement(figure=round(bus, 6), unit="GB/s", model=model, backend=spec.backend, ranks=spec.ranks,
                       bytes=size, iters=spec.iters, seconds_per_iter=per_iter, correct=correct)  # fmt: skip
