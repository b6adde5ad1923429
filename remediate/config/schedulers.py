"""Which schedulers a site runs: the `schedulers` setting, and the scheduler an action family acts on. Pure.

The shipped ladders carry the node steps of each scheduler side by side (`k8s.cordon`, `k8s.taint`,
`k8s.drain` beside `slurm.drain`, `slurm.requeue`): the two do not map one to one (Kubernetes evicts through
PodDisruptionBudgets and taints; Slurm drains with a reason and requeues), and a run's audit must name the verb
that ran. A server loads only the steps of the schedulers it runs (remediate.playbooks.loading leaves the others
out and says so in `remediate playbooks validate` and dry-run), so one ladder — its rungs, hold times, repeat
offenders, hand-off and resolve path — serves a Kubernetes site, a Slurm site and Slurm on Kubernetes alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any


class Scheduler(StrEnum):
    KUBERNETES = "kubernetes"
    SLURM = "slurm"


DEFAULT_SCHEDULERS: tuple[Scheduler, ...] = (Scheduler.KUBERNETES,)
"""What a server runs unless told: Kubernetes, as every release before the Slurm steps did."""
NONE = "none"
"""`schedulers: none`: GPU, training and notify steps only (hosts under no scheduler)."""


class JobPath(StrEnum):
    """A step's `jobs:` key: the restart path it belongs to. A training job restarts one way under Slurm (a
    checkpoint, then `scontrol requeue`: Slurm starts it again off the drained node) and another under a
    launcher (it exits 75 and torchrun --max-restarts, an elastic launcher, a JobSet or PyTorchJob starts it
    again). A site whose schedulers name slurm runs its training as Slurm jobs (Slurm on Kubernetes too)."""

    SLURM = "slurm"
    LAUNCHER = "launcher"


def job_path(schedulers: Iterable[Scheduler]) -> JobPath:
    """How the training jobs of a site with these schedulers restart."""
    return JobPath.SLURM if Scheduler.SLURM in schedulers else JobPath.LAUNCHER


def to_schedulers(value: Any) -> tuple[Scheduler, ...]:
    """A list, or a comma-separated string, of scheduler names; `none` (or an empty list) for none."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"must be a list of {', '.join(Scheduler)} (or none)")
    names = [str(item).strip().lower() for item in items if str(item).strip()]
    if names == [NONE]:
        return ()
    known = {s.value for s in Scheduler}
    bad = [name for name in names if name not in known]
    if bad:
        raise ValueError(f"must name schedulers among {', '.join(known)} (or none), got {', '.join(bad)}")
    return tuple(dict.fromkeys(Scheduler(name) for name in names))


def describe(schedulers: Iterable[Scheduler]) -> str:
    """`kubernetes, slurm`, or `none`."""
    return ", ".join(schedulers) or NONE
