"""What slurm.burnin and k8s.burnin share: the params of the burn-in (every one static: written in the
playbook, checked when it loads, never rendered from an alert), its command line, and the judging of what it
printed against the baseline of the model it ran on (remediate.burnin.verdict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediate.actions.schema import Param, between
from remediate.burnin.command import BACKENDS, BurninCommand, check_limit, check_path
from remediate.burnin.verdict import Measurement, Verdict, check_baselines, judge
from remediate.errors import PartialFailure

BURNIN_PARAMS: dict[str, Param] = {
    "python": Param(str, required=True, static=True, check=check_path,
                    doc="absolute path of the Python interpreter on the node, with torch and remediate installed"),
    "backend": Param(str, default="gloo", static=True, choices=BACKENDS,
                     doc="gloo: all-reduce on CPU; nccl: on the node's GPUs, one rank per GPU"),
    "ranks": Param(int, default=2, static=True, check=check_limit("ranks"),
                   doc="processes taking part in the all-reduce (nccl: at most the node's GPUs)"),
    "megabytes": Param(int, default=16, static=True, check=check_limit("megabytes"),
                       doc="size of the all-reduced tensor, in MB"),
    "iters": Param(int, default=20, static=True, check=check_limit("iters"), doc="timed all-reduces"),
    "baselines": Param(dict, required=True, static=True, check=check_baselines,
                       doc="bus bandwidth (GB/s) expected per model the burn-in reports: a GPU's name as torch "
                       "says it (`NVIDIA H100 80GB HBM3`), `cpu` for gloo; a model not named fails"),
    "tolerance": Param(float, default=0.8, static=True, check=between(0.05, 1.0),
                       doc="the least share of the baseline that passes"),
    "timeout": Param(int, default=300, static=True, check=check_limit("seconds"),
                     doc="seconds the burn-in may run: the benchmark ends itself past it (keep the step's own "
                     "time-out longer)"),
}  # fmt: skip


class BurninFailedStep(PartialFailure):
    """The burn-in ran and its figure did not pass: the result (figure, baseline, verdict) is kept with the step."""


def command_of(params: Mapping[str, Any]) -> BurninCommand:
    return BurninCommand(python=params["python"], backend=params["backend"], ranks=params["ranks"],
                         megabytes=params["megabytes"], iters=params["iters"], seconds=params["timeout"])  # fmt: skip


def judged(measured: Measurement, params: Mapping[str, Any]) -> Verdict:
    return judge(measured, {str(k): float(v) for k, v in params["baselines"].items()}, params["tolerance"])
