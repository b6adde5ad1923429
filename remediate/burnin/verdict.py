"""A burn-in's figure judged against the baseline of the GPU model it ran on.

The baselines are a table the playbook's author writes (`{"NVIDIA H100 80GB HBM3": 350, "cpu": 0.5}`),
not learned from earlier passes: a learned baseline has nothing to judge the first node against, and a fleet
degrading slowly would teach itself a lower bar. The model is the one the benchmark reports from the device it
ran on (torch's device name), never an alert label. A model without a baseline fails: a gate must not pass a
node on a figure nothing vouches for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

CPU_MODEL = "cpu"
"""The model a gloo burn-in on CPU reports (its baseline's key)."""


class BadMeasurement(ValueError):
    """The burn-in's output is not one Measurement line."""


@dataclass(frozen=True)
class Measurement:
    """What one burn-in printed: the figure (all-reduce bus bandwidth, higher is better) and how it was got."""

    figure: float
    unit: str
    model: str
    backend: str
    ranks: int
    bytes: int
    iters: int
    seconds_per_iter: float
    correct: bool
    """Whether every all-reduce gave the exact sum: a wrong sum fails the burn-in whatever its speed."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, output: str) -> Measurement:
        """The last line of `output` that is a JSON object (torch may print warnings before it)."""
        for line in reversed(output.splitlines()):
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                    found = cls(
                        figure=float(data["figure"]), unit=str(data["unit"]), model=str(data["model"]),
                        backend=str(data["backend"]), ranks=int(data["ranks"]), bytes=int(data["bytes"]),
                        iters=int(data["iters"]), seconds_per_iter=float(data["seconds_per_iter"]),
                        correct=data["correct"] is True,
                    )  # fmt: skip
                except (ValueError, KeyError, TypeError) as exc:
                    raise BadMeasurement(f"burn-in output line is not a measurement ({exc}): {line[:200]!r}") from exc
                if not math.isfinite(found.figure) or found.figure < 0:
                    raise BadMeasurement(f"burn-in figure {found.figure!r} is not a finite number >= 0")
                return found
        raise BadMeasurement(f"the burn-in printed no measurement line: {output[-300:]!r}")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    figure: float
    unit: str
    model: str
    baseline: float | None
    tolerance: float
    threshold: float | None
    """baseline x tolerance: the least figure that passes."""
    why: str

    def summary(self) -> dict[str, Any]:
        return {"verdict": "pass" if self.passed else "fail", **asdict(self)}


def check_baselines(value: Mapping[str, Any]) -> str | None:
    """A `Param.check`: a table of model name -> a figure greater than 0."""
    if not value:
        return "must name at least one GPU model and its baseline figure"
    for model, figure in value.items():
        if not isinstance(model, str) or not model.strip():
            return f"model {model!r} must be a non-empty string"
        if isinstance(figure, bool) or not isinstance(figure, int | float) or not figure > 0:
            return f"baseline of {model!r} must be a number greater than 0, got {figure!r}"
    return None


def judge(measured: Measurement, baselines: Mapping[str, float], tolerance: float) -> Verdict:
    """Pass when the all-reduce summed right and its figure is at least tolerance x the model's baseline."""
    baseline = baselines.get(measured.model)
    seen = f"{measured.figure:.3g} {measured.unit} on {measured.model!r}"
    if baseline is None:
        known = ", ".join(repr(name) for name in sorted(baselines))
        return Verdict(False, measured.figure, measured.unit, measured.model, None, tolerance, None,
                       f"{seen}: no baseline for this model (baselines: {known})")  # fmt: skip
    threshold = float(baseline) * tolerance
    if not measured.correct:
        why = f"{seen}: an all-reduce gave a wrong sum (data corruption on the node)"
        return Verdict(
            False, measured.figure, measured.unit, measured.model, float(baseline), tolerance, threshold, why
        )
    passed = measured.figure >= threshold
    relation = ">=" if passed else "<"
    why = f"{seen} {relation} {threshold:.3g} ({tolerance:g} x baseline {float(baseline):g})"
    return Verdict(passed, measured.figure, measured.unit, measured.model, float(baseline), tolerance, threshold, why)
