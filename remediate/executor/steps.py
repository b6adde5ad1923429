"""Step execution: a claimed run's remaining steps in order, each planned, then executed in attempts.

Each step: plan (recorded), then execute with a per-step deadline; errors the
action marks retryable (RetryableActionError) are retried with tenacity's
exponential backoff, up to the step's `retries`; every attempt is recorded.
Dry-run runs only plan. Every step takes two write transactions: the plan with the start of its first
attempt (recorded before the action runs, so a crash leaves it `interrupted`), and the end of the
attempt, the step and (last step, or a failed one) the run, durable before the next step starts. The
first step's start rides on the claim itself: the executor reads the head of the queue, plans its first
step outside any transaction, then claims the run and records that start (or the step's end, where it
ends before an attempt) in one transaction, taken only if no other executor claimed the run meanwhile
(RunQueue.claim_next). A one-step run thus costs two write transactions, its alert three with the
ingest; a retry adds one per attempt. A failed step ends the
run: the later steps are recorded `skipped` with the
reason, except those marked `always: true` (a notification), which still run; the run stays
failed. Plans only read, so their retryable errors are retried too, with the same budget. An
error after a request may have reached its target (AmbiguousActionError) is never retried for
an action that is not idempotent. A `where: node` step for another node runs on that node's
agent (remediate.executor.runners: the executor calls a runner's plan/execute, never the
action's directly). After a crash, recovery (remediate.executor.leases) requeues the
runs of dead executors; a step that was in flight is run again only when its
action declares itself idempotent, otherwise the run fails with that reason.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from remediate.actions.base import Action, ActionRegistry, StepContext
from remediate.actions.deadline import StepTimeout, call_with_deadline
from remediate.errors import (
    ActionError,
    AmbiguousActionError,
    ClaimLostError,
    OutcomePending,
    ParamsError,
    PartialFailure,
    RetryableActionError,
    StoreUnavailable,
)
from remediate.executor.context import StepContexts
from remediate.executor.dispatch import Dispatch
from remediate.executor.leases import Leases
from remediate.executor.metrics import ExecutorMetrics
from remediate.executor.runners import StepRunner, stamped
from remediate.logs.audit import audit_event
from remediate.runs import (
    DONE_STEP_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    FinishedRun,
    RunEnd,
    RunStatus,
    RunWrite,
    StepEnd,
    StepRecord,
    StepStart,
    StepStatus,
)
from remediate.store import EXECUTOR_STOPPED, Store

log = logging.getLogger("remediate.executor")


@dataclass(frozen=True)
class StepFailure:
    """A failed step, as the run sees it."""

    run_error: str
    ended_run: bool
    rerunnable: bool = False


@dataclass(eq=False, kw_only=True)
class StepExecutor:
    """Executes a claimed run's steps and records each one's plan, attempts and end under the run's lease.

    Holds what a step needs and nothing of the executor's threads: the store it writes to, the actions
    and where they run, what a step's context shares (`contexts`), the executor's `leases` (a step end
    the store failed to record is kept there for the hand-back)."""

    store: Store
    registry: ActionRegistry
    dispatch: Dispatch
    leases: Leases
    contexts: StepContexts
    metrics: ExecutorMetrics
    clock: Callable[[], float]
    retry_wait_max: float
    on_run_finished: tuple[Callable[[FinishedRun], None], ...]

    def execute_run(self, run: ClaimedRun) -> None:
        """Execute the run's remaining steps. ClaimLostError: another executor owns the run now.

        `run` is the head of the queue as `next_run` read it (with its steps); the first write claims it
        (`_write`)."""
        dry_run = run.mode == "dry-run"
        audit_event(
            "run_started", run_id=run.id, playbook=run.playbook, target=run.target, phase=run.phase, mode=run.mode,
            rung=run.rung,
        )  # fmt: skip
        steps = list(run.steps) if run.steps is not None else self.store.queue.steps_of(run.id)
        # A step failed before a restart, and only `always` steps were left to run.
        failure = next((_run_error(s, s.error or s.status) for s in steps if _failed(s)), None)
        rerunnable = False
        # Whether a step of the run started an attempt, before this pass or in it (`steps` is read once, here).
        progress = _RunProgress(changed=any(s.attempts > 0 for s in steps))
        pending = [s for s in steps if s.status not in DONE_STEP_STATUSES and not s.finished]
        for position, step in enumerate(pending):
            rest = pending[position + 1 :]
            if failure is None:
                # The last step's (or a failing step's) result and the run's end are recorded together.
                failed = self._execute_step(run, step, dry_run, last=not rest, rest=rest, progress=progress)
                if failed is None:
                    continue
                if failed.ended_run:
                    return
                failure, rerunnable = failed.run_error, failed.rerunnable
            elif step.always:
                self._execute_step(run, step, dry_run, last=False, rest=(), progress=progress, after_failure=True)
        if failure is not None:
            # A failure recorded before this pass (handed back after a store outage) skips the steps after it here.
            failed_before = next((s for s in steps if _failed(s)), None)
            skip = [s.id for s in pending if not s.always] if failed_before is not None else []
            reason = (
                ""
                if failed_before is None
                else f"skipped: step {failed_before.idx} {failed_before.name} ({failed_before.action}) failed"
            )
            # Rerunnable only if nothing ran since the failure either: an `always` step that started an attempt
            # (a page to on-call) would run again, and page again, on every re-delivery of the alert.
            rerunnable = rerunnable and not progress.changed
            self._finish_run(
                run, progress, RunStatus.FAILED, failure, rerunnable=rerunnable, skip=skip, skip_reason=reason
            )
        elif not pending:
            self._finish_run(run, progress, RunStatus.PLANNED if dry_run else RunStatus.SUCCEEDED, None)

    def _finish_run(
        self,
        run: ClaimedRun,
        progress: _RunProgress,
        status: RunStatus,
        error: str | None,
        *,
        rerunnable: bool = False,
        skip: Sequence[int] = (),
        skip_reason: str = "",
    ) -> None:
        end = RunEnd(run.id, status, error)
        self._write(run, progress, RunWrite(run.lease, skip=tuple(skip), skip_reason=skip_reason, run_end=end,
                                            rerunnable=rerunnable))  # fmt: skip
        self._run_finished(run, end)

    def _write(self, run: ClaimedRun, progress: _RunProgress, write: RunWrite) -> None:
        """Record `write` in one transaction under the run's lease; the run's first write claims it too
        (`progress.claimed` False: RunQueue.claim_next). ClaimedElsewhere: another executor claimed it first,
        nothing was written."""
        if progress.claimed:
            self.store.queue.record(write, self.clock())
        elif self.store.queue.claim_next(run, self.clock(), write):
            progress.claimed = True
        else:
            raise ClaimedElsewhere(f"run {run.id}: claimed by another executor first; this one leaves it")

    def _run_finished(self, run: ClaimedRun, end: RunEnd | None) -> None:
        """Metrics, log and listeners of a run end the store has recorded."""
        if end is None:
            return
        self.metrics.run_finished(end.status, run.playbook)
        finished = FinishedRun(
            run.id, run.playbook, run.target, str(run.alert_context.get("alertname", "")), run.phase, run.mode,
            end.status, end.error, run.started_at, self.clock(),
        )  # fmt: skip
        duration = None if run.started_at is None else round(finished.finished_at - run.started_at, 3)
        # A failed run is what an operator must look at: WARNING (a succeeded or planned one is INFO).
        audit_event(
            "run_ended", level=logging.WARNING if end.status == RunStatus.FAILED else logging.INFO, run_id=run.id,
            playbook=run.playbook, target=run.target, outcome=str(end.status), error=end.error, duration_s=duration,
        )  # fmt: skip
        if not self.on_run_finished:
            return
        for listener in self.on_run_finished:
            try:
                listener(finished)
            except Exception:  # a listener's bug never fails the executor, whose run is already recorded
                log.exception("run %s: a run-finished listener failed", run.id)

    def _execute_step(
        self,
        run: ClaimedRun,
        step: StepRecord,
        dry_run: bool,
        *,
        last: bool,
        rest: Sequence[StepRecord],
        progress: _RunProgress,
        after_failure: bool = False,
    ) -> StepFailure | None:
        """Plan and (unless dry-run) execute one step; returns its failure, or None on success.

        A failed step ends the run (unless `always` steps follow: they run first), and so does the
        `last` one: the step's outcome and the run's end are then recorded in one transaction.
        `after_failure`: an `always` step after a failed one; its outcome never changes the run's.
        """
        started = time.monotonic()
        progress.failed_attempt = None
        # Records the step's failure (`_fail_step`) with this step's circumstances.
        fail = partial(
            self._fail_step, run, step, started=started, rest=rest, progress=progress, after_failure=after_failure
        )
        try:
            action = self.registry.get(step.action)
            params = action.validate(step.params)
        except ParamsError as exc:
            return fail(f"{exc}")
        if step.status == StepStatus.INTERRUPTED and not action.idempotent:
            why = step.error or f"{EXECUTOR_STOPPED} while this step was running"
            message = (
                f"interrupted during attempt {step.attempts} ({why}); {action.name} is not "
                "idempotent, so it is not run again: check the target by hand"
            )
            return fail(message, status=StepStatus.INTERRUPTED)
        deadline = started + step.timeout
        reported = self.store.queue.steps_of(run.id) if action.reports_run else ()
        ctx = self.contexts.context(run, step, deadline, steps=reported)
        runner = self.dispatch.runner_for(action, step.node_of(run))
        try:
            plan = stamped(runner, plan_step(runner, action, params, ctx, step, self.retry_wait_max))
        except (ClaimLostError, StoreUnavailable):
            raise
        except Exception as exc:
            transient = isinstance(exc, RetryableActionError) and step.attempts == 0
            return fail(f"plan failed: {_describe(exc)}", transient=transient)
        run_end = RunEnd(run.id, RunStatus.PLANNED if dry_run else RunStatus.SUCCEEDED) if last else None
        if dry_run:
            self._write(run, progress, RunWrite(run.lease, ends=(StepEnd(step.id, StepStatus.PLANNED, plan=plan),),
                                                run_end=run_end))  # fmt: skip
            self.metrics.step_finished(step.action, StepStatus.PLANNED, time.monotonic() - started)
            self._run_finished(run, run_end)
            return None
        try:
            # The plan is recorded with the start of the first attempt (one transaction).
            number, outcome = self._attempts(runner, action, params, ctx, step, plan, run, progress)
            result = stamped(runner, outcome)
        except (ClaimLostError, StoreUnavailable):  # the store failed, not the step: see Executor._execute_claimed
            raise
        except Exception as exc:
            # Where a failed node step ran, as for one that succeeded: its partial result came from there.
            return fail(_describe(exc), plan=plan, result=stamped(runner, _failure_result(exc)))
        end = StepEnd(step.id, StepStatus.SUCCEEDED, result, attempt=number)
        self._end_step(run, progress, step, started, RunWrite(run.lease, ends=(end,), run_end=run_end))
        return None

    def _end_step(self, run: ClaimedRun, progress: _RunProgress, step: StepRecord, started: float,
                  write: RunWrite) -> None:  # fmt: skip
        """Record the end of a step whose action ran (`write`: the run's end too, if any), kept for the
        hand-back if the store fails under it; then its metrics and the run's end."""
        (end,) = write.ends
        with self.leases.kept_if_unrecorded(run, end):
            self._write(run, progress, write)
        self.metrics.step_finished(step.action, end.status, time.monotonic() - started)
        self._run_finished(run, write.run_end)

    def _attempts(
        self,
        runner: StepRunner,
        action: Action,
        params: Mapping[str, Any],
        ctx: StepContext,
        step: StepRecord,
        plan: Any,
        run: ClaimedRun,
        progress: _RunProgress,
    ) -> tuple[int, Any]:
        """Execute the step, retrying retryable errors; returns (number of the attempt that succeeded, its result).

        Each attempt's start is one write (the first with the plan; the run's claim when it is the run's first
        write). A failed attempt is closed with the next one's start, or (the last) with the step's failure
        (`progress.failed_attempt`, `_fail_step`); the one that succeeded is closed with the step's end.
        """
        pending_plan = plan  # recorded with the first attempt
        number = step.attempts
        budget = max(0.0, ctx.deadline - time.monotonic())
        retrying = Retrying(
            stop=stop_after_attempt(step.retries + 1) | stop_after_delay(budget),
            wait=_backoff(self.retry_wait_max),
            retry=retry_if_exception(lambda exc: _may_retry(exc, action)),
            reraise=True,
        )
        lease = run.lease
        try:
            for attempt in retrying:
                with attempt:
                    failed = progress.failed_attempt
                    if failed is not None:  # a retry: the attempt before it is closed first, as it ended
                        self.store.queue.finish_attempt(step.id, *failed, lease=lease)
                        progress.failed_attempt = None
                    progress.changed = True  # from here on the action may have changed something
                    number += 1
                    self._write(run, progress, RunWrite(lease, starts=(StepStart(step.id, number, pending_plan),)))
                    pending_plan = None
                    try:
                        result = call_with_deadline(lambda: runner.execute(action, params, ctx), ctx.remaining())
                    except Exception as exc:
                        outcome = _attempt_outcome(exc, action)
                        error = _describe(exc) if outcome is AttemptOutcome.FAILED else str(exc)
                        progress.failed_attempt = (number, outcome, error, self.clock())
                        raise
                    return number, result
        except RetryError as exc:  # pragma: no cover - reraise=True makes tenacity re-raise the last error
            raise ActionError(str(exc)) from exc
        raise ActionError("no attempt was made (step deadline already passed)")

    def _fail_step(
        self,
        run: ClaimedRun,
        step: StepRecord,
        error: str,
        started: float,
        *,
        status: StepStatus = StepStatus.FAILED,
        plan: Any = None,
        rest: Sequence[StepRecord] = (),
        progress: _RunProgress,
        after_failure: bool = False,
        transient: bool = False,
        result: Any = None,
    ) -> StepFailure | None:
        """Record the step's failure, the later steps that are skipped, and (unless `always` steps follow)
        the run's failure, in one transaction.

        `transient`: the step failed for a reason that may pass (a retryable error in its plan); when no
        step of the run started an attempt before (`progress`: in an earlier pass or in this one), nor does an
        `always` step after it (`execute_run` checks again once they ran), the run is marked rerunnable (the
        next delivery of the alert runs again instead of being a duplicate).

        A `continue_on_error` step's failure is recorded and the run goes on: None, as for a success (the
        run ends succeeded when it was the last step).
        """
        run_error = _run_error(step, error)
        # The step's last attempt, if it failed, is closed with the step, in the same write.
        failed, progress.failed_attempt = progress.failed_attempt, None
        end = StepEnd(step.id, status, result, error, plan)
        attempt_end = end if failed is None else replace(end, attempt=failed[0], outcome=failed[1])
        if step.continue_on_error and not after_failure:
            dry_run = run.mode == "dry-run"
            run_end = None if rest else RunEnd(run.id, RunStatus.PLANNED if dry_run else RunStatus.SUCCEEDED)
            self._end_step(run, progress, step, started, RunWrite(run.lease, ends=(attempt_end,), run_end=run_end))
            log.info("run %s: %s; continue_on_error: the run goes on", run.id, run_error)
            return None
        if after_failure:  # an `always` step: recorded, the run keeps its first failure
            self._end_step(run, progress, step, started, RunWrite(run.lease, ends=(attempt_end,)))
            return StepFailure(run_error, ended_run=False)
        skipped = [s.id for s in rest if not s.always]
        reason = f"skipped: step {step.idx} {step.name} ({step.action}) failed"
        ends = not any(s.always for s in rest)
        run_end = RunEnd(run.id, RunStatus.FAILED, run_error) if ends else None
        rerunnable = transient and run.mode != "dry-run" and not progress.changed
        self._end_step(run, progress, step, started, RunWrite(
            run.lease, ends=(attempt_end,), skip=tuple(skipped), skip_reason=reason, run_end=run_end,
            rerunnable=rerunnable and ends,
        ))  # fmt: skip
        return StepFailure(run_error, ended_run=ends, rerunnable=rerunnable)


def plan_step(
    runner: StepRunner,
    action: Action,
    params: Mapping[str, Any],
    ctx: StepContext,
    step: StepRecord,
    retry_wait_max: float,
) -> Any:
    """The step's plan; plans only read, so retryable errors are retried within the step's retries and
    deadline, whatever the action's idempotency."""
    tries = 0
    retrying = Retrying(
        stop=stop_after_attempt(step.retries + 1) | stop_after_delay(max(0.0, ctx.deadline - time.monotonic())),
        wait=_backoff(retry_wait_max),
        retry=retry_if_exception(lambda exc: isinstance(exc, RetryableActionError)),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                tries += 1
                return call_with_deadline(lambda: runner.plan(action, params, ctx), ctx.remaining())
    except RetryableActionError as exc:
        if tries > 1:
            raise RetryableActionError(f"{exc} ({tries} tries)") from exc
        raise
    raise StepTimeout("no time left to plan (step deadline already passed)")  # pragma: no cover


def _backoff(retry_wait_max: float) -> wait_exponential:
    """The wait between a step's tries (its plan's and its attempts')."""
    # tenacity applies `min` after `max`: cap it too, or retry_wait_max < 0.2 s would not shorten waits.
    return wait_exponential(multiplier=0.5, min=min(0.2, retry_wait_max), max=retry_wait_max)


def _run_error(step: StepRecord, error: str) -> str:
    return f"step {step.idx} {step.name} ({step.action}): {error}"


def _failed(step: StepRecord) -> bool:
    """The step ended in a failure that fails its run (not an `interrupted` step recovery left to be judged
    again, nor a `continue_on_error` step's)."""
    return step.finished and step.status not in DONE_STEP_STATUSES and not step.continue_on_error


def _may_retry(exc: BaseException, action: Action) -> bool:
    """Retryable, unless the request may have reached its target and the action must not run twice."""
    if not isinstance(exc, RetryableActionError):
        return False
    return action.idempotent or not getattr(exc, "maybe_applied", False)


def _attempt_outcome(exc: BaseException, action: Action) -> AttemptOutcome:
    """How an attempt that raised `exc` ended."""
    if isinstance(exc, RetryableActionError):
        return AttemptOutcome.RETRYABLE_ERROR if _may_retry(exc, action) else AttemptOutcome.MAYBE_APPLIED
    if isinstance(exc, AmbiguousActionError):
        return AttemptOutcome.MAYBE_APPLIED
    if isinstance(exc, StepTimeout):
        return AttemptOutcome.TIMEOUT
    return AttemptOutcome.FAILED


def _failure_result(exc: BaseException) -> dict[str, Any] | None:
    """What a failed step's result keeps: what to look for when a change was handed over but not confirmed
    (OutcomePending, for reconcile_pending), or what a partly done action did (PartialFailure)."""
    if isinstance(exc, OutcomePending):
        return {"pending": exc.follow_up}
    if isinstance(exc, PartialFailure):
        return exc.result
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ActionError):
        return str(exc)
    # An unexpected exception is a bug in an action: keep the place it happened.
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {frame.filename}:{frame.lineno}" if frame else ""
    return f"unexpected {exc.__class__.__name__}: {exc}{where}"


@dataclass
class _RunProgress:
    """What one pass of `execute_run` did to its run so far."""

    changed: bool
    """An attempt of one of the run's steps started (before this pass or in it): a later failure of the run
    is then not one "before changing anything" (never rerunnable)."""
    claimed: bool = False
    """The run's claim is recorded; False until its first write, which claims it (StepExecutor._write)."""
    failed_attempt: tuple[int, AttemptOutcome, str | None, float] | None = None
    """The current step's last attempt, failed and not closed yet: (number, outcome, error, when it ended)."""


class ClaimedElsewhere(ClaimLostError):
    """The run read at the head of the queue was claimed by another executor before this one's claim."""
