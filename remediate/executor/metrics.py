"""What the executor reports: the server plugs prometheus counters in (remediate.metrics), tests may pass nothing."""

from __future__ import annotations


class ExecutorMetrics:
    """What the executor reports; the server plugs prometheus counters in, tests may pass nothing."""

    def step_finished(self, action: str, outcome: str, seconds: float) -> None:  # pragma: no cover - interface
        pass

    def run_finished(self, status: str, playbook: str) -> None:  # pragma: no cover - interface
        pass
