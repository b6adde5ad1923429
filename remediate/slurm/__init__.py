"""Slurm: the client (scontrol, sinfo, squeue), its errors, node names, jobs, the drain and hand-off reasons.

Why the command-line tools and not slurmrestd: every Slurm site has `scontrol` and `sinfo` and the munge
key they authenticate with on the hosts that run Slurm's commands, and Slurm 22.05's slurmrestd (OpenAPI
v0.0.38) has no node update at all (no drain, resume or reason: checked on 22.05.8, docs/slurm.md). `sinfo
--json` prints the same v0.0.38 structures that slurmrestd serves, so the parsing (remediate.slurm.model)
would be shared by a slurmrestd client for 23.02+ (v0.0.39 updates nodes). The
cluster-wide read is the node cache's (remediate.slurm.nodecache: one `sinfo --json` per interval per
process); the node a step changes is read fresh (`scontrol -o show node`, remediate.slurm.shownode).

May import: remediate.errors only; nothing above it (pyproject.toml's `backends` contract: no actions,
store, breaker or HTTP).
"""

from remediate.slurm.client import SlurmClient
from remediate.slurm.errors import SlurmConfigError, SlurmError, SlurmNodeNotFound, SlurmUnavailable
from remediate.slurm.jobs import SlurmJob, parse_jobs
from remediate.slurm.model import SlurmNode, parse_nodes
from remediate.slurm.names import check_node_name, check_partition_name
from remediate.slurm.nodecache import PartitionCount, SlurmCacheStatus, SlurmCensus, SlurmNodeCache
from remediate.slurm.reason import (
    MARK,
    REASON_MAX,
    HandedTo,
    check_owner,
    drain_reason,
    drained_by_run,
    handed_to,
    handoff_reason,
    safe_text,
)

__all__ = [
    "MARK",
    "REASON_MAX",
    "HandedTo",
    "PartitionCount",
    "SlurmCacheStatus",
    "SlurmCensus",
    "SlurmClient",
    "SlurmConfigError",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmNodeCache",
    "SlurmNodeNotFound",
    "SlurmUnavailable",
    "check_node_name",
    "check_owner",
    "check_partition_name",
    "drain_reason",
    "drained_by_run",
    "handed_to",
    "handoff_reason",
    "parse_jobs",
    "parse_nodes",
    "safe_text",
]
