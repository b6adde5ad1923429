"""The burn-in of `remediate node release NODE`, after its soak passed: the shipped gate's own (`burnin`:
slurm.burnin, `k8s-burnin`: k8s.burnin), one per scheduler the site runs that the release reads, as the ladder
loads one per scheduler in force (both on Slurm on Kubernetes). Each is the action of the registry the executor
builds from the settings (remediate.actions.default_registry: the same ActionDeps, the site's `burnin_*`
settings), taken `for_release`: slurm.burnin then burns in the node handed to breakfix too (the person releasing
it takes it back), and k8s.burnin names its Job from the release's start, not from a run. Planned, then executed,
as a step is.

With no `burnin_baselines` a burn-in reports itself skipped and the release goes on with the soak's proof alone,
as the ladder's resolve does. One that falls short, or cannot run (a node not drained, no `burnin_python`), is a
failure, never a pass: the node stays with its owner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remediate.actions.base import Action, StepContext
from remediate.actions.k8s.burnin import KubeBurninAction
from remediate.actions.messages import SKIPPED_OUTCOME
from remediate.actions.slurm.burnin import SlurmBurninAction
from remediate.errors import ActionError, ParamsError, PartialFailure
from remediate.intake.alertref import AlertRef

PLAYBOOK = "node-release"
"""The playbook name the burn-in's context carries, as the gate's."""
TIMEOUT_S = 15 * 60.0
"""The shipped gate's step timeout of each burn-in (the benchmark's own bound, 5 minutes, and the Job's start)."""


@dataclass(frozen=True)
class BurninOutcome:
    """What one burn-in said: its result (figure, baseline, threshold, verdict; or skipped and why), or why it
    failed (`error`: fell short, with its result, or could not run)."""

    action: str
    node: str
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Passed, or skipped for want of any baseline (the release then rests on its soak, as the ladder's)."""
        return self.error is None

    @property
    def skipped(self) -> bool:
        return self.result.get("outcome") == SKIPPED_OUTCOME

    def line(self) -> str:
        """The one-line outcome: `burn-in: skipped: ...`, or the verdict with figure, threshold and baseline."""
        if self.skipped:
            return f"burn-in: skipped: {self.result.get('reason')}"
        why = self.result.get("why")
        if self.error is None:
            return f"burn-in ({self.action}) passed on {self.node}: {why}"
        if why is not None:
            return f"burn-in ({self.action}) failed on {self.node}: {why}"
        return f"burn-in ({self.action}) could not run on {self.node}: {self.error}"

    def evidence(self) -> list[str]:
        """What the audit keeps of a failed one: its error (fell short: figure, model, threshold, baseline)."""
        return [] if self.error is None else [self.error]


def release_burnins(
    registry_get: Callable[[str], Action], slurm_node: str | None, kube_node: str | None, started: datetime
) -> list[tuple[Action, str]]:
    """(action, node name in its scheduler) of each burn-in to run: slurm.burnin where Slurm has the node
    (`slurm_node`, its NodeName), k8s.burnin where Kubernetes is read (`kube_node`); Slurm's first, as the
    gate's steps are ordered."""
    chosen: list[tuple[Action, str]] = []
    if slurm_node is not None:
        slurm = registry_get("slurm.burnin")
        assert isinstance(slurm, SlurmBurninAction)
        chosen.append((slurm.for_release(), slurm_node))
    if kube_node is not None:
        kube = registry_get("k8s.burnin")
        assert isinstance(kube, KubeBurninAction)
        chosen.append((kube.for_release(started), kube_node))
    return chosen


def run_burnin(
    action: Action, node: str, *, stopping: threading.Event | None = None, timeout_s: float = TIMEOUT_S
) -> BurninOutcome:
    """One burn-in of `node`, planned then executed as the executor runs a step (the site's params: the step's
    `with` is empty, as the shipped gate's is)."""
    ctx = StepContext(run_id=0, step_index=0, playbook=PLAYBOOK, target=node, alert=AlertRef(),
                      deadline=time.monotonic() + timeout_s, stopping=stopping or threading.Event())  # fmt: skip
    try:
        params = action.validate({"node": node})
        plan = action.plan(params, ctx)
        if plan.get("can_act") is False:
            return BurninOutcome(action.name, node, plan, f"{action.name} refused on {node}: {plan.get('why_not')}")
        return BurninOutcome(action.name, node, action.execute(params, ctx))
    except PartialFailure as exc:  # fell short: the figure, baseline and verdict are its result
        return BurninOutcome(action.name, node, exc.result, str(exc))
    except (ActionError, ParamsError) as exc:  # could not run: not drained, no python/image, srun or the Job failed
        return BurninOutcome(action.name, node, error=str(exc))
