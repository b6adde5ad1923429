"""The jobs `squeue --json` shows (OpenAPI v0.0.38 on Slurm 22.05), as frozen values. Pure.

Read: `job_id`, `name`, `user_name`, `job_state`, `nodes` (a hostlist expression), `batch_flag` (a batch job,
from sbatch; an srun or salloc allocation is not) and `requeue` (the job may be requeued: `--requeue`, or
JobRequeue=1 in slurm.conf); `restart_cnt` counts its requeues; `comment` (sbatch --comment, as written) is
where a job asks for a signal instead of a requeue (remediate.slurm.signals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remediate.slurm.errors import SlurmError, SlurmUnavailable
from remediate.slurm.hostlist import expand

ON_A_NODE = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING"})
"""Job states in which a job holds its nodes."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    user: str
    state: str
    """RUNNING, PENDING, ... (upper case)."""
    nodes: tuple[str, ...]
    batch: bool
    requeue: bool
    restarts: int = 0
    comment: str = ""

    @property
    def requeueable(self) -> bool:
        """`scontrol requeue` takes it: a batch job that allows requeueing."""
        return self.batch and self.requeue

    def why_not_requeueable(self) -> str | None:
        if not self.batch:
            return "not a batch job (srun or salloc): Slurm requeues batch jobs only"
        if not self.requeue:
            return "the job does not allow requeueing (--no-requeue, or JobRequeue=0 without --requeue)"
        return None

    def summary(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "name": self.name, "user": self.user, "state": self.state,
                "nodes": list(self.nodes)}  # fmt: skip


def parse_job(entry: Mapping[str, Any]) -> SlurmJob:
    try:
        job_id = int(entry["job_id"])
        nodes = expand(str(entry.get("nodes") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise SlurmError(f"squeue --json: a job that cannot be read ({exc})") from exc
    return SlurmJob(
        job_id=job_id,
        name=str(entry.get("name") or ""),
        user=str(entry.get("user_name") or ""),
        state=str(entry.get("job_state") or "").upper(),
        nodes=nodes,
        batch=bool(entry.get("batch_flag")),
        requeue=bool(entry.get("requeue")),
        restarts=int(entry.get("restart_cnt") or 0),
        comment=str(entry.get("comment") or ""),
    )


def parse_jobs(answer: Any, command: str = "squeue --json") -> tuple[SlurmJob, ...]:
    """The jobs of a `squeue --json` answer; SlurmUnavailable when it carries errors (as sinfo's)."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("jobs"), list):
        raise SlurmError(f"{command}: unexpected answer (no `jobs` list); is this Slurm 22.05 or later?")
    errors = [e for e in answer.get("errors") or () if isinstance(e, Mapping)]
    if errors:
        words = "; ".join(f"{e.get('error', 'error')} (errno {e.get('errno', '?')})" for e in errors)
        raise SlurmUnavailable(f"{command}: slurmctld did not answer: {words}")
    return tuple(parse_job(entry) for entry in answer["jobs"] if isinstance(entry, Mapping))
