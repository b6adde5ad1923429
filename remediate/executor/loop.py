"""The executor: its threads (claiming loops, the heartbeat, housekeeping) and the claim of the queue's head.

Each loop thread reads the head of the queue and hands the run to its StepExecutor (remediate.executor.steps),
whose first write claims it; the heartbeat thread renews the leases of the runs in hand and housekeeping
recovers the runs of owners that are gone and settles late outcomes (remediate.executor.leases,
remediate.executor.reconcile). A store that fails under a run stops its execution: the run is handed back
once the store answers again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from remediate.actions.base import ActionRegistry
from remediate.breaker import CircuitBreaker
from remediate.config.settings import ExecutorSettings
from remediate.errors import ClaimLostError, StoreUnavailable
from remediate.executor.context import StepContexts
from remediate.executor.dispatch import Dispatch
from remediate.executor.leases import STORE_RETRY_MAX_S, Leases, StoreOutage, heartbeat_interval
from remediate.executor.metrics import ExecutorMetrics
from remediate.executor.reconcile import reconcile_pending
from remediate.executor.steps import ClaimedElsewhere, StepExecutor
from remediate.runs import ClaimedRun, FinishedRun
from remediate.store import Store, worker_identity

log = logging.getLogger("remediate.executor")


@dataclass(eq=False, kw_only=True)
class Executor:
    """One process's executor: `threads` loops claim the head of the queue and execute it (`steps`), beside a
    heartbeat thread (`leases`) and a housekeeping thread (recovery, late outcomes)."""

    store: Store
    registry: ActionRegistry
    settings: ExecutorSettings = field(default_factory=ExecutorSettings)
    """Its section of the settings: threads, poll_interval, the lease (a run whose heartbeat has not changed
    this long is taken over) and the replica name."""
    metrics: ExecutorMetrics | None = None
    clock: Callable[[], float] = time.time
    retry_wait_max: float = 10.0
    dispatch: Dispatch | None = None
    """Where each step runs: here (None), or on its node's agent (remediate.executor.dispatch)."""
    breaker: CircuitBreaker | None = None
    """The circuit breaker of cluster actions, kept in the store (default limits unless given)."""
    reconcile_interval: float = 15.0
    """Seconds between looks for late outcomes of steps that gave up waiting (reconcile_pending)."""
    on_run_finished: Sequence[Callable[[FinishedRun], None]] = ()
    """Told of every run end once the store has recorded it (e.g. remediate.executor.grafana's annotator); each must
    return at once: it is called on the executor thread, between two runs."""

    def __post_init__(self) -> None:
        self.metrics = self.metrics or ExecutorMetrics()
        self.dispatch = self.dispatch or Dispatch()
        self.worker = worker_identity(self.settings.replica_name)
        self._pid = os.getpid()
        self.breaker = self.breaker or CircuitBreaker(self.store.breaker.ledger, self.store.breaker.view)
        self._wake = threading.Condition()
        self._pending_wakeups = 0
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._claiming = threading.Lock()
        """Held by the thread reading the queue's head (see _run_claimed)."""
        self.leases = Leases(self.store, self.clock)
        """The runs in hand, recovery's observations, the runs to hand back after a store outage."""
        self.on_beat: Callable[[], None] | None = None
        """Called by the heartbeat thread every heartbeat interval, whatever the store does: the executor
        process shows its master that it is alive (remediate.executor.beat.ExecutorBeat)."""
        self._outage = StoreOutage()
        contexts = StepContexts(self.store.memory, self.breaker, self._stopping)
        self.steps = StepExecutor(
            store=self.store, registry=self.registry, dispatch=self.dispatch, leases=self.leases, contexts=contexts,
            metrics=self.metrics, clock=self.clock, retry_wait_max=self.retry_wait_max,
            on_run_finished=tuple(self.on_run_finished),
        )  # fmt: skip
        """Executes a claimed run's steps."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._pid != os.getpid():  # built in one process, started in a fork: claim as the fork
            self.worker, self._pid = worker_identity(self.settings.replica_name), os.getpid()
        # The heartbeat has a thread of its own: recovery and reconciliation (which asks agents, up to
        # RECONCILE_PLAN_TIMEOUT_S a step) must never delay the renewal of the leases this executor holds. It
        # starts first: its beat (on_beat) tells the master the process is alive while recovery waits on the store.
        self._spawn(self._heartbeat, "remediate-heartbeat")
        self.recover()
        for index in range(self.settings.threads):
            self._spawn(self._loop, f"remediate-executor-{index}")
        self._spawn(self._housekeeping, "remediate-recovery")
        log.info("executor %s started with %d threads", self.worker, self.settings.threads)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

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
        """Requeue the runs whose owner is gone: dead on this host, or silent for `stale_after` (leases)."""
        return self.leases.recover(self.worker, self.settings.lease)

    def reconcile_pending(self) -> int:
        """Record the late outcomes of steps that gave up waiting (remediate.executor.reconcile); how many."""
        return reconcile_pending(self.steps)

    # ------------------------------------------------------------------ threads

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                worked = self.run_once()
            except StoreUnavailable as exc:
                # A database restart or fail-over: wait (longer each time) instead of a traceback per poll.
                backoff = min(STORE_RETRY_MAX_S, max(self.settings.poll_interval, 2 * backoff))
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
                    self._wake.wait(self.settings.poll_interval)
                self._pending_wakeups = 0

    def _heartbeat(self) -> None:
        """Renew the lease of every run this executor is executing, whatever its steps are doing."""
        while True:
            if self.on_beat is not None:
                self.on_beat()
            if self._stopping.wait(heartbeat_interval(self.settings.lease)):
                return
            try:
                self.leases.renew(self.worker)
            except StoreUnavailable as exc:
                self._outage.failed(exc)  # once per outage; the runs' leases lapse and are taken over if it lasts
            except Exception:
                log.exception("executor heartbeat failed; retrying")

    def _housekeeping(self) -> None:
        # Recovery looks as often as owners renew (one small read of the running runs): a run is taken over
        # between `lease` and lease + 2 heartbeat intervals (1.5 x lease) after its owner's last renewal.
        interval = heartbeat_interval(self.settings.lease)
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

    # ------------------------------------------------------------------ claiming

    def run_once(self) -> bool:
        """Claim and execute the run at the head of the queue; False when nothing was queued.
        StoreUnavailable: try again later."""
        return self._run_claimed() > 0

    def drain(self, timeout: float = 30.0) -> int:
        """Execute queued runs in this thread until none is left (how tests run the queue; the server has threads)."""
        done = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._run_claimed():
            done += 1
        return done

    def _run_claimed(self) -> int:
        """run_once; returns how many runs it took in hand (0: none was queued)."""
        self.leases.hand_back()
        # One thread of this process reads the head at a time and marks the run as in hand before the next
        # looks: two threads never plan the same run. The plan and the steps run outside the lock.
        with self._claiming:
            run = self.store.queue.next_run(self.worker, skip=self.leases.in_hand())
            if run is None:
                return 0
            if run.started_at is None:  # its first claim: the run starts now, with its first step's plan
                run = replace(run, started_at=self.clock())
            self.leases.take(run.id)
        self._execute_claimed(run)
        return 1

    def _execute_claimed(self, run: ClaimedRun) -> None:
        """Execute `run`, read from the head of the queue (`next_run`): its first write claims it."""
        try:
            self.steps.execute_run(run)
        except ClaimedElsewhere as exc:
            log.debug("%s", exc)
        except ClaimLostError as exc:
            log.warning("run %s: stopping: %s", run.id, exc)
        except StoreUnavailable:
            self.leases.abandon(run)  # handed back once the store answers (Leases.hand_back)
            log.warning("run %s: the store failed under it; it is requeued once the store answers", run.id)
            raise
        finally:
            self.leases.release(run.id)
