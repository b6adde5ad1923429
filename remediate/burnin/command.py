"""The command line of a burn-in, `<python> -m remediate.burnin --backend B --ranks N --megabytes M --iters I`,
built only from a step's params that the playbook's author wrote (static: never rendered from an alert) and
checked here, so no label and no odd character can reach it. Shared by slurm.burnin and k8s.burnin."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

BACKENDS = ("gloo", "nccl")
LIMITS = {"ranks": (2, 64), "megabytes": (1, 4096), "iters": (1, 1000), "seconds": (10, 3600)}
"""Bounds of each number on the command line (the module's arguments and the actions' params). Two ranks at
least: an all-reduce of one rank moves no data. `seconds`: the benchmark's own time limit, past which it ends
its ranks and fails; its own, because nothing else may end it (an `srun --no-allocate` killed leaves its
task running, checked on 22.05.8)."""

PATH_PATTERN = re.compile(r"/[A-Za-z0-9._/+-]*")
"""An absolute path of plain characters: no space, quote, `$` or newline, whatever runs the command."""


def check_path(value: str) -> str | None:
    """A `Param.check` for the interpreter and the directory: an absolute path of plain characters."""
    if not PATH_PATTERN.fullmatch(value) or "/../" in f"{value}/":
        return f"must be an absolute path of letters, digits and ._/+- (no ..), got {value!r}"
    return None


IMAGE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
NAMESPACE_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_image(value: str) -> str | None:
    """A `Param.check` (and the `burnin_image` setting's) for k8s.burnin's container image reference."""
    return None if IMAGE_PATTERN.fullmatch(value) else f"must be a container image reference, got {value!r}"


def check_namespace(value: str) -> str | None:
    """A `Param.check` (and the `burnin_namespace` setting's) for the namespace of k8s.burnin's Job."""
    return None if NAMESPACE_PATTERN.fullmatch(value) else f"must be a namespace name, got {value!r}"


def check_limit(name: str) -> Callable[[int], str | None]:
    low, high = LIMITS[name]
    return lambda value: None if low <= value <= high else f"must be between {low} and {high}"


@dataclass(frozen=True)
class BurninCommand:
    python: str
    """The interpreter on the node, with torch and remediate installed (a param: not found from the alert)."""
    backend: str
    ranks: int
    megabytes: int
    iters: int
    seconds: int

    def argv(self) -> list[str]:
        problem = check_path(self.python)
        if problem is not None or self.backend not in BACKENDS:
            raise ValueError(f"burn-in command refused: python {problem or 'ok'}, backend {self.backend!r}")
        for name in LIMITS:
            low, high = LIMITS[name]
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"burn-in command refused: {name} {value!r} is not within {low}..{high}")
        return [self.python, "-m", "remediate.burnin", "--backend", self.backend, "--ranks", str(self.ranks),
                "--megabytes", str(self.megabytes), "--iters", str(self.iters),
                "--seconds", str(self.seconds)]  # fmt: skip
