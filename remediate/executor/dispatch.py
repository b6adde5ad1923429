"""Which runner each step gets (Dispatch.runner_for): here, here as this node, refused, or the node's agent.

Agents are found in the static `agents` map or, with `agent_selector`, through the Kubernetes API
(remediate.kube.agents: the agent DaemonSet's Running+Ready pod whose spec.nodeName is the target, and whose
controller ownerReference is that DaemonSet: `agent_daemonset`, else any DaemonSet; a pod with the right labels
but another owner is an impostor and is never chosen). A node step on a node another system owns is wrapped in an
OwnerCheckedRunner (remediate.executor.owners: Kubernetes's owner annotation, Slurm's hand-off reason), except an
undo.

One node, one name: an alert may name a node by its fully qualified host name (dcgm-exporter's `Hostname`), its
short name, or, under Slurm, its NodeName (a job's step metrics) or NodeHostName. The agent is looked up by each
of these (`names_for`: the target, its first label, and Slurm's two names of that node) and the step is signed
for, and sent to, the name the agent is known by; none known: the error names every name tried.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remediate.actions.base import Action, Where
from remediate.agentwire.protocol import AgentDirectory
from remediate.config.schedulers import Scheduler
from remediate.errors import ConfigError
from remediate.executor.agent_calls import AgentConnections, AgentRunner, ChainedAgents, StaticAgents
from remediate.executor.owners import SlurmOwners, combined
from remediate.executor.runners import (
    LocalRunner,
    OwnerCheckedRunner,
    RefusingRunner,
    StepRunner,
    this_host_names,
    wrong_host_message,
)
from remediate.kube.agents import KubernetesAgents, own_namespace
from remediate.kube.owner import NodeOwner, NodeOwners
from remediate.slurm.lookup import names_of, spellings

if TYPE_CHECKING:
    from remediate.config.settings import Settings
    from remediate.slurm import SlurmNodeCache


@dataclass(eq=False, kw_only=True)
class Dispatch:
    """Picks the runner of each step (see the module docstring)."""

    directory: AgentDirectory | None = None
    node_name: str | None = None
    host_names: frozenset[str] | None = None
    """Without agents, the names a node step's target may have to run here; None: any (for tests and embedded
    use that build the executor by hand)."""
    token: str | None = None
    # Handed unchanged to every AgentRunner this dispatch builds.
    retries: int = 3
    connect_timeout: float = 3.0
    default_timeout: float = 300.0
    retry_wait_max: float = 2.0
    on_agent_error: Callable[[str], None] | None = None
    on_agent_call: Callable[[str, str, float], None] | None = None
    owners: Callable[[str], NodeOwner | None] | None = None
    """Who owns a node other than remediate (remediate.kube.owner): node steps on such a node are refused,
    except an undo (`Action.undoes`). None (no Kubernetes configured): not checked."""
    other_names: Callable[[str], tuple[str, ...]] | None = None
    """The other names of a node (Slurm's NodeName and NodeHostName of the node a name stands for); None: none."""
    connections: AgentConnections = field(default_factory=AgentConnections)
    """The connections kept to agents, shared by every AgentRunner this hands out (bounded: see agent_calls)."""

    def __post_init__(self) -> None:
        self.cluster = LocalRunner()
        self.local_node = LocalRunner(f"{self.node_name or socket.gethostname()} (server)")

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        on_agent_error: Callable[[str], None] | None = None,
        on_agent_call: Callable[[str, str, float], None] | None = None,
        slurm: SlurmNodeCache | None = None,
    ) -> Dispatch:
        """`on_agent_error`: told the reason of each agent call that failed (see AgentRunner.on_call_error);
        `on_agent_call`: told each call's action, outcome and seconds (AgentRunner.on_call_done); `slurm`: the
        process's Slurm node cache, used where Slurm is one of the `schedulers` and `slurm_conf` is set (its
        hand-offs, its node names)."""
        if Scheduler.SLURM not in settings.engine.schedulers or settings.slurm.conf is None:
            slurm = None
        directories: list[AgentDirectory] = []
        if settings.agent.agents:
            directories.append(StaticAgents(dict(settings.agent.agents)))
        if settings.agent.selector:
            directories.append(
                KubernetesAgents(
                    settings.agent.selector,
                    settings.agent.namespace or own_namespace(),
                    settings.agent.port,
                    kubeconfig=settings.kube.kubeconfig,
                    context=settings.kube.context,
                    daemonset=settings.agent.daemonset,
                )
            )
        token, kube = settings.agent.resolved_token(), settings.kube
        if directories and not token and not settings.auth.insecure_no_auth:
            raise ConfigError(
                "agents are configured (agents / agent_selector) but no agent token: set REMEDIATE_AGENT_TOKEN "
                "or agent_token_file (the same token the agents serve with)"
            )
        directory: AgentDirectory | None = None
        if directories:
            directory = directories[0] if len(directories) == 1 else ChainedAgents(*directories)
        return cls(
            directory=directory,
            node_name=settings.agent.node_name,
            host_names=None if directory else this_host_names(settings),
            token=token,
            retries=settings.agent.retries,
            connect_timeout=settings.agent.connect_timeout,
            default_timeout=settings.engine.step_timeout,
            on_agent_error=on_agent_error,
            on_agent_call=on_agent_call,
            owners=combined(
                NodeOwners.configured(kube.kubeconfig, kube.context, kube.request_timeout),
                SlurmOwners(slurm) if slurm is not None else None,
            ),
            other_names=(lambda name: names_of(slurm, name)) if slurm is not None else None,
        )

    @property
    def uses_agents(self) -> bool:
        return self.directory is not None

    def runner_for(self, action: Action, target: str) -> StepRunner:
        runner = self._runner_for(action, target)
        if self.owners is None or action.where != Where.NODE or action.undoes:
            return runner
        return OwnerCheckedRunner(runner, target, self.owners)

    def runner_of_owned(self, action: Action, target: str) -> StepRunner:
        """The runner of `action` on `target` without the owner check: `remediate node release` runs the
        re-admission gate (gpu.health, which only reads) on a node another system owns, to give it back. The
        node's own runner (its agent, or here) as `runner_for` picks it; never for a step that changes the node."""
        return self._runner_for(action, target)

    def names_for(self, target: str) -> tuple[str, ...]:
        """Every name the node `target` stands for may go by (module docstring), `target` first."""
        names = list(spellings(target))
        if self.other_names is not None:
            for name in tuple(names):
                names.extend(self.other_names(name))
        return tuple(dict.fromkeys(names))

    def _runner_for(self, action: Action, target: str) -> StepRunner:
        if action.where != Where.NODE:
            return self.cluster
        names = self.names_for(target)
        if self.directory is None:
            if self.host_names is not None and not self.host_names.intersection(names):
                return RefusingRunner(wrong_host_message(target, self.node_name, self.host_names))
            return self.local_node
        if self.node_name is not None and self.node_name in names:
            return self.local_node
        return AgentRunner(
            self.directory.known_name(names) or target, self.directory, self.token, retries=self.retries,
            connect_timeout=self.connect_timeout, default_timeout=self.default_timeout,
            retry_wait_max=self.retry_wait_max, on_call_error=self.on_agent_error, on_call_done=self.on_agent_call,
            connections=self.connections, names_tried=names,
        )  # fmt: skip
