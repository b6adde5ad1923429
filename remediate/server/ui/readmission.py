"""The node page's "Re-admission gate": the node's latest gate run (a `gpu.health` step, and the burn-in of the
same run) turned into the rows the page shows: the outcome in one line, each GPU's checks with their verdict
and evidence, DCGM's diagnostic, the soak's rounds, and the burn-in's figure against its baseline.

Pure: it reads the stored step results (remediate.actions.gpu_health's and burnin_common's shapes) and the
clock it is given, nothing else. A step still running has no result yet: its round is told from the soak the
plan recorded and the time since the step started.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remediate.actions.gpu_health_checks import CHECK_SKIPPED
from remediate.playbooks.model import Playbook
from remediate.runs import StepStatus
from remediate.store import GateRun, GateStep

GATE_ACTION = "gpu.health"
BURNIN_ACTIONS = ("slurm.burnin", "k8s.burnin")
_NOT_RUN = {
    StepStatus.SKIPPED: "not run (skipped: an earlier step failed)",
    StepStatus.PLANNED: "not run (planned: a dry run)",
    StepStatus.INTERRUPTED: "interrupted",
}


@dataclass(frozen=True)
class CheckRow:
    """One check of one GPU: the row of the GPU x check table."""

    gpu: str
    check: str
    verdict: str
    """ok, warn, fail or skipped (its badge)."""
    evidence: str
    span: int = 0
    """On a GPU's first row, how many rows it has (the GPU cell spans them); 0 on the others."""


@dataclass(frozen=True)
class SoakRow:
    at: str
    """"+300s": when the round ran, from the soak's start."""
    verdict: str
    findings: str
    """The round's failing (else warning) lines; "" for a clean round."""


@dataclass(frozen=True)
class BurninRow:
    step: str
    status: str
    verdict: str
    """pass or fail; "" when the burn-in measured nothing (its error says why)."""
    figure: str
    """"123.4 GB/s on NVIDIA H100 80GB HBM3"."""
    baseline: str
    """"baseline 300 GB/s, passes from 240 GB/s"."""
    error: str | None
    note: str = ""
    """Why a burn-in that measured nothing by design did not (its `reason`: no baseline configured)."""


@dataclass(frozen=True)
class GateView:
    """One gate step of the node's latest gate run, as the page shows it."""

    run_id: int
    playbook: str
    phase: str
    when: float
    step: str
    status: str
    outcome: str
    """passed / FAILED: <the first failing check's evidence> / FAILED: burn-in <step>: <its error> / running: round
    k of n / not run (<status>)."""
    outcome_kind: str
    """passed, failed, running or other: the outcome's colour."""
    checks: list[CheckRow]
    diag: str
    soak: list[SoakRow]
    soak_note: str
    burnins: list[BurninRow]


def gate_playbooks(playbooks: Iterable[Playbook]) -> tuple[str, ...]:
    """The loaded playbooks with a gate step anywhere (steps, on_resolved, any rung's): the store looks for the
    node's gate among their runs only (store.gate_history: an index seek instead of the node's whole history)."""
    found = []
    for playbook in playbooks:
        specs = [*playbook.steps, *playbook.on_resolved]
        specs += [spec for rung in playbook.rungs for spec in (*rung.steps, *rung.on_resolved)]
        if any(spec.action == GATE_ACTION for spec in specs):
            found.append(playbook.name)
    return tuple(found)


def gate_views(run: GateRun | None, now: float) -> list[GateView]:
    """The gate steps of `run` (the node's latest gate run; None: never gated), each with the run's burn-ins."""
    if run is None:
        return []
    burnins = [_burnin(s) for s in run.steps if s.action in BURNIN_ACTIONS]
    return [_view(run, s, burnins, now) for s in run.steps if s.action == GATE_ACTION]


def _view(run: GateRun, step: GateStep, burnins: list[BurninRow], now: float) -> GateView:
    result = step.result if isinstance(step.result, Mapping) else {}
    plan = step.plan if isinstance(step.plan, Mapping) else {}
    kind, outcome = _outcome(run, step, result, plan, now)
    failed_burnin = next((b for b in burnins if b.status == StepStatus.FAILED), None)
    if failed_burnin is not None and kind != StepStatus.FAILED:
        # The gate is the health checks and the burn-in together: the node did not pass when its burn-in failed.
        why = failed_burnin.error or "no error recorded"
        kind, outcome = StepStatus.FAILED, f"FAILED: burn-in {failed_burnin.step}: {why}"
    return GateView(
        run_id=run.run_id,
        playbook=run.playbook,
        phase=run.phase,
        when=step.finished_at or step.started_at or run.created_at,
        step=step.name,
        status=step.status,
        outcome=outcome,
        outcome_kind=kind,
        checks=_checks(result.get("gpus") or ()),
        diag=_diag(result.get("diag") or plan.get("diag")),
        soak=[_round(r) for r in (result.get("soak") or {}).get("rounds") or ()],
        soak_note=_soak_note(result.get("soak") or plan.get("soak")),
        burnins=burnins,
    )


def _outcome(
    run: GateRun, step: GateStep, result: Mapping[str, Any], plan: Mapping[str, Any], now: float
) -> tuple[str, str]:
    if step.status == StepStatus.SUCCEEDED and result.get("verdict") == "fail":
        # `fail_on: never`: the step reports without failing; the node did not pass for all that.
        first = (result.get("failed") or ["see the checks"])[0]
        return StepStatus.FAILED, f"FAILED checks (fail_on: never: the step itself succeeded): {first}"
    if step.status == StepStatus.SUCCEEDED:
        warned = result.get("warnings") or []
        return "passed", "passed" + (f", with warnings: {'; '.join(warned)}" if warned else "")
    if step.status == StepStatus.FAILED:
        # The result's `failed` lines are what on-call reads first; a step that failed before judging
        # (no agent, no NVML, a soak stopped by the server) has only its error.
        first = (result.get("failed") or [step.error or "no error recorded"])[0]
        return StepStatus.FAILED, f"FAILED: {first}"
    if step.status == StepStatus.RUNNING and step.started_at is not None:
        return StepStatus.RUNNING, f"running: {_round_now(plan.get('soak') or {}, now - step.started_at)}"
    if step.status in _NOT_RUN:
        return "other", _NOT_RUN[StepStatus(step.status)] + (f": {step.error}" if step.error else "")
    return "other", f"waiting to run (the run is {run.status})"


def _round_now(soak: Mapping[str, Any], elapsed: float) -> str:
    """Round k of n by the clock: the soak's rounds run at 0, every, 2·every, ... (gpu_health_soak.Soak)."""
    planned = int(soak.get("rounds_planned") or 1)
    every = float(soak.get("every_s") or 0)
    if planned <= 1 or every <= 0:
        return "round 1 of 1"
    current = min(planned, math.floor(max(0.0, elapsed) / every) + 1)
    return f"round {current} of {planned}"


def _checks(gpus: Sequence[Mapping[str, Any]]) -> list[CheckRow]:
    rows = []
    for gpu in gpus:
        who = f"GPU {gpu.get('index', '?')} ({gpu.get('gpu') or 'uuid unknown'})"
        checks = gpu.get("checks") or ()
        for i, check in enumerate(checks):
            rows.append(CheckRow(who, str(check.get("check")), str(check.get("verdict")), str(check.get("evidence")),
                                 len(checks) if i == 0 else 0))  # fmt: skip
    return rows


def _diag(diag: Mapping[str, Any] | None) -> str:
    """DCGM's diagnostic in a line: run (its verdict), skipped (why: DCGM not installed, not asked), failed, or
    could not run (out of time: no verdict on the GPUs)."""
    if not diag:
        return "not recorded"
    level, verdict, reason = diag.get("level"), diag.get("verdict"), diag.get("reason") or ""
    if verdict is None:  # a plan: what would run
        command = diag.get("command")
        if not level:
            return "skipped: diag: 0 (not asked for)"
        return command if isinstance(command, str) else f"will run: {' '.join(map(str, command or ()))}"
    if verdict == CHECK_SKIPPED:
        return f"skipped: {reason}"
    if diag.get("timed_out"):  # no verdict on the GPUs: the step ran out of time (gpu_health.DiagTimedOut)
        return f"could not run: {reason}"
    if verdict == "fail":
        return f"failed: dcgmi diag -r {level}: {'; '.join(diag.get('failed') or ()) or reason}"
    version = f", DCGM {diag['dcgm_version']}" if diag.get("dcgm_version") else ""
    return f"run: dcgmi diag -r {level}: {verdict} ({len(diag.get('tests') or ())} tests{version})"


def _round(r: Mapping[str, Any]) -> SoakRow:
    findings = r.get("failed") or r.get("warnings") or ()
    return SoakRow(f"+{float(r.get('at_s') or 0):.0f}s", str(r.get("verdict")), "; ".join(findings))


def _soak_note(soak: Mapping[str, Any] | None) -> str:
    if not soak or not soak.get("window_s"):
        return "no soak: one round of the checks"
    window, every, planned = soak["window_s"], soak.get("every_s"), soak.get("rounds_planned")
    ran = soak.get("rounds_run")
    kept = len(soak.get("rounds") or ())
    said = f"{ran} of {planned} rounds" if ran is not None else f"{planned} rounds planned"
    said += f" over {window:g}s, every {every:g}s"
    return said + (f" (the first and latest {kept} kept)" if ran is not None and kept < ran else "")


def _burnin(step: GateStep) -> BurninRow:
    result = step.result if isinstance(step.result, Mapping) else {}
    if "figure" not in result:
        return BurninRow(step.name, step.status, "", "", "", step.error, str(result.get("reason") or ""))
    unit = result.get("unit") or ""
    figure = f"{_number(result['figure'])} {unit} on {result.get('model') or 'an unknown model'}"
    if result.get("baseline") is None:
        baseline = "no baseline for this model"
    else:
        baseline = f"baseline {_number(result['baseline'])} {unit}, passes from {_number(result['threshold'])} {unit}"
    return BurninRow(step.name, step.status, str(result.get("verdict") or ""), figure, baseline, step.error)


def _number(value: float) -> str:
    """At most 4 decimals, no exponent: 0.0001, 1000000, 12.3457 (a GB/s figure read next to its baseline)."""
    return f"{value:.4f}".rstrip("0").rstrip(".")
