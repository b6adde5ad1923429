"""The executor: background threads that claim committed runs and execute their steps in order.

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
agent (remediate.runners: the executor calls a runner's plan/execute, never the
action's directly). After a crash, recovery requeues the
runs of dead executors; a step that was in flight is run again only when its
action declares itself idempotent, otherwise the run fails with that reason.

Ownership: each claim increments the run's claim generation and every progress write checks
it (RunLease); an executor that finds its claim gone (it stalled and another took the run
over) raises ClaimLostError, logs it and writes nothing more, runs no further step. Recovery
takes at once a run whose owner died on this host, and any other (an owner alive here but stalled,
SIGSTOPped or unable to write, or one of another host or replica: `replica_name`) only when its
heartbeat has not changed for `stale_after` seconds (the `lease` setting) of this process's monotonic
clock (no wall clock is compared across processes), and then only if the heartbeat is still the one it
watched (RunQueue.requeue_claims): no run stays `running` without a live heartbeat. The owner renews
its leases from a thread of its own (`_heartbeat`, every `heartbeat_interval(lease)`), so a step longer
than the lease keeps its run.

When the store fails under a run (any StoreUnavailable: locked, unreachable, disk full, read-only, ...),
its executor stops executing it and hands it back once the store takes writes again (`_release_abandoned`):
a step whose action ran to its end is recorded with that end (a POST that was sent stays sent, and the
run goes on from the next step); a step whose outcome is unknown is `interrupted` and says why.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from remediate.actions.base import Action, ActionRegistry, StepContext, step_views
from remediate.alerts import alert_ref
from remediate.breaker import CircuitBreaker
from remediate.deadline import StepTimeout, call_with_deadline
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
from remediate.runners import Dispatch, StepRunner
from remediate.runs import (
    DONE_STEP_STATUSES,
    AttemptOutcome,
    ClaimedRun,
    FinishedRun,
    RunEnd,
    RunningClaim,
    RunStatus,
    RunWrite,
    StepEnd,
    StepRecord,
    StepStart,
    StepStatus,
)
from remediate.store import EXECUTOR_STOPPED, Store, worker_identity

log = logging.getLogger("remediate.executor")

RECONCILE_WINDOW_S = 24 * 3600.0
"""How long after a step gave up its pending outcome is still looked for (jobs keep acknowledgements 7 days)."""
RECONCILE_PLAN_TIMEOUT_S = 15.0
STORE_FAILED = "the store failed under its executor (its outcome is unknown)"
"""Why a step in flight is `interrupted` when its run is handed back after a store outage."""
STORE_RETRY_MAX_S = 10.0
"""The longest wait between the executor's tries while the store is unavailable (a database restart, a fail-over)."""


class ExecutorMetrics:
    """What the executor reports; the server plugs prometheus counters in, tests may pass nothing."""

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:  # pragma: no cover - interface
        pass

    def run_finished(self, status: str, playbook: str) -> None:  # pragma: no cover - interface
        pass


REUSED_PID_SLACK = 5.0
"""Seconds a process may seem to have started after its own claim (coarse clocks) before its pid counts as reused."""


def _pid_is_dead(claimed_by: str) -> bool:
    return _owner_state(claimed_by) == "dead"


def _owner_state(claimed_by: str, claimed_at: float | None = None) -> str:
    """Owner: "alive" or "dead" (a zombie is dead) for an owner process on this host, "elsewhere" for any other.

    `claimed_at` (the claim's heartbeat, never earlier than the claim): a process that started after it
    holds a reused pid (a restarted container numbers its processes the same way) and the owner is dead.
    """
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return "elsewhere"
    if int(pid) != os.getpid():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return "dead"
        except PermissionError:
            pass
        if _is_zombie(int(pid)):
            return "dead"
    started = _process_started_at(int(pid))
    if claimed_at is not None and started is not None and started > claimed_at + REUSED_PID_SLACK:
        return "dead"
    return "alive"


def _process_started_at(pid: int) -> float | None:
    """When the process started (UNIX seconds, from /proc), or None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        # After "(comm)", index 0 is field 3 (state); field 22 is the start time in clock ticks since boot.
        return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _is_zombie(pid: int) -> bool:
    """A killed worker stays a zombie until its parent (or, once orphaned, PID 1) reaps it; it is dead all the same.

    Without this, a server restarted right after a crash (SIGKILL of the gunicorn process group) sees the old
    workers' pids still "alive" and leaves their runs `running` until the heartbeat goes stale.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": comm may contain spaces and parentheses, the state follows the last ")".
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def heartbeat_interval(lease: float) -> float:
    """Seconds between heartbeats for `lease`: a quarter of it (four renewals per lease, so one slow
    database write never loses it), at least 0.5 s apart and at most 5 s."""
    return max(0.5, min(5.0, lease / 4))


@dataclass(frozen=True)
class StepFailure:
    """A failed step, as the run sees it."""

    run_error: str
    ended_run: bool
    rerunnable: bool = False


class Executor:
    def __init__(
        self,
        *,
        store: Store,
        registry: ActionRegistry,
        threads: int = 2,
        poll_interval: float = 0.2,
        stale_after: float = 60.0,
        metrics: ExecutorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        retry_wait_max: float = 10.0,
        dispatch: Dispatch | None = None,
        breaker: CircuitBreaker | None = None,
        reconcile_interval: float = 15.0,
        replica_name: str | None = None,
        on_run_finished: Sequence[Callable[[FinishedRun], None]] = (),
    ) -> None:
        self.store = store
        self.registry = registry
        self.threads = threads
        self.poll_interval = poll_interval
        self.stale_after = stale_after
        """The lease (setting `lease`): a run whose heartbeat has not changed this long is taken over."""
        self.metrics = metrics or ExecutorMetrics()
        self.clock = clock
        self.retry_wait_max = retry_wait_max
        self.dispatch = dispatch or Dispatch.local()
        """Where each step runs: here, or on its node's agent (remediate.runners)."""
        self.replica_name = replica_name
        """Who this executor is in claims and the history (`<replica_name or host>:<pid>`)."""
        self.worker = worker_identity(replica_name)
        self._pid = os.getpid()
        self.memory = store.memory()
        self.breaker = breaker or CircuitBreaker(store.breaker_ledger, store.breaker_view)
        """The circuit breaker of cluster actions, kept in the store (default limits unless given)."""
        self._wake = threading.Condition()
        self._pending_wakeups = 0
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._active: set[int] = set()
        self._active_lock = threading.Lock()
        self._claiming = threading.Lock()
        """Held by the thread reading the queue's head (see _run_claimed)."""
        self.reconcile_interval = reconcile_interval
        """Seconds between looks for late outcomes of steps that gave up waiting (reconcile_pending)."""
        self._observed: dict[int, tuple[tuple[str, int, float | None], float]] = {}
        """run id -> (its owner, claim and heartbeat as last seen, time.monotonic() when first seen so)."""
        self._abandoned: dict[int, RunningClaim] = {}
        """Runs this executor stopped executing because the store failed under them (see run_once)."""
        self._unrecorded: dict[int, StepEnd] = {}
        """run id -> the end of its step whose action ran but whose end the store failed to record: written
        when the run is handed back (`_release_abandoned`)."""
        self.on_beat: Callable[[], None] | None = None
        """Called by the heartbeat thread every heartbeat interval, whatever the store does: the executor
        process shows its master that it is alive (remediate.beat.ExecutorBeat)."""
        self._outage = _StoreOutage()
        self.on_run_finished = tuple(on_run_finished)
        """Told of every run end once the store has recorded it (e.g. remediate.grafana's annotator); each
        must return at once: it is called on the executor thread, between two runs."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._pid != os.getpid():  # built in one process, started in a fork: claim as the fork
            self.worker, self._pid = worker_identity(self.replica_name), os.getpid()
        # The heartbeat has a thread of its own: recovery and reconciliation (which asks agents, up to
        # RECONCILE_PLAN_TIMEOUT_S a step) must never delay the renewal of the leases this executor holds. It
        # starts first: its beat (on_beat) tells the master the process is alive while recovery waits on the store.
        heartbeat = threading.Thread(target=self._heartbeat, name="remediate-heartbeat", daemon=True)
        heartbeat.start()
        self._threads.append(heartbeat)
        self.recover()
        for index in range(self.threads):
            thread = threading.Thread(target=self._loop, name=f"remediate-executor-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        thread = threading.Thread(target=self._housekeeping, name="remediate-recovery", daemon=True)
        thread.start()
        self._threads.append(thread)
        log.info("executor %s started with %d threads", self.worker, self.threads)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def wake(self) -> None:
        with self._wake:
            self._pending_wakeups += 1
            self._wake.notify()

    def recover(self) -> list[int]:
        recovered = self.store.requeue_claims(self._stale_claims(self.store.running_claims()), now=self.clock())
        if recovered:
            log.warning("recovered %d runs left running by a stopped executor: %s", len(recovered), recovered)
        return recovered

    def _stale_claims(self, claims: list[RunningClaim]) -> list[RunningClaim]:
        """The claims whose owner is gone: dead on this host, or silent for `stale_after` (see the module doc)."""
        now = time.monotonic()
        observed: dict[int, tuple[tuple[str, int, float | None], float]] = {}
        stale = []
        with self._active_lock:
            active = set(self._active)
        for claim in claims:
            if claim.claimed_by == self.worker and claim.id in active:
                continue
            if _owner_state(claim.claimed_by, claim.heartbeat_at) == "dead":
                stale.append(claim)
                continue
            # Alive here or elsewhere: an owner that renewed nothing for the lease (stalled, SIGSTOPped, its
            # writes failing) loses its run; its lease checks then stop it writing (ClaimLostError).
            seen = (claim.claimed_by, claim.generation, claim.heartbeat_at)
            previous = self._observed.get(claim.id)
            since = previous[1] if previous is not None and previous[0] == seen else now
            observed[claim.id] = (seen, since)
            if now - since >= self.stale_after:
                stale.append(claim)
        self._observed = observed
        return stale

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                worked = self.run_once()
            except StoreUnavailable as exc:
                # A database restart or fail-over: wait (longer each time) instead of a traceback per poll.
                backoff = min(STORE_RETRY_MAX_S, max(self.poll_interval, 2 * backoff))
                self._outage.failed(exc)
                self._stopping.wait(backoff)
                continue
            except Exception:
                log.exception("executor loop error; retrying")
                worked = False
            else:
                backoff = 0.0
                self._outage.over()
            if worked:
                continue
            with self._wake:
                if self._pending_wakeups == 0 and not self._stopping.is_set():
                    self._wake.wait(self.poll_interval)
                self._pending_wakeups = 0

    def _heartbeat(self) -> None:
        """Renew the lease of every run this executor is executing, whatever its steps are doing."""
        while True:
            if self.on_beat is not None:
                self.on_beat()
            if self._stopping.wait(heartbeat_interval(self.stale_after)):
                return
            try:
                with self._active_lock:
                    active = sorted(self._active)
                self.store.heartbeat(active, self.worker, self.clock())
            except StoreUnavailable as exc:
                self._outage.failed(exc)  # once per outage; the runs' leases lapse and are taken over if it lasts
            except Exception:
                log.exception("executor heartbeat failed; retrying")

    def _housekeeping(self) -> None:
        # Recovery looks as often as owners renew (one small read of the running runs): a run is taken over
        # between `lease` and lease + 2 heartbeat intervals (1.5 x lease) after its owner's last renewal.
        interval = heartbeat_interval(self.stale_after)
        last_reconcile = time.monotonic()
        while not self._stopping.wait(min(interval, self.reconcile_interval)):
            try:
                if self.recover():
                    self.wake()
                if time.monotonic() - last_reconcile >= self.reconcile_interval:
                    last_reconcile = time.monotonic()
                    self.reconcile_pending()
            except StoreUnavailable as exc:
                self._outage.failed(exc)
            except Exception:
                log.exception("executor housekeeping failed; retrying")

    # ------------------------------------------------------------------ running

    def run_once(self) -> bool:
        """Claim and execute the run at the head of the queue; False when nothing was queued.
        StoreUnavailable: try again later."""
        return self._run_claimed() > 0

    def _run_claimed(self) -> int:
        """run_once; returns how many runs it took in hand (0: none was queued)."""
        self._release_abandoned()
        # One thread of this process reads the head at a time and marks the run as in hand (`_active`) before
        # the next looks: two threads never plan the same run. The plan and the steps run outside the lock.
        with self._claiming:
            with self._active_lock:
                in_hand = set(self._active)
            run = self.store.next_run(self.worker, skip=in_hand)
            if run is None:
                return 0
            if run.started_at is None:  # its first claim: the run starts now, with its first step's plan
                run = replace(run, started_at=self.clock())
            with self._active_lock:
                self._active.add(run.id)
        self._execute_claimed(run)
        return 1

    def _execute_claimed(self, run: ClaimedRun) -> None:
        """Execute `run`, read from the head of the queue (`next_run`): its first write claims it."""
        try:
            self.execute_run(run, claimed=False)
        except _ClaimedElsewhere as exc:
            log.debug("%s", exc)
        except ClaimLostError as exc:
            log.warning("run %s: stopping: %s", run.id, exc)
        except StoreUnavailable:
            # Whether the failed write committed (the claim among them) is unknown: the run is handed back as
            # crash recovery would (its in-flight step `interrupted`, re-run only if idempotent) once the
            # store answers, only if still in this claim; never continued from a guess, never left running
            # in this live process's name.
            with self._active_lock:
                lease = run.lease
                self._abandoned[run.id] = RunningClaim(run.id, lease.worker, lease.generation, None)
            log.warning("run %s: the store failed under it; it is requeued once the store answers", run.id)
            raise
        finally:
            with self._active_lock:
                self._active.discard(run.id)
                if run.id not in self._abandoned:
                    self._unrecorded.pop(run.id, None)

    def _release_abandoned(self) -> None:
        """Requeue the runs abandoned when the store failed, each only if still in the claim it was left in."""
        with self._active_lock:
            claims = list(self._abandoned.values())
            ends = {c.id: self._unrecorded[c.id] for c in claims if c.id in self._unrecorded}
        if not claims:
            return
        requeued = self.store.requeue_claims(claims, now=self.clock(), own=True, ends=ends, why=STORE_FAILED)
        with self._active_lock:
            for claim in claims:
                self._abandoned.pop(claim.id, None)
                self._unrecorded.pop(claim.id, None)
        for run_id in requeued:
            if run_id in ends:
                log.warning("run %s: the end of its step %s, which the store failed to record, is recorded now: %s",
                            run_id, ends[run_id].step_id, ends[run_id].status)  # fmt: skip
        if requeued:
            log.warning("requeued %d run(s) interrupted by the store's outage: %s", len(requeued), requeued)

    def drain(self, timeout: float = 30.0) -> int:
        """Execute queued runs in this thread until none is left (tests, CLI)."""
        done = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._run_claimed():
            done += 1
        return done

    def execute_run(self, run: ClaimedRun, *, claimed: bool = True) -> None:
        """Execute the run's remaining steps. ClaimLostError: another executor owns the run now.

        `claimed=False`: `run` is the head of the queue as `next_run` read it (with its steps); the first
        write claims it (`_write`)."""
        dry_run = run.mode == "dry-run"
        log.info("run %s (%s, %s, %s) started", run.id, run.playbook, run.phase, run.target)
        steps = list(run.steps) if run.steps is not None else self.store.steps_of(run.id)
        # A step failed before a restart, and only `always` steps were left to run.
        failure = next((_run_error(s, s.error or s.status) for s in steps if _failed(s)), None)
        rerunnable = False
        # Whether a step of the run started an attempt, before this pass or in it (`steps` is read once, here).
        progress = _RunProgress(changed=any(s.attempts > 0 for s in steps), claimed=claimed)
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
        (`progress.claimed` False: RunQueue.claim_next). _ClaimedElsewhere: another executor claimed it first,
        nothing was written."""
        if progress.claimed:
            self.store.record(write, self.clock())
        elif self.store.claim_next(run, self.clock(), write):
            progress.claimed = True
        else:
            raise _ClaimedElsewhere(f"run {run.id}: claimed by another executor first; this one leaves it")

    def _run_finished(self, run: ClaimedRun, end: RunEnd | None) -> None:
        """Metrics, log and listeners of a run end the store has recorded."""
        if end is None:
            return
        self.metrics.run_finished(end.status, run.playbook)
        log.info("run %s finished: %s%s", end.run_id, end.status, f" ({end.error})" if end.error else "")
        if not self.on_run_finished:
            return
        finished = FinishedRun(
            run.id, run.playbook, run.target, str(run.alert_context.get("alertname", "")), run.phase, run.mode,
            end.status, end.error, run.started_at, self.clock(),
        )  # fmt: skip
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
        fail = self._step_failer(run, step, started, rest, progress, after_failure)
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
        ctx = self._step_context(run, step, deadline, steps=self.store.steps_of(run.id) if action.reports_run else ())
        runner = self.dispatch.runner_for(action, run.target)
        try:
            plan = runner.stamp(self._plan(runner, action, params, ctx, step))
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
            result = runner.stamp(outcome)
        except (ClaimLostError, StoreUnavailable):  # the store failed, not the step: see run_once
            raise
        except Exception as exc:
            return fail(_describe(exc), plan=plan, result=_failure_result(exc))
        end = StepEnd(step.id, StepStatus.SUCCEEDED, result, attempt=number)
        with self._kept_if_unrecorded(run, end):
            self._write(run, progress, RunWrite(run.lease, ends=(end,), run_end=run_end))
        self.metrics.step_finished(step.action, StepStatus.SUCCEEDED, time.monotonic() - started)
        self._run_finished(run, run_end)
        return None

    @contextmanager
    def _kept_if_unrecorded(self, run: ClaimedRun, end: StepEnd) -> Iterator[None]:
        """Around the write of a step's end after its action ran: if the store fails under it, the end is kept
        and written when the run is handed back (`_release_abandoned`), not lost with the run's claim."""
        try:
            yield
        except StoreUnavailable:
            with self._active_lock:
                self._unrecorded[run.id] = end
            raise

    def _plan(
        self, runner: StepRunner, action: Action, params: Mapping[str, Any], ctx: StepContext, step: StepRecord
    ) -> Any:
        """The step's plan; plans only read, so retryable errors are retried within the step's retries and
        deadline, whatever the action's idempotency."""
        tries = 0
        retrying = Retrying(
            stop=stop_after_attempt(step.retries + 1) | stop_after_delay(max(0.0, ctx.deadline - time.monotonic())),
            wait=wait_exponential(multiplier=0.5, min=min(0.2, self.retry_wait_max), max=self.retry_wait_max),
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
            # tenacity applies `min` after `max`: cap it too, or retry_wait_max < 0.2 s would not shorten waits.
            wait=wait_exponential(multiplier=0.5, min=min(0.2, self.retry_wait_max), max=self.retry_wait_max),
            retry=retry_if_exception(lambda exc: _may_retry(exc, action)),
            reraise=True,
        )
        lease = run.lease
        try:
            for attempt in retrying:
                with attempt:
                    failed = progress.failed_attempt
                    if failed is not None:  # a retry: the attempt before it is closed first, as it ended
                        self.store.finish_attempt(step.id, *failed, lease=lease)
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

    def _step_context(
        self, run: ClaimedRun, step: StepRecord, deadline: float, *, steps: Sequence[StepRecord] = ()
    ) -> StepContext:
        """What an action sees of the run for `step`; `deadline` on the time.monotonic() clock; `steps`: the
        run's steps as the store has them now (what a notification reports)."""
        return StepContext(
            run_id=run.id,
            step_index=step.idx,
            playbook=run.playbook,
            target=run.target,
            alert=alert_ref(run.alert_context),
            deadline=deadline,
            memory=self.memory,
            breaker=self.breaker,
            stopping=self._stopping,
            mode=run.mode,
            phase=run.phase,
            rung=run.rung,
            steps=step_views(steps),
        )

    def reconcile_pending(self) -> int:
        """Record late outcomes: for each failed step that handed a change over and gave up waiting
        (OutcomePending), ask its action's plan, through the same runner as the step (the node's agent
        for a node step), what became of it; a plan with an `outcome` settles the step. Returns how many."""
        settled = 0
        for pending in self.store.pending_outcomes(since=self.clock() - RECONCILE_WINDOW_S):
            step, run = pending.step, pending.run
            try:
                action = self.registry.get(step.action)
                params = action.validate(step.params)
                ctx = self._step_context(run, step, time.monotonic() + RECONCILE_PLAN_TIMEOUT_S)
                runner = self.dispatch.runner_for(action, run.target)
                plan = call_with_deadline(partial(runner.plan, action, params, ctx), RECONCILE_PLAN_TIMEOUT_S)
            except Exception as exc:
                log.info("run %s step %s: cannot look for its late outcome yet: %s", run.id, step.idx, exc)
                continue
            outcome = plan.get("outcome") if isinstance(plan, dict) else None
            if not isinstance(outcome, dict):
                continue
            late = _late_outcome(outcome, pending.follow_up, runner.ran_on, self.clock())
            note = (
                f"late outcome recorded at {late['reconciled_at']}: {late['status']}"
                + (f" {late['late_by_s']} s after the step gave up" if late.get("late_by_s") is not None else "")
                + f" (claimed {outcome.get('claimed_at') or '?'}, done {outcome.get('applied_at') or '?'})"
            )
            if self.store.settle_pending(step.id, late, note, self.clock()):
                settled += 1
                log.warning("run %s step %s (%s): %s", run.id, step.idx, step.action, note)
        return settled

    def _step_failer(
        self,
        run: ClaimedRun,
        step: StepRecord,
        started: float,
        rest: Sequence[StepRecord],
        progress: _RunProgress,
        after_failure: bool,
    ) -> Callable[..., StepFailure | None]:
        """A function recording the step's failure (see `_fail_step`) with this step's circumstances."""

        def fail(
            error: str,
            *,
            status: StepStatus = StepStatus.FAILED,
            plan: Any = None,
            transient: bool = False,
            result: Any = None,
        ) -> StepFailure | None:
            return self._fail_step(
                run, step, error, started, status=status, plan=plan, rest=rest, progress=progress,
                after_failure=after_failure, transient=transient, result=result,
            )  # fmt: skip

        return fail

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
        step of the run started an attempt before (`progress`: in an earlier pass or in this one), the run is
        marked rerunnable (the next delivery of the alert runs again instead of being a duplicate).

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
            with self._kept_if_unrecorded(run, attempt_end):
                self._write(run, progress, RunWrite(run.lease, ends=(attempt_end,), run_end=run_end))
            self.metrics.step_finished(step.action, status, time.monotonic() - started)
            self._run_finished(run, run_end)
            log.info("run %s: %s; continue_on_error: the run goes on", run.id, run_error)
            return None
        if after_failure:  # an `always` step: recorded, the run keeps its first failure
            with self._kept_if_unrecorded(run, attempt_end):
                self._write(run, progress, RunWrite(run.lease, ends=(attempt_end,)))
            self.metrics.step_finished(step.action, status, time.monotonic() - started)
            return StepFailure(run_error, ended_run=False)
        skipped = [s.id for s in rest if not s.always]
        reason = f"skipped: step {step.idx} {step.name} ({step.action}) failed"
        ends = not any(s.always for s in rest)
        run_end = RunEnd(run.id, RunStatus.FAILED, run_error) if ends else None
        rerunnable = transient and run.mode != "dry-run" and not progress.changed
        with self._kept_if_unrecorded(run, attempt_end):
            self._write(run, progress, RunWrite(run.lease, ends=(attempt_end,), skip=tuple(skipped), skip_reason=reason,
                                                run_end=run_end, rerunnable=rerunnable and ends))  # fmt: skip
        self.metrics.step_finished(step.action, status, time.monotonic() - started)
        self._run_finished(run, run_end)
        return StepFailure(run_error, ended_run=ends, rerunnable=rerunnable)


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


def _late_outcome(
    outcome: Mapping[str, Any], follow_up: Mapping[str, Any], ran_on: str | None, now: float
) -> dict[str, Any]:
    """The late outcome as recorded on the step: the plan's `outcome`, `status` as `<status>_late`
    (e.g. applied_late), how late (seconds after the step gave up) and when it was seen."""
    late: dict[str, Any] = {**outcome, "status": f"{outcome.get('status') or 'unknown'}_late"}
    at, gave_up = outcome.get("at"), follow_up.get("gave_up_at")
    if isinstance(at, int | float) and isinstance(gave_up, int | float):
        late["late_by_s"] = round(at - gave_up, 3)
    late["reconciled_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    if ran_on:
        late["ran_on"] = ran_on
    return late


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
    claimed: bool = True
    """The run's claim is recorded; False until its first write, which claims it (Executor._write)."""
    failed_attempt: tuple[int, AttemptOutcome, str | None, float] | None = None
    """The current step's last attempt, failed and not closed yet: (number, outcome, error, when it ended)."""


class _ClaimedElsewhere(ClaimLostError):
    """The run read at the head of the queue was claimed by another executor before this one's claim."""


class _StoreOutage:
    """Logs an outage of the store once when it starts and once when it ends, not at every retry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, exc: StoreUnavailable) -> None:
        with self._lock:
            first, self._since = self._since is None, self._since or time.monotonic()
        if first:
            log.warning(
                "the store is unavailable; the executor retries (every %gs at most): %s", STORE_RETRY_MAX_S, exc
            )

    def over(self) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("the store answers again after %.1fs", time.monotonic() - since)
