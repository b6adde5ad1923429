"""What a notification's `message` template sees, rendered when its step runs (not when the alert came).

A message rendered at ingest can only say what was intended ("Cordoned, tainted and drained") before
anything ran. notify.webhook, notify.slack and notify.teams mark `message` as a late param
(`Param(late=True)`): the engine stores it as written and the action renders it here, with the alert's
values (as at ingest: `labels`, `annotations`, `alertname`, ...) and what only then exists:

- `steps`: every step of the run in order, each `{number, name, action, status, error, outcome, current}`
  (status as the store has it when this step starts: succeeded, failed, skipped, pending, ...; outcome what its
  result names, e.g. `skipped` for a burn-in with no baseline configured, else None);
- `step`: the same, by step name (`step.cordon.status`);
- `run`: `{id, playbook, target, mode, phase, rung, url, link, failed, ok, outcome}`: `url` is the run
  page (`{public_url}/ui/runs/<id>`, None without public_url), `link` that URL or `run <id>`, `failed`
  the names of the earlier steps that failed, `ok` true when none did, `outcome` one line saying what
  each earlier step did (`cordon failed (node not found); taint skipped`).

Each format passes every printed value through its escaping (remediate.outbound.inert) and keeps the template's
own text: `run.url` and `run.link` are remediate's own and printed as they are.
"""

from __future__ import annotations

from typing import Any

from remediate.actions.base import StepContext
from remediate.actions.templating import Escape, Trusted, render_text
from remediate.errors import ParamsError
from remediate.runs import StepStatus

SKIPPED_OUTCOME = "skipped"
"""The outcome of a step that succeeded by doing nothing it was asked to judge (slurm.burnin and k8s.burnin with no
baseline configured): `run.outcome` says so beside its status."""
OUTCOME_ERROR_MAX = 200
"""Characters of a failed step's error in `run.outcome` (the run page has the whole of it)."""


def run_page_url(public_url: str | None, run_id: int) -> str | None:
    """The run page people open (`/ui/runs/<id>`, with the Approve button while the run waits)."""
    return f"{public_url.rstrip('/')}/ui/runs/{run_id}" if public_url else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome_line(steps: list[dict[str, Any]]) -> str:
    """What the steps did, in one line: `cordon succeeded; drain failed (PDB blocked 2 pods)`."""
    parts = []
    for step in steps:
        error = (
            f" ({_clip(step['error'], OUTCOME_ERROR_MAX)})"
            if step["error"] and step["status"] == StepStatus.FAILED
            else ""
        )
        if step.get("outcome") == SKIPPED_OUTCOME and step["status"] == StepStatus.SUCCEEDED:
            error = f" ({SKIPPED_OUTCOME})"  # it did nothing (a burn-in with no baseline): not a pass
        parts.append(f"{step['name']} {step['status']}{error}")
    return "; ".join(parts) if parts else "no earlier step"


def message_context(ctx: StepContext, *, public_url: str | None) -> dict[str, Any]:
    """The context of a message template for the step of `ctx` (see the module docstring)."""
    steps = [
        {
            "number": s.index + 1,
            "name": s.name,
            "action": s.action,
            "status": s.status,
            "error": s.error,
            "outcome": s.outcome,
            "current": s.index == ctx.step_index,
        }
        for s in ctx.steps
    ]
    earlier = [s for s in steps if s["number"] - 1 < ctx.step_index]
    failed = [s["name"] for s in earlier if s["status"] == StepStatus.FAILED]
    url = run_page_url(public_url, ctx.run_id)
    run = {
        "id": ctx.run_id,
        "playbook": ctx.playbook,
        "target": ctx.target,
        "mode": ctx.mode,
        "phase": ctx.phase,
        "rung": ctx.rung,
        "url": Trusted(url) if url else None,
        "link": Trusted(url or f"run {ctx.run_id}"),
        "failed": failed,
        "ok": not failed,
        "outcome": outcome_line(earlier),
    }
    return {**ctx.alert.as_mapping(), "steps": steps, "step": {s["name"]: s for s in steps}, "run": run}


def render_message(
    source: str, ctx: StepContext, *, public_url: str | None, escape: Escape | None = None
) -> tuple[str, str | None]:
    """The message for the step of `ctx`, and None; or, when the template cannot be rendered (a label it
    reads is missing), a message saying so and the error: a notification is still sent, with the facts
    the action adds itself (what fired, the steps' outcomes, the run's link)."""
    try:
        return render_text(source, message_context(ctx, public_url=public_url), escape=escape), None
    except ParamsError as exc:
        error = str(exc)
        note = f"(the playbook's message could not be rendered: {error})"
        return (escape(note) if escape else note), error
