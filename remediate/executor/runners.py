"""Where a step runs: in this process (LocalRunner) or on the node agent of its target
(remediate.executor.agent_calls.AgentRunner); remediate.executor.dispatch picks the runner of each step.

The executor asks `Dispatch.runner_for(action, target)` for every step and calls
the runner's `plan` / `execute` instead of the action's own. Cluster steps always
run here. A `where: node` step runs here too on a single host (no agent known: no
`agents` map and no Kubernetes discovery) when its target is this host (`node_name` and
`node_aliases`; unset: the machine's host name or its short form) — a target that is not
fails the step, saying what to set — or when its target is this server's own `node_name`;
otherwise it goes to `remediate agent` on the target node. A node that has no agent fails
the step; it never runs on the wrong node.

Each runner has `ran_on`, recorded in node steps' plans and results ("node-b (agent
http://10.0.0.7:9096)", "node-a (server)") so `/runs/<id>` shows where a step ran.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from remediate.actions.base import Action, StepContext
from remediate.errors import ActionError
from remediate.kube.owner import NodeOwnedElsewhere, NodeOwner, OwnerCheck, check_owner

if TYPE_CHECKING:
    from remediate.config.settings import Settings

log = logging.getLogger("remediate.runners")


class StepRunner(Protocol):
    """Runs one step's plan or execute somewhere; `ran_on` says where (None: a cluster step, here)."""

    @property
    def ran_on(self) -> str | None: ...

    def plan(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any: ...

    def execute(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any: ...


def stamped(runner: StepRunner, value: Any) -> Any:
    """`value` (a plan or result) with the runner's `ran_on` added, for node steps."""
    where = runner.ran_on
    if where is None or not isinstance(value, dict):
        return value
    return {**value, "ran_on": where}


class WrongHostError(ActionError):
    """A node step on a single host (no agents) for a target that is not this host: it would act on the
    wrong machine's GPUs, disks or jobs."""


@dataclass(frozen=True)
class RefusingRunner:
    """A node step that must not run here, and has nowhere else to go: plan and execute fail with why."""

    reason: str

    def plan(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        raise WrongHostError(self.reason)

    def execute(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        raise WrongHostError(self.reason)


@dataclass(frozen=True)
class LocalRunner:
    """Calls the action in this process."""

    ran_on: str | None = None

    def plan(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        return action.plan(params, ctx)

    def execute(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        return action.execute(params, ctx)


# --------------------------------------------------------------------------- finding agents


@dataclass(frozen=True)
class OwnerCheckedRunner:
    """A node step on a node another system owns (k8s.handoff) is refused, naming the owner: its plan says
    can_act false, its execute fails; on a node nobody else owns, `inner` runs it. An owner that cannot be
    read: remediate.kube.owner.check_owner (its plan and result say so, `owner_check`, where it runs)."""

    inner: StepRunner
    node: str
    owners: Callable[[str], NodeOwner | None]

    @property
    def ran_on(self) -> str | None:
        return self.inner.ran_on

    def _check(self, action: Action, ctx: StepContext) -> OwnerCheck:
        check = check_owner(self.owners, self.node, action.name, runs_if_unknown=action.runs_if_owner_unknown)
        if check.unchecked:
            log.warning("run %s step %s: %s", ctx.run_id, ctx.step_index, check.unchecked)
        return check

    def plan(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        check = self._check(action, ctx)
        if check.refused:
            return {"can_act": False, "why_not": check.refused}
        return check.noted(self.inner.plan(action, params, ctx))

    def execute(self, action: Action, params: Mapping[str, Any], ctx: StepContext) -> Any:
        check = self._check(action, ctx)
        if check.refused:
            raise NodeOwnedElsewhere(check.refused)
        return check.noted(self.inner.execute(action, params, ctx))


def this_host_names(settings: Settings) -> frozenset[str]:
    """The targets a single host (no agents) runs node steps for: `node_name` and `node_aliases` when set;
    otherwise this machine's host name and its short form (no DNS lookup: a slow resolver must not delay
    the start). Any other target is refused: running a step for gpu-node-7 here would change this machine."""
    if settings.agent.node_name:
        return frozenset({settings.agent.node_name, *settings.agent.node_aliases})
    host = socket.gethostname()
    return frozenset({host, host.split(".", 1)[0], *settings.agent.node_aliases} - {""})


def wrong_host_message(target: str, node_name: str | None, names: frozenset[str]) -> str:
    known = ", ".join(sorted(names))
    if node_name:
        return (
            f"node {target!r} is not this host (node_name {node_name!r}; names: {known}) and no agents are "
            f"configured: the step would act on this machine instead. Add {target!r} to node_aliases if alerts "
            "call this host so, or configure agents (agents / agent_selector) to reach that node"
        )
    return (
        f"node {target!r} is not this host ({known}) and no agents are configured: the step would act on "
        f"this machine instead. Set node_name (REMEDIATE_NODE_NAME) to the name alerts give this host "
        "(and node_aliases for others), or configure agents (agents / agent_selector) to reach that node"
    )
