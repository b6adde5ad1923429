"""The burn-in check: with a baseline table set (`burnin_baselines`), the settings the burn-in of each scheduler
in force runs with (remediate.config.burnin.burnin_problem), which `serve` refuses to start without. Nothing when
no table is set: the shipped gate's burn-in is then reported skipped, which the resolve message says."""

from __future__ import annotations

from remediate.config.burnin import burnin_problem
from remediate.config.schedulers import describe
from remediate.config.settings import Settings
from remediate.doctor.model import Check, fail, ok

FAMILY = "burnin"
NAME = "burnin: settings"


def check_burnin(settings: Settings) -> list[Check]:
    burnin, schedulers = settings.burnin, settings.engine.schedulers
    if not burnin.configured:
        return []
    problem = burnin_problem(burnin, schedulers)
    if problem is not None:
        return [fail(FAMILY, NAME, problem, 'set the burnin_* setting it names (docs/slurm.md "Burn-in")')]
    models = ", ".join(model for model, _ in burnin.baselines)
    return [ok(FAMILY, NAME, f"baselines of {models}; runs on {describe(schedulers)}")]
