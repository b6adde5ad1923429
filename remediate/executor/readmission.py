"""The re-admission gate outside a run: `remediate node release NODE` proves the node healthy before giving it back.

The gate is the shipped XID ladder's own (playbooks/gpu-xid-quarantine.yaml): `gpu.health` on the node, NVML's
checks repeated over a soak (`soak: 30m, every: 5m`) and dcgmi diag once after the first round (`diag: 1`). It
runs where the executor would run it (Dispatch: the node's agent, or this host when it is the node), planned
once, then executed once per round with `soak: 0s` and `fail_on: never`, the rounds timed and judged by the
step's own soak (gpu_health_soak.run_soak, which holds each round to the GPUs the plan listed): each round's
verdicts come back as it ends, for the operator to read as it goes, where one call for the whole soak would
answer only at its end. One such round is exactly one round of the step (the same checks, thresholds and dcgmi
after the first), so the gate passes and fails as the ladder's does.

A gate that cannot run (no agent for the node, the agent unreachable, no NVML on the node, a host that is not
the node) is a failure, never a pass: the node stays with its owner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remediate.actions.base import Action, StepContext
from remediate.actions.gpu_health import DIAG_MARGIN_S, HealthAction
from remediate.actions.gpu_health_soak import UNLISTED, Round, Soak, listed_in, run_soak
from remediate.config.durations import parse_duration
from remediate.errors import ActionError
from remediate.executor.dispatch import Dispatch
from remediate.gpu import dcgm_diag
from remediate.intake.alertref import AlertRef

ACTION = "gpu.health"
PLAYBOOK = "node-release"
"""The playbook name the gate's calls carry (an agent logs `run 0 step N gpu.health` under it)."""
CALLS_S = 10 * 60.0
"""Time the gate has beyond its soak and dcgmi's diagnostic: each round's call (to the node's agent)."""


def margin_s(diag: int) -> float:
    """Time the gate has beyond its soak: dcgmi's at this level, from the figure gpu.health's diagnostic is
    sized by (dcgm_diag.ALLOWED_S), and the calls'. 15 minutes at level 1, as the shipped gate's step timeout
    has (45m for a 30m soak); 70 at level 3, which takes 30 minutes and more on 8 GPUs."""
    return dcgm_diag.ALLOWED_S.get(diag, 0.0) + CALLS_S


@dataclass(frozen=True)
class GateOptions:
    """The gate's params, as the shipped ladder gives them (its --soak, --every, --diag)."""

    soak: str = "30m"
    every: str = "5m"
    diag: int = 1


def gate_params(options: GateOptions) -> dict[str, Any]:
    """The step's params of `options`, checked by gpu.health's own schema (durations parse and are bounded as a
    playbook's are); ParamsError names the one that is not."""
    return HealthAction.schema.validate({"soak": options.soak, "every": options.every, "diag": options.diag})


@dataclass(frozen=True)
class CheckVerdict:
    """One check of one GPU in one round: `GPU 0 (GPU-…)`, `ecc_dbe_volatile`, `fail`, `2 > 0`."""

    gpu: str
    check: str
    verdict: str
    evidence: str


@dataclass(frozen=True)
class GateRound:
    """One round as it ended: its number (from 1) of those planned, when (seconds from the gate's start), what."""

    number: int
    planned: int
    at_s: float
    verdict: str
    checks: tuple[CheckVerdict, ...]
    failed: tuple[str, ...]
    warnings: tuple[str, ...]
    diag: Mapping[str, Any] | None = None
    """dcgmi's report, on the round that ran it (the first); None on the others."""


@dataclass(frozen=True)
class GatePlan:
    """What the gate will do: where it runs, the node's GPUs, dcgmi's command, the soak's rounds, any notes."""

    ran_on: str | None
    gpus: tuple[str, ...]
    diag: str
    rounds: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateOutcome:
    """passed: the node proven healthy over the soak. Otherwise `failed` (the failing round's evidence) or
    `error` (the gate could not run)."""

    passed: bool
    ran_on: str | None
    rounds: tuple[GateRound, ...] = ()
    failed: tuple[str, ...] = ()
    error: str | None = None

    def line(self) -> str:
        """The one-line outcome."""
        where = f" on {self.ran_on}" if self.ran_on else ""
        if self.error is not None:
            return f"gate could not run{where}: {self.error}"
        count = f"{len(self.rounds)} round{'s' if len(self.rounds) != 1 else ''}"
        if self.passed:
            return f"gate passed{where}: {count}, no check failed"
        return f"gate failed{where} (round {len(self.rounds)}): {'; '.join(self.failed)}"

    def evidence(self) -> list[str]:
        """What the audit keeps: the failing checks, or why the gate could not run."""
        return [self.error] if self.error is not None else list(self.failed)


@dataclass
class Gate:
    """The gate of node `node` (module docstring); `on_plan`/`on_round` are told as each is known."""

    dispatch: Dispatch
    action: Action
    node: str
    options: GateOptions = field(default_factory=GateOptions)
    on_plan: Callable[[GatePlan], None] = lambda plan: None
    on_round: Callable[[GateRound], None] = lambda done: None
    stopping: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic

    def run(self) -> GateOutcome:
        params = self.action.validate(gate_params(self.options))
        window, every = (parse_duration(params[k]).total_seconds() for k in ("soak", "every"))
        soak = Soak(window_s=window, every_s=every)
        deadline = self.clock() + window + margin_s(params["diag"])
        runner = self.dispatch.runner_of_owned(self.action, self.node)
        rounds: list[GateRound] = []

        def context(step: int) -> StepContext:
            return StepContext(run_id=0, step_index=step, playbook=PLAYBOOK, target=self.node, alert=AlertRef(),
                               deadline=deadline, stopping=self.stopping)  # fmt: skip

        answers: list[Mapping[str, Any]] = []

        def one_round() -> Round:
            first = not rounds
            once = {**params, "soak": "0s", "fail_on": "never", "diag": params["diag"] if first else 0}
            answers[:] = [result := runner.execute(self.action, once, context(len(rounds) + 1))]
            failed, warnings = tuple(result.get("failed") or ()), tuple(result.get("warnings") or ())
            return Round(0.0, str(result.get("verdict")), failed, warnings, gpus=listed_in(result.get("gpus") or ()))

        def judged(done: Round) -> None:  # run_soak's verdict of the round: a GPU gone from NVML fails it there
            rounds.append(_round(answers[0], done, len(rounds) + 1, len(soak.offsets()), first=not rounds))
            self.on_round(rounds[-1])

        try:
            plan = runner.plan(self.action, params, context(0))
            self.on_plan(_plan(plan, runner.ran_on, len(soak.offsets())))
            log = run_soak(soak, one_round, remaining=lambda: deadline - self.clock(), stopping=self.stopping,
                           margin_s=DIAG_MARGIN_S, clock=self.clock, expected=listed_in(plan.get("gpus") or ()),
                           on_round=judged)  # fmt: skip
        # No agent, agent unreachable, no NVML there, the wrong host, the soak stopped, dcgmi out of time.
        except ActionError as exc:
            return GateOutcome(False, runner.ran_on, tuple(rounds), error=str(exc))
        last = log.rounds[-1]
        return GateOutcome(last.verdict != "fail", runner.ran_on, tuple(rounds), failed=last.failed)


def _who(gpu: Mapping[str, Any]) -> str:
    """`GPU 0 (GPU-…)`, as gpu.health's evidence lines name a GPU (its entries' `gpu` is the UUID)."""
    uuid = gpu.get("gpu")
    return f"GPU {gpu.get('index')} ({uuid if uuid and uuid != 'unknown' else 'uuid unknown'})"


def _plan(plan: Mapping[str, Any], ran_on: str | None, rounds: int) -> GatePlan:
    diag = plan.get("diag") or {}
    command = diag.get("command")
    shown = " ".join(command) if isinstance(command, list) else str(command or "none (diag: 0)")
    gpus = tuple(_who(gpu) for gpu in plan.get("gpus") or ())
    return GatePlan(ran_on, gpus, shown, rounds, tuple(plan.get("notes") or ()))


def _round(result: Mapping[str, Any], done: Round, number: int, planned: int, *, first: bool) -> GateRound:
    """The gate's round of one gpu.health call's `result` as run_soak judged it (`done`): a GPU the plan listed and
    this call did not is one more failed `on_bus` check."""
    checks = tuple(
        CheckVerdict(_who(gpu), str(c.get("check")), str(c.get("verdict")), str(c.get("evidence")))
        for gpu in result.get("gpus") or ()
        for c in gpu.get("checks") or ()
    ) + tuple(CheckVerdict(g.who(), "on_bus", "fail", UNLISTED) for g in done.unlisted)
    return GateRound(
        number, planned, done.at_s, done.verdict, checks, done.failed, done.warnings,
        result.get("diag") if first else None,
    )  # fmt: skip
