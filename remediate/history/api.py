"""The JSON shapes of /history and /runs/<id> (API v1), from the store's typed history rows.

The HTTP server answers with them and `remediate history` / `remediate runs` print the same shapes,
whether they read the database or a server (--server). Keys and their order are the API's: a change
here is a change of the API.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from remediate.history.secrets import shown_text, shown_value
from remediate.judging.ladder import standing
from remediate.runs import LadderState, Standing
from remediate.store.history import HistoryEntry, RunDetail, StepDetail

_RUNG_REASON = re.compile(r"; rung (\d+) of (\d+) \(([^)]*)\): (.*)$", re.DOTALL)
"""The ladder's part of a decision's reason, as remediate.judging.engine writes it: `; rung N of M (name): why`."""
_RUN_KEYS = RunDetail._fields[: RunDetail._fields.index("superseded_by") + 1]
"""A run's JSON starts with its fields up to `superseded_by`, in their order."""


def ladder_json(rung: int | None, reason: str | None) -> dict[str, Any] | None:
    """Which rung of how many, its name and why it was chosen (from the decision's reason: the ladder as it
    was when the run was made, not as the playbook is now); None for a run of a playbook without a ladder."""
    if rung is None:
        return None
    found = _RUNG_REASON.search(reason or "")
    if found is None:
        return {"rung": rung, "of": None, "name": None, "why": None}
    return {"rung": rung, "of": int(found.group(2)), "name": found.group(3), "why": found.group(4)}


def entry_json(entry: HistoryEntry) -> dict[str, Any]:
    run = entry.run
    return {
        "id": entry.id,
        "time": entry.time,
        "alertname": entry.alertname,
        "fingerprint": entry.fingerprint,
        "alert_status": entry.alert_status,
        "playbook": entry.playbook,
        "target": entry.target,
        "decision": entry.decision,
        "reason": entry.reason,
        "notification_reason": entry.notification_reason,
        "status": entry.status,
        "run_id": entry.run_id,
        "rung": None if run is None else run.rung,
        "run": None
        if run is None
        else {
            "id": run.id,
            "phase": run.phase,
            "mode": run.mode,
            "status": run.status,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error if run.error is None else shown_text(run.error),
            "rung": run.rung,
        },
    }


def history_json(entries: list[HistoryEntry], next_cursor: str | None) -> dict[str, Any]:
    """The body of GET /history: one page of entries and the cursor of the next (null at the end)."""
    return {"entries": [entry_json(e) for e in entries], "next_cursor": next_cursor}


def _step_json(step: StepDetail) -> dict[str, Any]:
    """A step as every reader may see it: a URL's or a header's secret hidden (remediate.history.secrets)."""
    shown = {**step._asdict(), "attempts": [a._asdict() for a in step.attempts]}
    for key in ("params", "plan", "result", "error", "attempts"):
        shown[key] = shown_value(shown[key])
    return shown


def ran_on(run: RunDetail) -> list[str]:
    """The executors that ran the run's attempts, in the order they first started one: two after a
    replica died and another took the run over."""
    attempts = sorted((a for s in run.steps for a in s.attempts), key=lambda a: a.started_at)
    return list(dict.fromkeys(a.ran_on for a in attempts if a.ran_on))


def run_json(run: RunDetail) -> dict[str, Any]:
    """The body of GET /runs/<id> (and of an approval's answer)."""
    alert = run.alert
    head = dict(zip(_RUN_KEYS, run, strict=False))
    for key in ("error", "announce_error"):  # an error may quote a URL (a POST's)
        if isinstance(head.get(key), str):
            head[key] = shown_text(head[key])
    return {
        **head,
        "ran_on": ran_on(run),
        "rung": run.rung,
        "ladder": ladder_json(run.rung, run.decision.reason if run.decision else None),
        "decision": None
        if run.decision is None
        else {"decision": run.decision.decision, "reason": run.decision.reason},
        "alert": {
            "id": alert.id,
            "notification_id": alert.notification_id,
            "fingerprint": alert.fingerprint,
            "status": alert.status,
            "startsAt": alert.starts_at,
            "endsAt": alert.ends_at,
            "labels": alert.labels,
            "annotations": alert.annotations,
            "generatorURL": alert.generator_url,
        },
        "steps": [_step_json(s) for s in run.steps],
        # Added with schema version 15, after the keys API clients already read in order.
        "playbook_version": run.playbook_version,
        "wave": run.wave,
    }


def ladder_state_json(
    state: LadderState, rungs: Sequence[str] | None = None, run_status: str | None = None
) -> dict[str, Any]:
    """One ladder of GET /ladders: where it stands (rung 0: reset by a person) and the rungs it climbed since
    its last reset. `rungs`: the names of the playbook's rungs as loaded now, when known (`of`, `name`);
    `run_status`: the status now of the last rung's run (`standing`, `in_force`: remediate.judging.ladder.standing)."""
    where = standing(state, run_status)
    return {
        "playbook": state.playbook,
        "guard_key": state.guard_key,
        "target": state.target,
        "rung": state.rung,
        "of": len(rungs) if rungs is not None else None,
        "name": rungs[state.rung - 1] if rungs is not None and 0 < state.rung <= len(rungs) else None,
        "reason": state.reason,
        "run_id": state.run_id,
        "run_status": run_status,
        "standing": where,
        "in_force": where == Standing.IN_FORCE,
        "fingerprint": state.fingerprint,
        "starts_at": state.starts_at,
        "climbed_at": state.climbed_at,
        "resolved_at": state.resolved_at,
        "updated_at": state.updated_at,
        "climb": [dict(step) for step in state.climb],
    }
