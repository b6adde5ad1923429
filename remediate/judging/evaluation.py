"""One (alert, playbook) pair as evaluated, before the guards: its rendered steps, its mode and its wave.

The engine builds them (remediate.judging.engine.Engine.evaluate, pure); the stages of remediate.judging.stages
judge them; a run's rows are written from them (engine.run_row, step_rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remediate.config.rollout import Mode, PromotionAsk
from remediate.intake.alerts import Alert
from remediate.playbooks.model import Playbook, StepSpec


@dataclass(frozen=True)
class RenderedStep:
    spec: StepSpec
    where: str
    params: Mapping[str, Any]
    timeout: float
    node: str | None = None
    """Where a `run_on` step runs (StepSpec.node, resolved from the alert); None: on the run's target."""


@dataclass(frozen=True)
class RungRender:
    """One rung of a ladder playbook, rendered for an alert: its steps for the alert's phase (`steps` when
    firing, its `on_resolved` when resolved), or why they did not render; and the mode it runs in."""

    steps: tuple[RenderedStep, ...]
    error: str | None
    mode: Mode
    promoted_mode: Mode | None = None
    """Its mode were its node's wave promoted (Evaluation.promoted_mode)."""


@dataclass(frozen=True)
class Evaluation:
    """One (alert, playbook) pair before the guards: rendered steps or the reason they failed."""

    alert: Alert
    playbook: Playbook
    phase: str
    target: str
    guard_key: str
    """What cooldown and max_attempts count per (the target, narrowed by the playbook's guard_by)."""
    mode: Mode
    """The run's mode: the most cautious of its playbook's (rung's), its node's wave's and the server's; a
    wave promoted on evidence makes it `promoted_mode` when judged (remediate.judging.promotions)."""
    dedupe_key: str
    steps: tuple[RenderedStep, ...] = ()
    error: str | None = None
    rungs: tuple[RungRender, ...] = ()
    """A ladder playbook's every rung, rendered (judge picks one; a rung not picked may fail to render)."""
    rung: int | None = None
    """The rung (1-based) judge picked for a ladder's firing alert; `steps`/`error`/`mode` are then its."""
    wave: str | None = None
    """A staged rollout's note on the node's wave ("node gpu-07 in wave 1 (label remediate.io/wave=1): enforce"),
    which the decision's reason ends with; None without a rollout (remediate.config.rollout)."""
    wave_name: str | None = None
    """The one wave its node is in (runs.wave: what a promotion counts); None in none, two or an unknown one."""
    promotion: PromotionAsk | None = None
    """Its wave may be promoted on the evidence of the wave before it (judging reads it); None: it may not."""
    promoted_mode: Mode | None = None
    """`mode` were its wave enforcing (a promotion found); None when its wave cannot be promoted."""

    @property
    def awaits_approval(self) -> bool:
        """An approve-mode playbook's firing run waits for a person; its undo (resolved) does not."""
        return self.mode is Mode.APPROVE and self.phase == "firing"
