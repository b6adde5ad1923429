"""A tiny PyTorch job launched by tests/integration/test_torchrun.py with torchrun, 2 gloo ranks (not a test module).

Written as a user would from docs/training-protocol.md's torchrun example: init the process group,
wrap the model in DistributedDataParallel, `TorchCheckpoints` (no ``good_loss_below``: the library's
default good mark) and `TrainingControl(...).register()`, then the quick-start loop on every rank
(``if control.skip_batch(): continue`` ... ``step = control.poll(step, loss)``). The data loader takes
``--batch-seconds`` per batch, skipped or not. A registration refused with `JobNameInUse` is not
caught: the exception ends rank 0 and torchrun ends the job, as in a user's script.

The model starts at the data's true weights, so the loss is the noise's (~2). From batch
``--spike-at`` the targets jump by ``--spike-shift`` (loss ~133 at that batch); the model then
learns the bad data (its loss falls back to ~2 with very different weights). Each rank appends
``{"event": ...}`` lines to ``<out>/rank<r>.jsonl``: ``registered`` (pid), ``checkpoint`` (rank 0:
step, loss, good, saved_at, checksum), ``applied`` (what a command changed on this rank: step, lr,
weights checksum, whether it came while skipping) and ``final``. The job stops ``--linger``
iterations after its ``--stop-after`` th applied command (the same iteration on every rank, since
every rank applies a command at the same batch), or after ``--max-iterations``.

Restarts: every start calls ``ckpts.resume()`` (docs/training-protocol.md "Checkpoints")
and records ``resumed`` (restart count, step, checksum) when it continued a checkpoint; a ``restart``
command ends the loop with `RestartRequested` (exit status 75) and torchrun, given
``--max-restarts``, starts the job again. A restarted job (``$TORCHELASTIC_RESTART_COUNT`` > 0)
stops after ``--after-restart`` iterations.

Fail-slow (tests/e2e/test_straggler.py): with ``--metrics-ports`` rank r exports StepMetrics on the r-th
port (start at the top of the iteration, step before backward). ``--nodes "b,a;b,c"`` names each rank's node for
the first start and for the restarted one (NODE_NAME, the `node` label): the second list is where the scheduler
put the job once the slow node was cordoned and tainted. A rank on ``--slow-node`` takes ``--slow-seconds`` more
per step once ``--slow-after`` seconds have passed (``slowed`` event: when and where); ``--slow-rank`` narrows
that to one rank (a slow GPU, not a slow node). With ``--stop-file``, every rank stops at the first iteration after
that file appears (an all-reduce: the same iteration everywhere).

Under Slurm (tests/e2e/test_slurm_failslow.py: torchrun in a requeueable sbatch job) the rank's node labels come
from placement (SLURMD_NODENAME), while the slow node is matched against the job's allocation, SLURM_JOB_NODELIST
(a one-node job): the tests' cluster has one slurmd, which runs the jobs of every node and names itself in
SLURMD_NODENAME. A requeued job is the same job started again: its events carry SLURM_RESTART_COUNT.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from remediate.training import ControlOptions, TorchCheckpoints, TrainingControl
from remediate.training.metrics import StepMetrics


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def batch(index: int, rank: int, spike: bool, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(index * 2 + rank)
    x = torch.randn(64, 4, generator=generator)
    noise = torch.randn(64, 1, generator=generator) * 2**0.5  # mse ~2 at the true weights
    y = x.sum(dim=1, keepdim=True) + noise + (shift if spike else 0.0)
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-seconds", type=float, default=0.02)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--spike-at", type=int, default=0, help="first batch of bad data (0: none)")
    parser.add_argument("--spike-shift", type=float, default=11.5)
    parser.add_argument("--stop-after", type=int, default=1)
    parser.add_argument("--linger", type=int, default=5)
    parser.add_argument("--max-iterations", type=int, default=3000)
    parser.add_argument("--after-restart", type=int, default=10, help="iterations of a restarted job")
    parser.add_argument("--metrics-ports", default="", help="StepMetrics port of each rank, comma-separated")
    parser.add_argument("--nodes", default="", help="each rank's node, per start: 'node-b,node-a;node-b,node-c'")
    parser.add_argument("--slow-node", default="", help="a rank on this node takes --slow-seconds more per step")
    parser.add_argument("--slow-seconds", type=float, default=0.0)
    parser.add_argument("--slow-after", type=float, default=0.0, help="seconds of normal steps before it slows")
    parser.add_argument("--slow-rank", type=int, default=-1, help="only this rank slows (-1: every rank there)")
    parser.add_argument("--stop-file", default="", help="every rank stops once this file exists")
    args = parser.parse_args()

    dist.init_process_group("gloo")  # torchrun's env:// rendezvous; before register(): the control sees the ranks
    rank = dist.get_rank()
    events = (Path(args.out) / f"rank{rank}.jsonl").open("a")

    def emit(event: str, **fields: Any) -> None:
        events.write(json.dumps({"event": event, "rank": rank, "t": time.time(), **fields}) + "\n")
        events.flush()

    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    with torch.no_grad():
        net.weight.fill_(1.0)
        net.bias.zero_()
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ckpts = TorchCheckpoints(args.checkpoints, model=model, optimizer=opt, scheduler=sched, keep=100)
    control = TrainingControl(
        args.job,
        root=args.root,
        optimizer=opt,
        scheduler=sched,
        checkpoints=ckpts,
        options=ControlOptions(heartbeat_interval=0.2),
    ).register()
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    requeues = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    allocation = os.environ.get("SLURM_JOB_NODELIST", "")
    emit("registered", pid=os.getpid(), world_size=dist.get_world_size(), restarts=restarts, requeues=requeues,
         allocation=allocation)  # fmt: skip
    node = ""
    if args.nodes:
        starts = [start.split(",") for start in args.nodes.split(";")]
        node = os.environ["NODE_NAME"] = starts[min(restarts, len(starts) - 1)][rank]
    metrics = StepMetrics(args.job, port=int(args.metrics_ports.split(",")[rank])) if args.metrics_ports else None
    where = node or allocation  # where the rank runs, for the slow node (see the module's note on Slurm)
    slow_here = bool(where) and where == args.slow_node and args.slow_rank in (-1, rank)
    slow_from = time.time() + args.slow_after if slow_here else float("inf")
    slowed = False

    step = iteration = applied = 0
    resumed = ckpts.resume()  # None on a fresh start: this test's checkpoint directory is new
    if resumed is not None:
        step = resumed.step
        emit("resumed", restarts=restarts, requeues=requeues, allocation=allocation, step=step,
             checksum=checksum(model))  # fmt: skip
    dist.barrier()  # every rank resumed before rank 0 saves (and so names a new run in the index)
    stop_at = args.after_restart if restarts else args.max_iterations
    while iteration < stop_at:
        if metrics is not None:
            metrics.start()
        time.sleep(args.batch_seconds)  # the data loader: a skipped batch costs as much as a used one
        if time.time() >= slow_from:  # the slow node: a throttled GPU, a starved loader
            if not slowed:
                slowed = True
                emit("slowed", node=where, iteration=iteration, step=step)
            time.sleep(args.slow_seconds)
        iteration += 1
        x, y = batch(iteration, rank, args.spike_at > 0 and iteration >= args.spike_at, args.spike_shift)
        lr = opt.param_groups[0]["lr"]
        if control.skip_batch():
            if opt.param_groups[0]["lr"] != lr:  # a command served while skipping
                applied += 1
                emit("applied", iteration=iteration, step_before=step, step_after=step, lr_before=lr,
                     lr=opt.param_groups[0]["lr"], checksum=checksum(model), while_skipping=True)  # fmt: skip
            if applied >= args.stop_after:
                stop_at = min(stop_at, iteration + args.linger)
            continue
        loss = torch.nn.functional.mse_loss(model(x), y)
        if metrics is not None:
            metrics.step(loss=loss.item(), samples=len(x))  # before backward: the all-reduce waits for the slowest
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        if step % args.checkpoint_every == 0:
            info = ckpts.save(step, loss.item())
            if rank == 0:
                emit("checkpoint", step=step, loss=loss.item(), good=info.good, saved_at=info.saved_at,
                     checksum=checksum(model))  # fmt: skip
        new_step = control.poll(step, loss)
        if new_step != step or opt.param_groups[0]["lr"] != lr:
            applied += 1
            emit("applied", iteration=iteration, step_before=step, step_after=new_step, lr_before=lr,
                 lr=opt.param_groups[0]["lr"], checksum=checksum(model), while_skipping=False)  # fmt: skip
            step = new_step
        if applied >= args.stop_after:
            stop_at = min(stop_at, iteration + args.linger)
        if args.stop_file:
            stop = torch.tensor([float(Path(args.stop_file).exists())])
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
            if stop.item():
                break
    control.close()
    if metrics is not None:
        metrics.close()
    emit(
        "final",
        node=node,
        restarts=restarts,
        requeues=requeues,
        step=step,
        lr=opt.param_groups[0]["lr"],
        checksum=checksum(model),
        skipped=control.batches_skipped,
    )
    # Every rank must be done with its collectives before either tears gloo down.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
