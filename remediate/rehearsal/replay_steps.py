"""What each step of a run would do differently under other playbooks (`remediate replay`): the rendered params
that differ, and where the action can tell from the plan it recorded (`Action.replan`), the change it would make
instead (`700 W -> 420 W instead of 560 W on 8 GPUs`). A parameter change decides nothing differently, so
without this a playbook whose power cap went from 80% to 60% replayed as "0 differ". Pure: no I/O."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remediate.actions.base import ActionRegistry
from remediate.runs import FINAL_RUN_STATUSES, StepStatus


@dataclass(frozen=True)
class StepRecord:
    """One step of a run as stored: its params and plan as the JSON text of the steps table."""

    name: str
    action: str
    params: str
    plan: str | None = None
    status: str = StepStatus.PENDING

    def node(self) -> str:
        """The node its `node` param names ("" for the run's target)."""
        return str(json.loads(self.params).get("node") or "")

    def happened(self, run_status: str) -> bool:
        """Did (or will) the step really happen? It succeeded, or its run has not ended yet (what it is going
        to do, as the replayed side counts it); a step that failed (a cordon the breaker refused), was skipped
        or never ran in a run that ended changed nothing."""
        if self.status == StepStatus.SUCCEEDED:
            return True
        return run_status not in FINAL_RUN_STATUSES and self.status in (
            StepStatus.PENDING,
            StepStatus.RUNNING,
            StepStatus.INTERRUPTED,
        )


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _param_changes(recorded: dict[str, Any], replayed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        key: {"recorded": recorded.get(key), "replayed": replayed.get(key)}
        for key in sorted(set(recorded) | set(replayed))
        if recorded.get(key) != replayed.get(key)
    }


def step_changes(
    registry: ActionRegistry, recorded: Sequence[StepRecord], replayed: Sequence[StepRecord]
) -> list[dict[str, Any]]:
    """The steps of a recorded run and of its replayed run (the same decision) that differ, in order: by name
    (a step only on one side is `added` or `removed`), each with its params that differ and, where the action
    can tell from the recorded plan, the change it would make instead (`plan`)."""
    if len(recorded) == len(replayed) and all(
        (a.name, a.action, a.params) == (b.name, b.action, b.params) for a, b in zip(recorded, replayed, strict=True)
    ):
        return []  # the common case, checked without building anything
    before = {step.name: step for step in recorded}
    after = {step.name: step for step in replayed}
    names = [s.name for s in replayed] + [s.name for s in recorded if s.name not in after]
    changes: list[dict[str, Any]] = []
    for name in names:
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            step = new or old
            assert step is not None
            changes.append({"step": name, "action": step.action, "change": "added" if old is None else "removed"})
            continue
        if old.action != new.action:
            changes.append({"step": name, "action": new.action, "change": f"action {old.action} -> {new.action}"})
            continue
        if old.params == new.params:
            continue
        params = _param_changes(json.loads(old.params), json.loads(new.params))
        if not params:
            continue  # the same params, written in another order
        plan = None
        if old.plan is not None and new.action in registry:
            plan = registry.get(new.action).replan(_loads(old.plan), json.loads(new.params))
        changes.append({"step": name, "action": new.action, "change": "params", "params": params, "plan": plan})
    return changes


def describe(change: dict[str, Any]) -> str:
    """One line of the text report: `lower-power-limit (gpu.set_power_limit): percent_of_default 80 -> 60;
    would set 700 W -> 420 W instead of 560 W on 8 GPUs`."""
    head = f"{change['step']} ({change['action']})"
    if change["change"] != "params":
        return f"{head}: {change['change']}"
    params = ", ".join(
        f"{key} {json.dumps(both['recorded'])} -> {json.dumps(both['replayed'])}"
        for key, both in change["params"].items()
    )
    return f"{head}: {params}" + (f"; would set {change['plan']}" if change.get("plan") else "")
