"""One action step as the executor runs it, for the action tests of every family (k8s.*, slurm.*, ...): `run`
(validate, plan, execute, the plan and the result checked to be JSON, as the store keeps them) and the fixture
`breaker`, a circuit breaker that never trips, for tests about what an action does rather than the cap."""

from __future__ import annotations

import json
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.breaker import BreakerLimits, CircuitBreaker, memory_breaker


@pytest.fixture
def breaker() -> CircuitBreaker:
    return memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=100))


def run(action: Any, params: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    """validate -> plan -> execute, as the executor does; returns the result (the plan is checked to be JSON)."""
    checked = action.validate(params)
    json.dumps(action.plan(checked, ctx))
    result: dict[str, Any] = action.execute(checked, ctx)
    json.dumps(result)
    return result
