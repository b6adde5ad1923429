"""Repeat offenders' counts: the firing runs of a playbook that acted on a target within a window.

A run "acted" when it succeeded: refused, failed, cancelled, waiting and dry-run (`planned`) runs do
not count. The engine reads one (playbook, target) inside its ingest transaction (`acted_runs`, for
the playbook's `repeat_offender`, remediate.judging.ladder.repeat_offender_choice); the report and the state
page list every target at or over a playbook's count (`read_repeat_offenders`). Both are range scans
of the index ix_runs_target (playbook, target, phase, created_at).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from remediate.intake.alerts import format_timestamp
from remediate.runs import RunStatus
from remediate.store import schema as t

_ACTED = (
    t.runs.c.playbook == sa.bindparam("p_playbook"),
    t.runs.c.phase == "firing",
    t.runs.c.status == RunStatus.SUCCEEDED,
    t.runs.c.created_at >= sa.bindparam("p_since"),
)
_ACTED_ON_TARGET = sa.select(sa.func.count()).where(*_ACTED, t.runs.c.target == sa.bindparam("p_target"))
_OFFENDERS = (
    sa.select(t.runs.c.target, sa.func.count(), sa.func.max(t.runs.c.created_at))
    .where(*_ACTED, t.runs.c.created_at < sa.bindparam("p_until"))
    .group_by(t.runs.c.target)
    .having(sa.func.count() >= sa.bindparam("p_count"))
)


@dataclass(frozen=True)
class RepeatRule:
    """A playbook's `repeat_offender` as the store counts it (the store knows no playbooks)."""

    playbook: str
    count: int
    within: float
    """Seconds."""
    then: str
    """The rung a repeat offender goes straight to."""


class RepeatOffender(NamedTuple):
    target: str
    playbook: str
    count: int
    """Runs that acted in the `within` window ending at the report's `until`."""
    last_at: float
    rule: RepeatRule

    def as_json(self) -> dict[str, Any]:
        """Its entry of GET /report's `repeat_offenders` (docs/report.md)."""
        return {
            "target": self.target,
            "playbook": self.playbook,
            "runs": self.count,
            "window_seconds": self.rule.within,
            "threshold": self.rule.count,
            "then": self.rule.then,
            "last_run_at": format_timestamp(datetime.fromtimestamp(self.last_at, UTC)),
        }


def acted_runs(conn: sa.Connection, playbook: str, target: str, since: float) -> int:
    """The firing runs of `playbook` on `target` created since `since` that acted (succeeded)."""
    params = {"p_playbook": playbook, "p_target": target, "p_since": since}
    return int(conn.execute(_ACTED_ON_TARGET, params).scalar_one())


def read_repeat_offenders(conn: sa.Connection, rules: Sequence[RepeatRule], until: float) -> list[RepeatOffender]:
    """The targets whose runs acted at least `count` times in the `within` before `until`, per rule:
    most runs first, then by playbook and target."""
    found = []
    for rule in rules:
        params = {"p_playbook": rule.playbook, "p_since": until - rule.within, "p_until": until, "p_count": rule.count}
        found.extend(
            RepeatOffender(target, rule.playbook, int(count), float(last), rule)
            for target, count, last in conn.execute(_OFFENDERS, params)
        )
    return sorted(found, key=lambda o: (-o.count, o.playbook, o.target))
