"""The executor: background threads that claim committed runs and execute their steps in order.

Its story, one module per part:

- loop.py: the Executor and its threads (claiming loops, heartbeat, housekeeping), the claim of the head;
- leases.py: the runs in hand, their heartbeat, recovery (takeover of runs whose owner is gone) and the
  hand-back of runs the store failed under;
- steps.py: one run's steps (StepExecutor): plan, attempts, retries with tenacity, deadline, the ends;
- context.py: what an action sees of its run (StepContexts: memory, breaker, the executor's stop);
- reconcile.py: late outcomes of steps that gave up waiting;
- metrics.py: what the executor reports (ExecutorMetrics).
"""

from __future__ import annotations

from remediate.executor.leases import STORE_FAILED, STORE_RETRY_MAX_S, heartbeat_interval
from remediate.executor.loop import Executor
from remediate.executor.metrics import ExecutorMetrics
from remediate.executor.reconcile import RECONCILE_PLAN_TIMEOUT_S, RECONCILE_WINDOW_S
from remediate.executor.steps import StepExecutor, StepFailure

__all__ = [
    "RECONCILE_PLAN_TIMEOUT_S",
    "RECONCILE_WINDOW_S",
    "STORE_FAILED",
    "STORE_RETRY_MAX_S",
    "Executor",
    "ExecutorMetrics",
    "StepExecutor",
    "StepFailure",
    "heartbeat_interval",
]
