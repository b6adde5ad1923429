"""What a doctor check answers: a Check (name, OK/WARN/FAIL, what it saw, the fix in one line), and the exit code
of a set of them (the worst wins)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class Status(enum.IntEnum):
    """Ordered: the worst of a set is its max."""

    OK = 0
    WARN = 1
    FAIL = 2


EXIT_CODES = {Status.OK: 0, Status.WARN: 1, Status.FAIL: 2}
"""`remediate doctor`'s exit code by the worst check: 0 all OK, 1 a warning, 2 a failure (docs/doctor.md)."""


@dataclass(frozen=True)
class Check:
    name: str
    """What was checked, e.g. `series: GPUTemperatureHigh (gpu.rules.yml)`."""
    status: Status
    detail: str
    """What the check saw."""
    fix: str = ""
    """One line: what to do (empty when OK)."""
    family: str = ""
    """The check family (series, routing, sinks, cluster, tokens): how the output is grouped."""

    def as_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "name": self.name,
            "status": self.status.name,
            "detail": self.detail,
            "fix": self.fix,
        }


def ok(family: str, name: str, detail: str) -> Check:
    return Check(name, Status.OK, detail, "", family)


def warn(family: str, name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.WARN, detail, fix, family)


def fail(family: str, name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.FAIL, detail, fix, family)


def worst(checks: Iterable[Check]) -> Status:
    return max((check.status for check in checks), default=Status.OK)


def exit_code(checks: Iterable[Check]) -> int:
    return EXIT_CODES[worst(checks)]


def report_json(checks: Iterable[Check]) -> dict[str, Any]:
    """GET /doctor's body and `remediate doctor --json`: the worst status and every check."""
    checks = list(checks)
    return {"status": worst(checks).name, "checks": [check.as_json() for check in checks]}
