"""Where this process sits in its training job (its rank, the job's world size, its index on the node, the
node) as its launcher wrote it into the environment, so that a job needs no configuration of its own:

- torchrun: RANK, WORLD_SIZE, LOCAL_RANK;
- Slurm's srun (one task per rank): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURMD_NODENAME, SLURM_JOB_ID;
- Kubernetes' downward API: NODE_NAME (the pod's spec.nodeName).

torchrun's variables win where both are set: under `srun torchrun ...` srun starts one torchrun agent per node,
so SLURM_PROCID is the agent's index, and torchrun gives each worker its rank. The node is the name the
scheduler acts on: NODE_NAME (what k8s.* steps take), else SLURMD_NODENAME (Slurm's NodeName, what slurm.*
steps take, which need not be the host name), else the host name. An initialised torch.distributed group knows
better still: its callers ask it first. Standard library only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass


class PlacementError(ValueError):
    """A launcher variable is malformed (the message names it and its value)."""


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int | None
    """The process's index on its node (torchrun's LOCAL_RANK, Slurm's SLURM_LOCALID); None where unknown."""
    node: str
    slurm_job: str | None
    """SLURM_JOB_ID: the Slurm job the process belongs to; None outside Slurm."""


def from_environment(environ: Mapping[str, str] = os.environ) -> Placement:
    """This process's placement from `environ`; rank 0 of 1 where no launcher says otherwise."""
    if "RANK" in environ or "WORLD_SIZE" in environ:
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    elif "SLURM_PROCID" in environ:
        names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
    else:
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    rank_name, world_name, local_name = names
    rank = _count(environ, rank_name)
    world_size = _count(environ, world_name)
    rank, world_size = (0 if rank is None else rank), (1 if world_size is None else world_size)
    if world_size < 1 or rank >= world_size:
        raise PlacementError(
            f"{rank_name}={rank} with {world_name}={world_size}: a rank is below the world size (at least 1)"
        )
    local = _count(environ, local_name)
    node = environ.get("NODE_NAME") or environ.get("SLURMD_NODENAME") or socket.gethostname()
    return Placement(rank, world_size, local, node, environ.get("SLURM_JOB_ID") or None)


def _count(environ: Mapping[str, str], name: str) -> int | None:
    """The variable's value as a count; None where it is unset or empty."""
    value = environ.get(name, "")
    if value == "":
        return None
    if not value.isdigit():
        raise PlacementError(f"{name}: expected a non-negative integer, got {value!r}")
    return int(value)
