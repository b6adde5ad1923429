"""Late outcomes: a step that handed a change over and gave up waiting (OutcomePending) is settled when its
action's plan, asked again later through the same runner, says what became of the change."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from remediate.actions.deadline import call_with_deadline
from remediate.executor.steps import StepExecutor

log = logging.getLogger("remediate.executor")

RECONCILE_WINDOW_S = 24 * 3600.0
"""How long after a step gave up its pending outcome is still looked for (jobs keep acknowledgements 7 days)."""
RECONCILE_PLAN_TIMEOUT_S = 15.0


def reconcile_pending(steps: StepExecutor) -> int:
    """Record late outcomes: for each failed step that handed a change over and gave up waiting
    (OutcomePending), ask its action's plan, through the same runner as the step (the node's agent
    for a node step), what became of it; a plan with an `outcome` settles the step. Returns how many."""
    settled = 0
    for pending in steps.store.queue.pending_outcomes(since=steps.clock() - RECONCILE_WINDOW_S):
        step, run = pending.step, pending.run
        try:
            action = steps.registry.get(step.action)
            params = action.validate(step.params)
            ctx = steps.contexts.context(run, step, time.monotonic() + RECONCILE_PLAN_TIMEOUT_S)
            runner = steps.dispatch.runner_for(action, step.node_of(run))
            plan = call_with_deadline(partial(runner.plan, action, params, ctx), RECONCILE_PLAN_TIMEOUT_S)
        except Exception as exc:
            log.info("run %s step %s: cannot look for its late outcome yet: %s", run.id, step.idx, exc)
            continue
        outcome = plan.get("outcome") if isinstance(plan, dict) else None
        if not isinstance(outcome, dict):
            continue
        late = _late_outcome(outcome, pending.follow_up, runner.ran_on, steps.clock())
        note = (
            f"late outcome recorded at {late['reconciled_at']}: {late['status']}"
            + (f" {late['late_by_s']} s after the step gave up" if late.get("late_by_s") is not None else "")
            + f" (claimed {outcome.get('claimed_at') or '?'}, done {outcome.get('applied_at') or '?'})"
        )
        if steps.store.queue.settle_pending(step.id, late, note, steps.clock()):
            settled += 1
            log.warning("run %s step %s (%s): %s", run.id, step.idx, step.action, note)
    return settled


def _late_outcome(
    outcome: Mapping[str, Any], follow_up: Mapping[str, Any], ran_on: str | None, now: float
) -> dict[str, Any]:
    """The late outcome as recorded on the step: the plan's `outcome`, `status` as `<status>_late`
    (e.g. applied_late), how late (seconds after the step gave up) and when it was seen."""
    late: dict[str, Any] = {**outcome, "status": f"{outcome.get('status') or 'unknown'}_late"}
    at, gave_up = outcome.get("at"), follow_up.get("gave_up_at")
    if isinstance(at, int | float) and isinstance(gave_up, int | float):
        late["late_by_s"] = round(at - gave_up, 3)
    late["reconciled_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    if ran_on:
        late["ran_on"] = ran_on
    return late
