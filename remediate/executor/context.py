"""What an action sees of its run: the StepContext of one step, built from what every step shares."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from remediate.actions.base import ActionMemory, InMemoryMemory, StepContext, step_views
from remediate.breaker import CircuitBreaker
from remediate.intake.alerts import alert_ref
from remediate.runs import ClaimedRun, StepRecord


@dataclass(frozen=True)
class StepContexts:
    """What every step of one executor shares: the action memory, the circuit breaker, the executor's stop.
    The announcer (remediate.executor.announce) shares only its stop: it changes nothing, so it has no breaker."""

    memory: ActionMemory = field(default_factory=InMemoryMemory)
    breaker: CircuitBreaker | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the executor stops: a step waiting on a node (or anything long) gives up early."""

    def context(
        self, run: ClaimedRun, step: StepRecord, deadline: float, *, steps: Sequence[StepRecord] = ()
    ) -> StepContext:
        """What an action sees of the run for `step`; `deadline` on the time.monotonic() clock; `steps`: the
        run's steps as the store has them now (what a notification reports)."""
        return StepContext(
            run_id=run.id,
            step_index=step.idx,
            playbook=run.playbook,
            # A `run_on` step acts on its own node: the agent there refuses a step whose target is another node.
            target=step.node_of(run),
            alert=alert_ref(run.alert_context),
            deadline=deadline,
            memory=self.memory,
            breaker=self.breaker,
            stopping=self.stopping,
            mode=run.mode,
            phase=run.phase,
            rung=run.rung,
            steps=step_views(steps),
            approved_by=run.approved_by,
        )
