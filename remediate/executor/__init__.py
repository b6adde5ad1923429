"""The executor: background threads that claim committed runs and execute their steps in order.

Its story is one module per part (the loop and its threads; leases and recovery; a run's steps; what an
action sees; late outcomes; metrics): docs/architecture.md's tree names each, and a test keeps it true.
"""

from __future__ import annotations

from remediate.executor.leases import heartbeat_interval
from remediate.executor.loop import Executor
from remediate.executor.metrics import ExecutorMetrics

__all__ = ["Executor", "ExecutorMetrics", "heartbeat_interval"]
