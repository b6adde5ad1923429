"""The burn-in section of the settings (`burnin_*`): the site's own figures and where its benchmark runs, which
slurm.burnin and k8s.burnin take for every param a step does not write (a step's own params win). The shipped
re-admission gate writes none of them, so one table here serves every playbook, and with no `burnin_baselines`
(the default) its burn-in reports itself skipped instead of failing every node (docs/slurm.md "Burn-in")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from remediate.burnin.command import check_image, check_namespace, check_path
from remediate.burnin.verdict import check_baselines
from remediate.config.fields import setting
from remediate.config.schedulers import Scheduler
from remediate.config.values import mapping_of, to_optional_str
from remediate.errors import ConfigError

TOLERANCE_RANGE = (0.05, 1.0)
"""The share of the baseline that passes: as the step's own `tolerance` param allows."""


def to_baselines(value: Any) -> tuple[tuple[str, float], ...]:
    """`{"NVIDIA H100 80GB HBM3": 300}` (config file), or that mapping as YAML/JSON text (environment); sorted
    pairs (a frozen section holds no dict). Empty: no burn-in configured."""
    table = mapping_of(value, 'of GPU models to GB/s ({"NVIDIA H100 80GB HBM3": 300})')
    if not table:
        return ()
    problem = check_baselines(table)
    if problem is not None:
        raise ValueError(problem)
    return tuple(sorted((str(model), float(figure)) for model, figure in table.items()))


def to_tolerance(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    number = float(value)
    low, high = TOLERANCE_RANGE
    if not low <= number <= high:
        raise ValueError(f"must be between {low:g} and {high:g} (0.8: 80% of the baseline passes)")
    return number


def _checked(check: Any) -> Any:
    """A converter of an optional string that `check` (a Param.check of the burn-in) must accept."""

    def convert(value: Any) -> str | None:
        text = to_optional_str(value)
        if text is not None and (problem := check(text)) is not None:
            raise ValueError(problem)
        return text

    return convert


@dataclass(frozen=True)
class BurninSettings:
    """The burn-in of a re-admission (slurm.burnin, k8s.burnin): what a step that does not say takes."""

    PREFIX: ClassVar[str] = "burnin_"
    baselines: tuple[tuple[str, float], ...] = setting((), to_baselines)
    """Bus bandwidth (GB/s) of a healthy node per GPU model, as the burn-in reports it (torch's name,
    `NVIDIA H100 80GB HBM3`; `cpu` for gloo), `{model: GB/s}` (YAML/JSON in the environment). Unset: a burn-in
    step without its own `baselines` is reported skipped (the shipped gate goes on without it); set: a model the
    node reports that is not in the table fails the burn-in (docs/slurm.md "Burn-in")."""
    tolerance: float = setting(0.8, to_tolerance)
    """The least share of the baseline that passes (0.05 to 1)."""
    python: str | None = setting(None, _checked(check_path))
    """Absolute path of the Python on the node (Slurm) or in `burnin_image` (Kubernetes) that has torch and
    remediate installed. Needed whenever burnin_baselines is set (Slurm or Kubernetes in force): the server refuses
    to start without it, even where a step writes its own `python`."""
    image: str | None = setting(None, _checked(check_image))
    """k8s.burnin: the container image of the burn-in Job (torch and remediate installed). Needed on
    Kubernetes whenever burnin_baselines is set: the server refuses to start without it, even where a step writes
    its own `image`."""
    namespace: str | None = setting(None, _checked(check_namespace))
    """k8s.burnin: the namespace of its Job, one remediate may create Jobs in (the chart: its release's)."""

    @property
    def configured(self) -> bool:
        """Whether the site set a baseline table (without one, a burn-in that writes none is skipped)."""
        return bool(self.baselines)

    def defaults(self) -> dict[str, Any]:
        """The step params these settings give, only those set: `baselines` as a dict, as a step writes it."""
        given = {"baselines": dict(self.baselines) or None, "tolerance": self.tolerance, "python": self.python,
                 "image": self.image, "namespace": self.namespace}  # fmt: skip
        return {name: value for name, value in given.items() if value is not None}


NEEDED: dict[Scheduler, tuple[tuple[str, ...], str]] = {
    Scheduler.SLURM: (("python",), "slurm.burnin runs it on the node"),
    Scheduler.KUBERNETES: (("image", "namespace", "python"), "k8s.burnin runs it as a Job"),
}
"""The settings each scheduler's burn-in cannot run without once baselines are set (the params its action
`missing` names), and why."""


def burnin_problem(burnin: BurninSettings, schedulers: Iterable[Scheduler]) -> str | None:
    """Why these burn-in settings cannot serve the schedulers in force: a baseline table set, but not a setting
    a scheduler's burn-in needs to run (without it every gate would fail at its burn-in, long after start).
    None when they can, or when no table is set (the burn-in is skipped)."""
    if not burnin.configured:
        return None
    for scheduler in schedulers:
        names, why = NEEDED[scheduler]
        name = next((name for name in names if getattr(burnin, name) is None), None)
        if name is not None:
            return (
                f"burnin_baselines is set but burnin_{name} is not, and schedulers names {scheduler} "
                f"({why}): set burnin_{name} (REMEDIATE_BURNIN_{name.upper()}; the chart's burnin.{name}), "
                'or unset burnin_baselines (docs/slurm.md "Burn-in")'
            )
    return None


def check_burnin(burnin: BurninSettings, schedulers: Iterable[Scheduler]) -> None:
    """ConfigError when the burn-in settings cannot serve the schedulers in force (burnin_problem): refused at
    start (serve, node release), not at the first gate's burn-in."""
    problem = burnin_problem(burnin, schedulers)
    if problem is not None:
        raise ConfigError(problem)
