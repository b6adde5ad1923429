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

from remediate.executor.leases import heartbeat_interval
from remediate.executor.loop import Executor
from remediate.executor.metrics import ExecutorMetrics

__all__ = ["Executor", "ExecutorMetrics", "heartbeat_interval"]
