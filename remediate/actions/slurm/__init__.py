"""`slurm.drain` and `slurm.resume`: take a Slurm node out of service with a reason, and back; `slurm.requeue`:
the batch jobs on a node remediate drained back to the queue; `slurm.handoff`: a node remediate drained handed
to a breakfix system (posted to a sink, its reason naming the owner), which resume then leaves to its owner.

The Slurm peer of `remediate.actions.k8s`, with the same guarantees: plan reads and says what would change,
execute is idempotent, the undo removes only what remediate set, and the drain claims the node from the
circuit breaker first. The node comes from the step's `node` param or the alert's labels in the configured
order (slurm_node_labels), and must be one valid node name and a node of the cluster, or the step fails
before any command runs. slurm.drain refuses a node outside slurm_partitions; slurm.resume never refuses.

slurmctld not answering (down, restarting, slower than slurm_command_timeout) fails the step retryable
(SlurmUnavailable): nothing was changed, or the change was made and the retry's fresh read finds it.

`slurm.burnin`: a short all-reduce on a drained node (srun --no-allocate, so it stays drained), its figure judged
against a baseline per GPU model; a failed burn-in fails the step.

Modules: `common` (options, node, the one read, scope, breaker), `drain` (the pair), `requeue`, `handoff`,
`burnin`.
"""

from __future__ import annotations

from remediate.actions.slurm.burnin import BurninFailedStep, SlurmBurninAction
from remediate.actions.slurm.common import SlurmAction, SlurmOptions
from remediate.actions.slurm.drain import SlurmDrainAction, SlurmResumeAction
from remediate.actions.slurm.handoff import SlurmHandoffAction, SlurmHandoffRefused
from remediate.actions.slurm.requeue import SlurmRequeueAction

__all__ = [
    "BurninFailedStep",
    "SlurmAction",
    "SlurmBurninAction",
    "SlurmDrainAction",
    "SlurmHandoffAction",
    "SlurmHandoffRefused",
    "SlurmOptions",
    "SlurmRequeueAction",
    "SlurmResumeAction",
]
