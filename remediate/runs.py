"""Runs and steps: their statuses, the values the executor works with, and how a run is built.

A run is one accepted (or rejected) (alert, playbook) pair; its steps are the playbook's rendered
steps for the alert's phase; each step is tried in attempts. The store keeps them, the engine builds
their rows (remediate.judging.engine.run_row, step_rows, decision_row), the executor moves them along. Every
status is one of the enums below: no other module spells a status as a bare string
(tests/unit/test_runs.py checks). They are StrEnums, so they equal the strings stored in the database
and written in the HTTP API.

Pure: this module imports nothing of remediate, so the store, the guards and the engine can all use it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any


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


UNDONE_BY_HAND = "remediate's marks are gone from the node"
"""The reason the circuit breaker releases a claim whose node a person put back (uncordoned, untainted) before
remediate's undo ran: the store's record of an undo by hand (a staged rollout's promotion counts it as a
failure, remediate.store.wave_evidence)."""


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


class Standing(StrEnum):
    """Where an escalation ladder stands, for the operator's pages (remediate.judging.ladder.standing)."""

    RESET = "reset"
    RESOLVED = "resolved"
    IN_FORCE = "in_force"
    PENDING = "pending"
    NOT_IN_FORCE = "not_in_force"
    UNKNOWN = "unknown"


class Decision(StrEnum):
    """What the guards decided for one (alert, playbook) pair (remediate.judging.guards.judge)."""

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
    TRUNCATED = "truncated"
    """Not a pair's: AlertManager left alerts of the notification's group out (its receiver's max_alerts,
    `truncatedAlerts`); recorded once per notification, with its first alert (remediate.judging.truncation)."""


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
    approved_by: str | None = None
    """Who approved an approve-mode run (the principal); None for a run that needed no approval."""

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
    node: str | None = None
    """The node a `run_on` step runs on; None: the run's target (`node_of`)."""
    outcome: str | None = None
    """The `outcome` its result names (`skipped`, `handed_off`, ...), read only for a step that reports the run
    (RunQueue.steps_of); None otherwise, or when the result names none."""

    def node_of(self, run: ClaimedRun) -> str:
        """The node this step runs on, if it is a node step: its own (`run_on`), else the run's target."""
        return self.node or run.target


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
        """The `ladders` row of this state: a column per field, `climb` as JSON."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**row, "climb": json.dumps(list(self.climb), sort_keys=True)}
