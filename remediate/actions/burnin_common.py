"""What slurm.burnin and k8s.burnin share: the params of the burn-in (every one static: written in the
playbook, checked when it loads, never rendered from an alert), the site's defaults for those a step does not
write (the `burnin_*` settings, remediate.config.burnin), its command line, and the judging of what it printed
against the baseline of the model it ran on (remediate.burnin.verdict).

A burn-in with no baseline table at all, neither its step's nor the site's, is reported skipped (succeeded,
outcome `skipped`, the reason in its result) rather than failed: the shipped gate runs it wherever the site has
not configured one yet, as gpu.health reports dcgmi diag skipped where DCGM is absent. A table that does not
name the node's model still fails it: an unknown model is no proof."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediate.actions.messages import SKIPPED_OUTCOME
from remediate.actions.schema import Param, ParamSchema, between
from remediate.burnin.command import BACKENDS, BurninCommand, check_limit, check_path
from remediate.burnin.verdict import Measurement, Verdict, check_baselines, judge
from remediate.config.burnin import BurninSettings
from remediate.errors import PartialFailure

NOT_CONFIGURED = 'no burn-in configured: set burnin_baselines (the chart\'s burnin.baselines; docs/slurm.md "Burn-in")'
"""The reason of a burn-in skipped for want of any baseline table."""
SITE = "default: the burnin_{name} setting"

BURNIN_PARAMS: dict[str, Param] = {
    "python": Param(str, static=True, check=check_path,
                    doc="absolute path of the Python interpreter on the node, with torch and remediate installed "
                    f"({SITE.format(name='python')}; needed to run)"),
    "backend": Param(str, default="gloo", static=True, choices=BACKENDS,
                     doc="gloo: all-reduce on CPU; nccl: on the node's GPUs, one rank per GPU"),
    "ranks": Param(int, default=2, static=True, check=check_limit("ranks"),
                   doc="processes taking part in the all-reduce (nccl: at most the node's GPUs)"),
    "megabytes": Param(int, default=16, static=True, check=check_limit("megabytes"),
                       doc="size of the all-reduced tensor, in MB"),
    "iters": Param(int, default=20, static=True, check=check_limit("iters"), doc="timed all-reduces"),
    "baselines": Param(dict, static=True, check=check_baselines,
                       doc="bus bandwidth (GB/s) expected per model the burn-in reports: a GPU's name as torch "
                       "says it (`NVIDIA H100 80GB HBM3`), `cpu` for gloo; a model not named fails "
                       f"({SITE.format(name='baselines')}; neither: the step succeeds as skipped)"),
    "tolerance": Param(float, default=0.8, static=True, check=between(0.05, 1.0),
                       doc=f"the least share of the baseline that passes ({SITE.format(name='tolerance')})"),
    "timeout": Param(int, default=300, static=True, check=check_limit("seconds"),
                     doc="seconds the burn-in may run: the benchmark ends itself past it (keep the step's own "
                     "time-out longer)"),
}  # fmt: skip


class BurninFailedStep(PartialFailure):
    """The burn-in ran and its figure did not pass: the result (figure, baseline, verdict) is kept with the step."""


def with_site_defaults(params: Mapping[str, Any], site: BurninSettings, schema: ParamSchema) -> dict[str, Any]:
    """The step's params over the site's burn-in settings, for the params `schema` has: a step's own win (its
    `baselines` replace the site's table whole, they are not merged with it)."""
    given = {name: value for name, value in params.items() if value is not None}
    return {**{k: v for k, v in site.defaults().items() if k in schema.fields}, **given}


def skipped(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a burn-in with no baseline table (neither its step's nor the site's) reports instead of running;
    None when it has one and runs."""
    if params.get("baselines"):
        return None
    return {"outcome": SKIPPED_OUTCOME, "verdict": "skipped", "reason": NOT_CONFIGURED,
            "would": f"nothing: {NOT_CONFIGURED}"}  # fmt: skip


def missing(params: Mapping[str, Any], names: tuple[str, ...], action: str) -> str | None:
    """Why the burn-in cannot run, naming the first of the params `names` it lacks and the setting that gives
    it; None when it has them all."""
    name = next((name for name in names if params.get(name) is None), None)
    if name is None:
        return None
    return (f"{action}: no {name} for the burn-in: set the burnin_{name} setting (REMEDIATE_BURNIN_{name.upper()}; "
            f"the chart's burnin.{name}) or the step's `{name}` param (docs/slurm.md \"Burn-in\")")  # fmt: skip


def command_of(params: Mapping[str, Any]) -> BurninCommand:
    return BurninCommand(python=params["python"], backend=params["backend"], ranks=params["ranks"],
                         megabytes=params["megabytes"], iters=params["iters"], seconds=params["timeout"])  # fmt: skip


def judged(measured: Measurement, params: Mapping[str, Any]) -> Verdict:
    return judge(measured, {str(k): float(v) for k, v in params["baselines"].items()}, params["tolerance"])
