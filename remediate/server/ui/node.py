"""One node's timeline: its decisions and runs (the history of that target), where its escalation
ladders stand and the rungs they climbed, and the breaker's claims on it, merged newest first.

The history is paged (50 decisions a page, by the API's cursor); the ladder and breaker events of the
same span of time go with each page: on a page with older ones after it, those older than its oldest
decision wait for that page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One line of the timeline."""

    time: float
    kind: str
    """decision, ladder or breaker (the row's colour and filter)."""
    what: str
    run_id: int | None = None
    status: str | None = None
    """The run's status (or the decision's), for its badge."""


def _decision_events(entries: Iterable[Mapping[str, Any]]) -> Iterable[Event]:
    for e in entries:
        # The reason names the playbook, the rung and why (or the undo): it says the rest.
        what = f"{e['alertname']} {e['alert_status']}, {e['decision']}"
        yield Event(e["time"], "decision", f"{what}: {e['reason']}" if e["reason"] else what, e["run_id"], e["status"])


def _ladder_events(ladders: Iterable[Mapping[str, Any]]) -> Iterable[Event]:
    for ladder in ladders:
        for step in ladder["climb"]:
            yield Event(step["at"], "ladder", f"ladder {ladder['playbook']}: rung {step['rung']} ({step['reason']})",
                        step.get("run"))  # fmt: skip
        if ladder["resolved_at"] is not None and ladder["rung"] >= 1:
            yield Event(ladder["resolved_at"], "ladder",
                        f"ladder {ladder['playbook']}: rung {ladder['rung']} resolved, no longer in force",
                        ladder["run_id"])  # fmt: skip
        if ladder["rung"] < 1:
            yield Event(ladder["updated_at"], "ladder", f"ladder {ladder['playbook']}: {ladder['reason']}")


def _claim_events(claims: Iterable[Any]) -> Iterable[Event]:
    for claim in claims:
        yield Event(claim.claimed_at, "breaker", f"breaker claim: {claim.kind} by run #{claim.run_id}", claim.run_id)
        if claim.released_at is not None:
            why = f": {claim.released_reason}" if claim.released_reason else ""
            yield Event(claim.released_at, "breaker", f"breaker claim released ({claim.kind}){why}", claim.run_id)


def timeline(
    entries: list[Mapping[str, Any]],
    ladders: Iterable[Mapping[str, Any]],
    claims: Iterable[Any],
    *,
    more: bool,
) -> list[Event]:
    """A page of the node's timeline, newest first: `entries` (a history page, newest first) with the
    ladder and breaker events of its span; `more`: an older page follows this one."""
    oldest = entries[-1]["time"] if more and entries else None
    events = list(_decision_events(entries))
    events += [e for e in (*_ladder_events(ladders), *_claim_events(claims)) if oldest is None or e.time >= oldest]
    return sorted(events, key=lambda e: e.time, reverse=True)
