"""One rank of the 2-process gloo job in test_distributed.py (spawned; not a test module).

Trains a tiny DistributedDataParallel model on the CPU, checkpoints every 5 steps on rank 0
(TorchCheckpoints in a shared directory), and polls TrainingControl after every step. It
records, per rank, what each applied command did and the weights right after it, and stops
at a point every rank agrees on (20 iterations after the second command, or a hard cap).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from remediate.training import ControlOptions, TorchCheckpoints, TrainingControl
from remediate.training.protocol import Ack

JOB = "ddp-job"
MAX_ITERATIONS = 3000  # ~30 s: a test that never sends its commands still ends


def run(rank: int, root: str, checkpoint_dir: str, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        _train(rank, Path(root), Path(checkpoint_dir), Path(out_dir))
        # Both ranks must be done with every collective before either tears gloo down: a rank that
        # destroys its group while the peer is still talking aborts the peer (SIGABRT, seen in CI).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train(rank: int, root: Path, checkpoint_dir: Path, out_dir: Path) -> None:
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    checkpoints = TorchCheckpoints(checkpoint_dir, model=model, optimizer=optimizer, scheduler=scheduler, keep=10)
    acks: list[Ack] = []
    control = TrainingControl(
        JOB,
        root=root,
        checkpoints=checkpoints,
        optimizer=optimizer,
        scheduler=scheduler,
        options=ControlOptions(on_ack=acks.append),
    )
    control.register()
    events = []
    step = data_index = iteration = 0
    applied = 0
    applied_at = None
    while iteration < MAX_ITERATIONS:
        iteration += 1
        data_index += 1
        lr_before_skip = optimizer.param_groups[0]["lr"]
        if control.skip_batch():
            # skip_batch keeps serving commands: an lr cut may land right here.
            if optimizer.param_groups[0]["lr"] != lr_before_skip:
                applied += 1
                applied_at = iteration
                events.append(
                    {
                        "iteration": iteration,
                        "step_before": step,
                        "step_after": step,
                        "lr_before": lr_before_skip,
                        "lr_after": optimizer.param_groups[0]["lr"],
                        "weight": model.module.weight.detach().flatten().tolist(),
                        "base_lrs": list(scheduler.base_lrs),
                        "while_skipping": True,
                    }
                )
            time.sleep(0.005)  # a dropped batch is still loaded: the skip takes as long as its batches' loading
            continue
        generator = torch.Generator().manual_seed(data_index * 2 + rank)
        x = torch.randn(8, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if step % 5 == 0:
            checkpoints.save(step, float(loss.detach()))
        before_lr = optimizer.param_groups[0]["lr"]
        new_step = control.poll(step, loss)
        after_lr = optimizer.param_groups[0]["lr"]
        if new_step != step or after_lr != before_lr:
            applied += 1
            applied_at = iteration
            events.append(
                {
                    "iteration": iteration,
                    "step_before": step,
                    "step_after": new_step,
                    "lr_before": before_lr,
                    "lr_after": after_lr,
                    "weight": model.module.weight.detach().flatten().tolist(),
                    "base_lrs": list(scheduler.base_lrs),
                }
            )
            step = new_step
        if applied >= 2 and applied_at is not None and iteration - applied_at >= 20:
            break
        time.sleep(0.005)
    control.close()
    result = {
        "rank": rank,
        "pid": os.getpid(),
        "events": events,
        "iterations": iteration,
        "batches_skipped": control.batches_skipped,
        "world_size": control.world_size,
        "acks": [a.to_dict() for a in acks],
        "final_weight": model.module.weight.detach().flatten().tolist(),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


def run_only_rank0_polls(rank: int, root: str, port: int, out_dir: str) -> None:
    """Rank 1 trains without ever polling and leaves; rank 0 polls. Rank 0 records
    what its poll raised (the field case: a bare gloo "Connection reset by peer")."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    control = TrainingControl("lonely-job", root=Path(root), options=ControlOptions(wake_signal=None))
    control.register()
    if rank == 1:
        # Never polls; its process ends and its connections with it. At once: a return would leave the exit to
        # the interpreter, whose process group teardown can wait on rank 0 (seen under load: rank 0's broadcast
        # then blocks for gloo's 30-minute timeout instead of seeing the reset).
        os._exit(0)
    outcome = "no error"
    try:
        for step in range(1, 3000):
            control.poll(step)
            time.sleep(0.01)
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    (Path(out_dir) / "rank0.txt").write_text(outcome)


def run_exchanges(rank: int, root: str, port: int, out_dir: str, sleep_s: float) -> None:
    """Two ranks polling without training: rank 0 is late for its poll 2 by `sleep_s`; each rank records how
    long its polls 2 and 3 took. Then rank 0 finds a command at poll 4, the last before both ranks close."""
    from tests.support.training import deliver

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    control = TrainingControl(
        "exchange-job", root=Path(root), options=ControlOptions(wake_signal=None, sync_every_s=0)
    ).register()
    control.poll(1)
    dist.barrier()
    if rank == 0:
        time.sleep(sleep_s)
    durations = []
    for step in (2, 3):
        started = time.monotonic()
        control.poll(step)
        durations.append(time.monotonic() - started)
    dist.barrier()
    sent = deliver(Path(root), "exchange-job", "scale_lr", {"factor": 0.5}).id if rank == 0 else None
    dist.barrier()
    control.poll(4)  # rank 0 claims the command here; every rank would apply it at poll 5, which never comes
    control.close()
    dist.barrier()
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps({"durations": durations, "sent": sent}))
    dist.destroy_process_group()
