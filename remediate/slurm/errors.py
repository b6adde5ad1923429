"""Slurm's answers, translated at the boundary into remediate's own tree.

    ActionError
    ├── SlurmError                 Slurm refused (invalid request, permission) or answered nonsense
    │   ├── SlurmNodeNotFound      no node of that name in the cluster
    │   └── SlurmConfigError       no Slurm configured here (slurm_conf unset or missing, no scontrol)
    └── RetryableActionError
        └── SlurmUnavailable       slurmctld did not answer (down, unreachable, timed out): trying again may succeed

`remediate.slurm.client` is the one place where a command's exit status, stderr and time-out become these; the
message names the command and Slurm's own words (`scontrol update NodeName=gpu-7 ...: Invalid node name
specified`).
"""

from __future__ import annotations

from remediate.errors import ActionError, RetryableActionError


class SlurmError(ActionError):
    """Slurm refused the request."""


class SlurmNodeNotFound(SlurmError):
    """Slurm knows no node of that name."""


class SlurmConfigError(SlurmError):
    """No Slurm cluster is configured: set slurm_conf to the cluster's slurm.conf."""


class SlurmUnavailable(RetryableActionError):
    """slurmctld did not answer (down, unreachable, or slower than slurm_command_timeout); trying again may succeed."""
