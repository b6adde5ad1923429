"""`patch_until_stable`: the one read → decide → patch → retry-on-409 → event loop of the node actions.

Every write is conditional on the resourceVersion just read: a 409 means someone else wrote in
between, so the loop reads again and decides again from what is there now. That is what keeps
taints of others (a strategic-merge patch replaces the whole `spec.taints` list) and makes a
retried step find its own change instead of making it twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remediate.actions.base import StepContext
from remediate.actions.k8s.common import KubeAction, NodeEvent
from remediate.errors import RetryableActionError
from remediate.kube import KubeConflict, NodeInfo, NodeRef

Finish = Callable[[NodeInfo, dict[str, Any] | None], dict[str, Any]]
"""The step's result from the node as it now is and the recorded event (None when there is none)."""


@dataclass(frozen=True)
class Decision:
    """What one round decided from the node it read.

    `patch` None: nothing to write, finish with the node as read (announcing `event` if given,
    e.g. an earlier attempt made the change and its answer was lost). Otherwise `patch` is written
    with the read's resourceVersion as precondition, and `event` announced on the updated node.
    """

    finish: Finish
    patch: dict[str, Any] | None = None
    event: NodeEvent | None = None


def patch_until_stable(
    action: KubeAction, ref: NodeRef, ctx: StepContext, decide: Callable[[NodeInfo], Decision]
) -> dict[str, Any]:
    """Read the node, decide, write conditionally; on 409 start again from a fresh read.

    Gives up retryable after `conflict_attempts` conflicts in a row: a retry of the step starts
    again from a fresh read.
    """
    for _ in range(action.options.conflict_attempts):
        node = action.read_node(ref, ctx)
        decision = decide(node)
        if decision.patch is not None:
            patch = _conditional(decision.patch, node.resource_version)
            try:
                node = action.api(ctx, lambda c, p=patch: c.patch_node(ref.name, p))
            except KubeConflict:
                continue
        event = action.event(ctx, node, decision.event) if decision.event is not None else None
        return decision.finish(node, event)
    raise RetryableActionError(
        f"node {ref.name} changed between every read and write ({action.options.conflict_attempts} conflicts "
        "in a row, 409): gave up for now; a retry of the step starts again from a fresh read"
    )


def _conditional(patch: dict[str, Any], resource_version: str) -> dict[str, Any]:
    """`patch` that the API server applies only if the node is still at `resource_version`."""
    return {**patch, "metadata": {"resourceVersion": resource_version, **patch.get("metadata", {})}}
