"""Plain values for what remediate reads from Slurm, and the parsing of `sinfo --json` into them. Pure.

`sinfo --json` prints the OpenAPI v0.0.38 structures on Slurm 22.05 (the same as slurmrestd's
`/slurm/v0.0.38/nodes`): `{"meta": ..., "errors": [...], "nodes": [{"name", "hostname", "state",
"state_flags", "reason", "reason_set_by_user", "partitions", "features", ...}]}`. Only the fields below are
read; a node without a name, or an answer that is not that shape, is a SlurmError naming what was missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remediate.slurm.errors import SlurmError, SlurmUnavailable
from remediate.slurm.reason import HandedTo, drained_by_run, handed_to

OUT_OF_SERVICE = frozenset({"down", "fail", "future"})
"""Base states (`state`, lower case in v0.0.38) in which a node takes no jobs whatever its flags."""


@dataclass(frozen=True)
class SlurmNode:
    """One node as `sinfo --json` showed it."""

    name: str
    """NodeName: what scontrol takes."""
    hostname: str
    """NodeHostName (often the same as name)."""
    state: str
    """The base state, lower case: idle, allocated, mixed, down, unknown, ..."""
    flags: frozenset[str]
    """State flags, upper case: DRAIN, NOT_RESPONDING, MAINTENANCE, REBOOT_REQUESTED, ..."""
    reason: str = ""
    reason_set_by: str | None = None
    """The user who set the reason (Slurm's own `slurm` or `root` for its automatic ones); None: no reason."""
    reason_changed_at: int = 0
    """Epoch seconds; 0 when Slurm has none."""
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        """DRAIN set: DRAINING while jobs still run, DRAINED once idle."""
        return "DRAIN" in self.flags

    @property
    def out_of_service(self) -> bool:
        """Drained, or in a state that takes no jobs (down, fail, future)."""
        return self.drained or self.state in OUT_OF_SERVICE

    @property
    def drained_by_run(self) -> int | None:
        """The remediate run whose mark the reason carries, while the node is drained; None otherwise."""
        return drained_by_run(self.reason) if self.drained else None

    @property
    def handed_to(self) -> HandedTo | None:
        """Who has the node, while it is drained with a hand-off reason (slurm.handoff); None otherwise."""
        return handed_to(self.reason) if self.drained else None

    @property
    def held_by_run(self) -> int | None:
        """The run whose drain the node holds, remediate's own or handed over since: what the breaker counts.
        A handed-off node stays out of service because of remediate, as a handed-off Kubernetes node stays
        cordoned with remediate's marks, so it keeps counting until its owner resumes it."""
        handed = self.handed_to
        return handed.run if handed is not None else self.drained_by_run

    @property
    def state_text(self) -> str:
        """`IDLE+DRAIN`, as scontrol writes it."""
        return "+".join([self.state.upper(), *sorted(self.flags)])

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hostname": self.hostname,
            "state": self.state_text,
            "reason": self.reason or None,
            "reason_set_by": self.reason_set_by,
            "partitions": list(self.partitions),
        }


def _names(value: Any) -> tuple[str, ...]:
    """A list of names, or Slurm's comma-separated string of them (features)."""
    if isinstance(value, str):
        return tuple(part for part in value.split(",") if part)
    if isinstance(value, Sequence):
        return tuple(str(part) for part in value if part)
    return ()


def parse_node(entry: Mapping[str, Any]) -> SlurmNode:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmError(f"sinfo --json: a node without a name: {sorted(entry)[:8]}")
    reason = str(entry.get("reason") or "")
    set_by = entry.get("reason_set_by_user")
    return SlurmNode(
        name=name,
        hostname=str(entry.get("hostname") or name),
        state=str(entry.get("state") or "unknown").lower(),
        flags=frozenset(str(flag).upper() for flag in entry.get("state_flags") or ()),
        reason=reason,
        reason_set_by=str(set_by) if set_by and reason else None,
        reason_changed_at=int(entry.get("reason_changed_at") or 0),
        partitions=_names(entry.get("partitions")),
        features=_names(entry.get("active_features") or entry.get("features")),
    )


def parse_nodes(answer: Any, command: str = "sinfo --json") -> tuple[SlurmNode, ...]:
    """The nodes of a `sinfo --json` answer. SlurmUnavailable when it carries errors: sinfo exits 0 with an
    error list and no nodes when slurmctld does not answer (checked on 22.05.8)."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("nodes"), list):
        raise SlurmError(f"{command}: unexpected answer (no `nodes` list); is this Slurm 22.05 or later?")
    errors = [e for e in answer.get("errors") or () if isinstance(e, Mapping)]
    if errors:
        words = "; ".join(f"{e.get('error', 'error')} (errno {e.get('errno', '?')})" for e in errors)
        raise SlurmUnavailable(f"{command}: slurmctld did not answer: {words}")
    return tuple(parse_node(entry) for entry in answer["nodes"] if isinstance(entry, Mapping))
