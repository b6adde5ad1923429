"""Runs and steps: their statuses, the values the executor works with, and how a run is built.

A run is one accepted (or rejected) (alert, playbook) pair; its steps are the playbook's rendered
steps for the alert's phase; each step is tried in attempts. The store keeps them, the engine builds
them (`run_row`, `step_rows`, `decision_row`: pure, from the guards' verdict), the executor moves
them along. Every status is one of the enums below: no other module spells a status as a bare
string (tests/unit/test_runs.py checks). They are StrEnums, so they equal the strings stored in the
database and written in the HTTP API.

Pure: this module imports nothing of remediate, so the store, the guards and the engine can all use it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class RunStatus(StrEnum):
    QUEUED = "queued"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PLANNED = "planned"
    """A dry-run run that finished planning."""
    REJECTED = "rejected"
    """Its params did not render or validate; nothing ran."""
    CANCELLED = "cancelled"
    """It awaited approval, and the alert resolved first."""


FINAL_RUN_STATUSES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.PLANNED,
    RunStatus.REJECTED,
    RunStatus.CANCELLED,
)


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PLANNED = "planned"
    SKIPPED = "skipped"
    """An earlier step failed and this one is not `always`."""
    INTERRUPTED = "interrupted"
    """The executor stopped during one of its attempts (recovery); it is tried again if idempotent."""


DONE_STEP_STATUSES = (StepStatus.SUCCEEDED, StepStatus.PLANNED, StepStatus.SKIPPED)
"""A step in one of these is never run again."""


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYABLE_ERROR = "retryable_error"
    MAYBE_APPLIED = "maybe_applied"
    """The action may have changed the target before it failed: it is retried only if idempotent."""
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


class Decision(StrEnum):
    """What the guards decided for one (alert, playbook) pair (remediate.guards.judge)."""

    ACCEPTED = "accepted"
    UNMATCHED = "unmatched"
    DUPLICATE = "duplicate"
    PAUSED = "paused"
    COOLDOWN = "cooldown"
    ATTEMPT_CAP = "attempt_cap"
    REJECTED = "rejected"
    NO_FIRING_RUN = "no_firing_run"
    NOTHING_ON_RESOLVED = "nothing_on_resolved"
    BREAKER_OPEN = "breaker_open"
    STALE = "stale"
    ALREADY_RESOLVED = "already_resolved"
    """A firing alert whose occurrence was already reported resolved (it arrived late, or in the same
    notification as its resolved): the alert is over, its firing steps are not started."""
    SUPERSEDED = "superseded"
    """A resolved alert whose undo would undo what a newer, still active occurrence needs."""


# ---------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ClaimedRun:
    id: int
    playbook: str
    target: str
    phase: str
    mode: str
    alert_context: Mapping[str, Any]
    generation: int = 0
    """The run's claim_generation after this claim (see RunLease)."""
    worker: str = ""
    rung: int | None = None
    """The escalation ladder's rung (1 = the gentlest) this run is for; None for a playbook without `escalate`."""
    started_at: float | None = None
    """When the run was first claimed (UNIX seconds); None where the store did not say."""
    steps: tuple[StepRecord, ...] | None = None
    """The run's steps as read before its claim (RunQueue.next_run); None: ask `steps_of`."""

    @property
    def lease(self) -> RunLease:
        return RunLease(self.id, self.worker, self.generation)


@dataclass(frozen=True)
class RunLease:
    """Who may write a run's progress: the executor that claimed it, in that claim (generation).

    Every progress write given a lease checks it in its own transaction and raises ClaimLostError
    when the run was requeued or claimed again since: the stale owner then writes nothing more.
    """

    run_id: int
    worker: str
    generation: int


@dataclass(frozen=True)
class RunningClaim:
    """A running run as recovery sees it."""

    id: int
    claimed_by: str
    generation: int
    heartbeat_at: float | None


@dataclass(frozen=True)
class StepRecord:
    id: int
    run_id: int
    idx: int
    name: str
    action: str
    where: str
    params: Mapping[str, Any]
    timeout: float
    retries: int
    status: StepStatus
    attempts: int
    always: bool = False
    error: str | None = None
    finished: bool = False
    """The step has its final outcome (finished_at is set); an `interrupted` step left by recovery has not."""
    continue_on_error: bool = False
    """Its failure is recorded but does not fail the run nor skip the steps after it."""


@dataclass(frozen=True)
class StepStart:
    """A step about to run (RunWrite): its plan (None: keep the one recorded) and the start of its attempt `number`."""

    step_id: int
    number: int
    plan: Any


@dataclass(frozen=True)
class StepEnd:
    """A step that ended (RunWrite), with the attempt it closes, if one started."""

    step_id: int
    status: StepStatus
    result: Any = None
    error: str | None = None
    plan: Any = None
    attempt: int | None = None
    outcome: AttemptOutcome = AttemptOutcome.SUCCEEDED
    """How `attempt` ended; its error is the step's."""


@dataclass(frozen=True)
class RunWrite:
    """What one write transaction records of a run, under its lease (RunQueue.record, or RunQueue.claim_next
    with the claim itself): `ends` before `starts`, a step's end is durable before the next step's attempt."""

    lease: RunLease
    ends: tuple[StepEnd, ...] = ()
    starts: tuple[StepStart, ...] = ()
    skip: tuple[int, ...] = ()
    skip_reason: str = ""
    run_end: RunEnd | None = None
    rerunnable: bool = False


@dataclass(frozen=True)
class PendingOutcome:
    """A failed step whose change may still happen (Store.queue.pending_outcomes)."""

    step: StepRecord
    run: ClaimedRun
    follow_up: Mapping[str, Any]
    """What the action said to look for (OutcomePending.follow_up)."""
    finished_at: float


@dataclass(frozen=True)
class FinishedRun:
    """A run end the store has recorded, as the executor's `on_run_finished` listeners see it."""

    run_id: int
    playbook: str
    target: str
    alertname: str
    phase: str
    mode: str
    status: RunStatus
    error: str | None
    started_at: float | None
    finished_at: float


@dataclass(frozen=True)
class RunEnd:
    """How a run ends (RunWrite.run_end), recorded in the transaction of its last step's end."""

    run_id: int
    status: RunStatus
    error: str | None = None


@dataclass(frozen=True)
class LadderState:
    """Where one escalation ladder stands (a `ladders` row): per (playbook, guard key).

    `rung` 0 means reset by a person (`POST /ladders/reset`): the next firing starts on rung 1 again.
    """

    playbook: str
    guard_key: str
    target: str
    rung: int
    run_id: int
    fingerprint: str
    starts_at: str
    climbed_at: float
    resolved_at: float | None
    reason: str
    climb: tuple[Mapping[str, Any], ...]
    """The rungs run since the ladder last reset: {"rung", "run", "at", "reason"}, oldest first."""
    updated_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LadderState:
        return cls(
            playbook=row["playbook"],
            guard_key=row["guard_key"],
            target=row["target"],
            rung=int(row["rung"]),
            run_id=int(row["run_id"]),
            fingerprint=row["fingerprint"],
            starts_at=row["starts_at"],
            climbed_at=float(row["climbed_at"]),
            resolved_at=None if row["resolved_at"] is None else float(row["resolved_at"]),
            reason=row["reason"],
            climb=tuple(json.loads(row["climb"] or "[]")),
            updated_at=float(row["updated_at"]),
        )

    def row(self) -> dict[str, Any]:
        """The `ladders` row of this state."""
        return {
            "playbook": self.playbook,
            "guard_key": self.guard_key,
            "target": self.target,
            "rung": self.rung,
            "run_id": self.run_id,
            "fingerprint": self.fingerprint,
            "starts_at": self.starts_at,
            "climbed_at": self.climbed_at,
            "resolved_at": self.resolved_at,
            "reason": self.reason,
            "climb": json.dumps(list(self.climb), sort_keys=True),
            "updated_at": self.updated_at,
        }


# ------------------------------------------------------------------ building a run from a verdict
# The engine's values, as far as a run needs them (Protocols: this module imports no engine).


class _Alert(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def status(self) -> str: ...


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _StepSpec(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def retries(self) -> int: ...
    @property
    def always(self) -> bool: ...
    @property
    def continue_on_error(self) -> bool: ...


class _RenderedStep(Protocol):
    @property
    def spec(self) -> _StepSpec: ...
    @property
    def where(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def timeout(self) -> float: ...


class _Evaluation(Protocol):
    @property
    def alert(self) -> _Alert: ...
    @property
    def playbook(self) -> _Named: ...
    @property
    def phase(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def guard_key(self) -> str: ...
    @property
    def mode(self) -> StrEnum: ...
    @property
    def dedupe_key(self) -> str: ...
    @property
    def steps(self) -> Sequence[_RenderedStep]: ...
    @property
    def error(self) -> str | None: ...
    @property
    def awaits_approval(self) -> bool: ...


class _Verdict(Protocol):
    @property
    def decision(self) -> Decision: ...
    @property
    def reason(self) -> str: ...
    @property
    def accepted(self) -> bool: ...


class Judged(Protocol):
    """One (alert, playbook) pair with the guards' verdict (remediate.engine.Judged)."""

    @property
    def alert(self) -> _Alert: ...
    @property
    def evaluation(self) -> _Evaluation | None: ...
    @property
    def verdict(self) -> _Verdict: ...
    @property
    def firing_run(self) -> tuple[int, str] | None: ...
    @property
    def playbook_name(self) -> str | None: ...
    @property
    def target(self) -> str | None: ...
    @property
    def rung(self) -> int | None: ...


def initial_status(accepted: bool, awaits_approval: bool) -> RunStatus:
    """A new run's status: rejected runs end at once, approve-mode firing runs wait for a person."""
    if not accepted:
        return RunStatus.REJECTED
    return RunStatus.AWAITING_APPROVAL if awaits_approval else RunStatus.QUEUED


def queue_priority(alert_count: int) -> int:
    """The queue priority of the runs of a notification of `alert_count` alerts: lower is claimed first.

    One per order of magnitude (1-9 alerts: 0, 10-99: 1, 100-999: 2, 1,000 and more: 3), so a fresh
    alert's run is claimed before the backlog of a storm, and runs of similar notifications keep their
    arrival order (ties go by run id).
    """
    return min(3, len(str(max(1, alert_count))) - 1)


def run_row(judged: Judged, alert_id: int, now: float, *, priority: int = 0) -> dict[str, Any]:
    """The runs row of a judged pair that creates a run (accepted or rejected); `priority`: queue_priority."""
    ev = judged.evaluation
    if ev is None:
        raise ValueError("an alert no playbook matched creates no run")
    accepted = judged.verdict.accepted
    status = initial_status(accepted, ev.awaits_approval)
    return {
        "dedupe_key": ev.dedupe_key,
        "playbook": ev.playbook.name,
        "alertname": ev.alert.name,
        "target": ev.target,
        "guard_key": ev.guard_key,
        "phase": ev.phase,
        "mode": ev.mode.value,
        "status": status,
        "alert_id": alert_id,
        "after_run_id": judged.firing_run[0] if judged.firing_run else None,
        "created_at": now,
        "updated_at": now,
        "finished_at": now if status is RunStatus.REJECTED else None,
        "error": None if accepted else judged.verdict.reason,
        "rung": judged.rung,
        "priority": priority,
    }


def step_rows(run_id: int, ev: _Evaluation | None, params_json: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The steps rows of a new run, all pending; none when its params did not render.

    `params_json`: the JSON of the steps already written in this transaction, by id() of their rendered
    step (the alerts of a notification whose templates read the same values share one, Engine._render)."""
    if ev is None or ev.error is not None:
        return []
    return [
        {
            "run_id": run_id,
            "idx": index,
            "name": step.spec.name,
            "action": step.spec.action,
            "where": step.where,
            "params": _params_json(step, params_json),
            "timeout": step.timeout,
            "retries": step.spec.retries,
            "always": step.spec.always,
            "continue_on_error": step.spec.continue_on_error,
            "status": StepStatus.PENDING,
        }
        for index, step in enumerate(ev.steps)
    ]


def _params_json(step: _RenderedStep, known: dict[int, str] | None) -> str:
    if known is None:
        return json.dumps(step.params, sort_keys=True, default=str)
    # Keyed by id(): the rendered steps stay alive (held by their evaluations) while `known` is used.
    text = known.get(id(step))
    if text is None:
        text = known[id(step)] = json.dumps(step.params, sort_keys=True, default=str)
    return text


def decision_row(
    notification_id: int, alert_id: int, judged: Judged, run_id: int | None, run_status: str | None, now: float
) -> dict[str, Any]:
    """The decisions row of every judged pair: its status is its run's, or the decision when no run was made."""
    return {
        "created_at": now,
        "notification_id": notification_id,
        "alert_id": alert_id,
        "alertname": judged.alert.name,
        "fingerprint": judged.alert.fingerprint,
        "alert_status": judged.alert.status,
        "playbook": judged.playbook_name,
        "target": judged.target,
        "decision": judged.verdict.decision.value,
        "reason": judged.verdict.reason,
        "status": run_status or judged.verdict.decision.value,
        "run_id": run_id,
    }
