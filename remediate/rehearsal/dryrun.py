"""`remediate dry-run`: what a notification would do now, against the real store, writing nothing.

Called by the CLI. Uses the engine's own matching, rendering and guards (so the
answer is the one the server would give) and each action's `plan`.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remediate.actions import default_registry
from remediate.actions.base import ActionMemory, ActionRegistry, InMemoryMemory, StepContext, StepView
from remediate.actions.slurm.common import slurm_node_cache
from remediate.breaker import CircuitBreaker, limits_from_settings, memory_breaker
from remediate.config.settings import Settings
from remediate.executor.dispatch import Dispatch
from remediate.executor.runners import stamped
from remediate.intake.alerts import Notification, alert_ref, parse_notification
from remediate.judging.engine import Judged
from remediate.playbooks.loading import load_playbooks
from remediate.runs import StepStatus
from remediate.services import engine_for, kube_client
from remediate.store import Store
from remediate.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from remediate.kube.client import KubeClient
    from remediate.slurm import SlurmNodeCache


def sqlite_path(url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(url[len(prefix) :]) if url.startswith(prefix) else None


def dry_run(settings: Settings, data: object, *, now: float, registry: ActionRegistry | None = None) -> dict[str, Any]:
    """What the server would decide and plan for the notification `data` now; changes nothing. Without a
    `registry`, the shipped actions on one Kubernetes client and one Slurm node cache, which the waves share,
    both closed before returning."""
    kube = kube_client(settings) if registry is None else None
    slurm = slurm_node_cache(settings.slurm) if registry is None else None
    try:
        return _dry_run(settings, data, now, registry or default_registry(settings, kube, slurm), kube, slurm)
    finally:
        if kube is not None:
            kube.close()  # its node cache's watch, if a plan or a wave started it
        if slurm is not None:
            slurm.stop()  # its poll, if a slurm.drain plan or a Slurm wave started it


def _dry_run(
    settings: Settings,
    data: object,
    now: float,
    registry: ActionRegistry,
    kube: KubeClient | None,
    slurm: SlurmNodeCache | None,
) -> dict[str, Any]:
    notification = parse_notification(data)
    playbooks = load_playbooks(settings.engine.playbooks, registry)
    path = sqlite_path(settings.store.url)
    store: Store | None = None
    store_note = settings.store.url
    if path is not None and not path.exists():
        store_note = f"{settings.store.url} (does not exist yet: judged against an empty history)"
    else:
        store = Store.open(settings.store.url, upgrade=False)
    try:
        engine = engine_for(settings, store, playbooks, registry, kube=kube, slurm=slurm)
        judged = engine.preview(notification, now=now)
        paused = store.pause.state().paused if store is not None else False
        # Plans read what actions remember (e.g. the limit a restore would put back), never write it.
        current = store if store is not None and store.database.schema_version() == SCHEMA_VERSION else None
        memory = current.memory if current else InMemoryMemory()
        # Node steps of other nodes are planned by their agents.
        dispatch = Dispatch.from_settings(settings, slurm=slurm)
        limits = limits_from_settings(settings.kube.breaker)  # plans only read the breaker (status), never claim
        breaker = CircuitBreaker(current.breaker.view, limits=limits) if current else memory_breaker(limits)
        return _report(notification, judged, registry, memory, store_note, paused, dispatch, breaker)
    finally:
        if store is not None:
            store.close()


def _report(
    notification: Notification,
    judged: list[Judged],
    registry: ActionRegistry,
    memory: ActionMemory,
    store_note: str,
    paused: bool,
    dispatch: Dispatch,
    breaker: CircuitBreaker,
) -> dict[str, Any]:
    alerts: list[dict[str, Any]] = []
    for index, alert in enumerate(notification.alerts):
        entry: dict[str, Any] = {
            "alert": {
                "alertname": alert.name,
                "status": alert.status,
                "fingerprint": alert.fingerprint,
                "labels": dict(alert.labels),
            },
            "playbooks": [],
        }
        for j in judged:
            if j.index != index or j.evaluation is None:
                continue
            ev = j.evaluation
            steps = []
            # What a notification step's plan shows of the run: every step, none run yet.
            views = tuple(StepView(i, s.spec.name, s.spec.action, StepStatus.PENDING) for i, s in enumerate(ev.steps))
            for step_index, step in enumerate(ev.steps):
                action = registry.get(step.spec.action)
                node = step.node or ev.target  # a `run_on` step's own node, as the executor would use it
                ctx = StepContext(
                    run_id=0,
                    step_index=step_index,
                    playbook=ev.playbook.name,
                    target=node,
                    alert=alert_ref(alert.template_context()),
                    memory=memory,
                    breaker=breaker,
                    steps=views,
                )
                item: dict[str, Any] = {
                    "index": step_index,
                    "name": step.spec.name,
                    "action": step.spec.action,
                    "where": step.where,
                    **({"node": node} if step.where == "node" else {}),
                    "params": dict(step.params),
                }
                runner = dispatch.runner_for(action, node)
                try:
                    item["plan"] = stamped(runner, runner.plan(action, step.params, ctx))
                except Exception as exc:
                    item["plan_error"] = f"{exc.__class__.__name__}: {exc}"
                steps.append(item)
            cannot = cannot_act(steps, optional={i for i, s in enumerate(ev.steps) if s.spec.continue_on_error})
            entry["playbooks"].append(
                {
                    "playbook": ev.playbook.name,
                    "target": ev.target,
                    "mode": ev.mode.value,
                    **({"wave": ev.wave} if ev.wave is not None else {}),
                    "decision": j.verdict.decision.value,
                    "reason": j.verdict.reason,
                    "would_run": j.verdict.accepted and cannot is None,
                    "cannot_succeed": j.verdict.accepted and cannot is not None,
                    **({"cannot_act": cannot, "every_step_cannot_act": _every_step_cannot(steps)} if cannot else {}),
                    **({"ladder": _ladder(j)} if j.rung is not None else {}),
                    "steps": steps,
                    **({"left_out": [s.describe() for s in ev.playbook.left_out]} if ev.playbook.left_out else {}),
                }
            )
        alerts.append(entry)
    return {
        "store": store_note,
        "paused": paused,
        "would_run": any(pb["would_run"] for entry in alerts for pb in entry["playbooks"]),
        # Accepted runs with a step that cannot act: they would start and fail (the CLI exits 1 for them too).
        "cannot_succeed": [
            f"playbook {pb['playbook']}: {pb['cannot_act']}"
            for entry in alerts
            for pb in entry["playbooks"]
            if pb["cannot_succeed"]
        ],
        "alerts": alerts,
    }


def _ladder(j: Judged) -> dict[str, Any]:
    """Which rung of a ladder would run now, and why (the ladder as the store has it; nothing is written)."""
    assert j.evaluation is not None and j.rung is not None
    rungs = j.evaluation.playbook.rungs
    return {"rung": j.rung, "of": len(rungs), "name": rungs[j.rung - 1].name, "why": j.rung_reason}


def cannot_act(steps: list[dict[str, Any]], optional: Collection[int] = ()) -> str | None:
    """Why a run of these steps cannot succeed: a step's plan failed (a job name that matches no registered
    job, a node that does not exist) or says `can_act: false` (the plan contract in docs/playbooks.md), with
    each such step's error or `why_not`; None when every step can act. A step that fails stops its run, so
    one such step is enough; `optional` (the indexes of continue_on_error steps) do not stop it."""
    blocked = [step for step in steps if step["index"] not in optional and _blocked(step)]
    if not blocked:
        return None
    # One reason once, however many steps it stops (no cluster configured stops cordon, taint and drain).
    by_reason: dict[str, list[str]] = {}
    for step in blocked:
        by_reason.setdefault(str(_blocked(step)), []).append(f"{step['index']} {step['name']}")
    return "; ".join(
        f"step {names[0]}: {reason}"
        + (f" (also step{'s' if len(names) > 2 else ''} {', '.join(names[1:])})" if names[1:] else "")
        for reason, names in by_reason.items()
    )


def _blocked(step: dict[str, Any]) -> str | None:
    """Why this planned step cannot act: its plan's error, or its `why_not`; None when it can."""
    if step.get("plan_error"):
        return f"plan failed: {step['plan_error']}"
    plan = step.get("plan")
    if isinstance(plan, dict) and plan.get("can_act") is False:
        return str(plan.get("why_not") or "the plan says it cannot act")
    return None


def _every_step_cannot(steps: list[dict[str, Any]]) -> bool:
    """Would the run change nothing at all (every step blocked), rather than stop part way?"""
    return all(_blocked(step) is not None for step in steps)
