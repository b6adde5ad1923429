"""The shipped playbooks as a test runs them: read from playbooks/, with the waits a test cannot sit through
shortened (a check.prometheus step's `for` and `poll`), everything else — the query, the steps, their order and
messages — as shipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def shipped_playbook(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((PLAYBOOKS / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


def every_step(playbook: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each step of every phase and rung, as written (a dict to change in place)."""
    for phase in (playbook.get("steps") or [], playbook.get("on_resolved") or []):
        yield from phase
    for rung in playbook.get("escalate") or []:
        yield from rung["steps"]
        yield from rung.get("on_resolved") or []


def quicken_checks(playbook: dict[str, Any], *, holds: str, gives_up: float, poll: str = "1s") -> dict[str, Any]:
    """Every check.prometheus step asks that its query held for `holds` (asked every `poll`) instead of the
    shipped 10 minutes, and gives up after `gives_up` seconds instead of 20 minutes; `playbook` changed in place
    and returned."""
    for step in every_step(playbook):
        if step["action"] == "check.prometheus":
            step["with"].update({"for": holds, "poll": poll, "timeout": f"{gives_up:g}s"})
            step["timeout"] = f"{gives_up + 15:g}s"
    return playbook


def quicken_gate(playbook: dict[str, Any], *, soak: str = "2s", every: str = "1s") -> dict[str, Any]:
    """Every gpu.health step with a soak soaks for `soak` (a round every `every`) instead of the shipped 30
    minutes, its step timeout shortened to match; `playbook` changed in place and returned."""
    for step in every_step(playbook):
        if step["action"] == "gpu.health" and "soak" in step.get("with", {}):
            step["with"].update({"soak": soak, "every": every})
            step["timeout"] = "2m"
    return playbook


def burn_in_here(playbook: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Every slurm.burnin step runs its benchmark in `workdir` (this checkout: the node's interpreter then imports
    this checkout's remediate, as a site's imports the one it installed); its table, interpreter and the rest as
    the site's settings say. `playbook` changed in place and returned."""
    for step in every_step(playbook):
        if step["action"] == "slurm.burnin":
            step.setdefault("with", {})["workdir"] = str(workdir)
    return playbook
