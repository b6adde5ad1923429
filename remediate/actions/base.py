"""The action interface: what every step of a playbook calls, and the registry of actions.

An action is one class: a `schema` for its params, `plan` (the dry-run: reads
state, changes nothing) and `execute`; `where` says whether it must run on the
node that owns the resource or anywhere in the cluster, and `idempotent` whether
a step interrupted by a crash may safely run again. An action has no `undo`:
what reverses it is an action of its own (`k8s.uncordon`, `gpu.restore_power_limit`,
...) that a playbook's `on_resolved` steps call, planned, audited and retried
like any step.
Actions know nothing of the store or of HTTP: they get params and a context and
return a JSON-able dict, or raise ActionError / RetryableActionError.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from remediate.actions.schema import ParamSchema
from remediate.config.schedulers import JobPath, Scheduler, describe, job_path
from remediate.errors import ParamsError
from remediate.intake.alertref import AlertRef

if TYPE_CHECKING:
    from remediate.breaker import CircuitBreaker
    from remediate.config.burnin import BurninSettings
    from remediate.gpu import GpuBackend
    from remediate.kube import KubeClient
    from remediate.runs import StepRecord
    from remediate.slurm import SlurmNodeCache


class Where(StrEnum):
    NODE = "node"
    CLUSTER = "cluster"


class ActionMemory(Protocol):
    """What an action may remember between runs (e.g. the power limit it replaced), surviving restarts.

    The executor passes the store's implementation; actions never see the store itself.
    Keys are namespaced by the action family ("gpu.power_limit/GPU-...").
    """

    def recall(self, key: str) -> dict[str, Any] | None: ...

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None: ...

    def forget(self, key: str) -> None: ...


@dataclass(eq=False)
class InMemoryMemory:
    """ActionMemory in a dict: for plans without a store, and for tests."""

    values: dict[str, dict[str, Any]] = field(default_factory=dict)

    def recall(self, key: str) -> dict[str, Any] | None:
        value = self.values.get(key)
        return dict(value) if value is not None else None

    def remember(self, key: str, value: Mapping[str, Any], *, run_id: int) -> None:
        self.values[key] = dict(value)

    def forget(self, key: str) -> None:
        self.values.pop(key, None)


@dataclass(frozen=True)
class StepView:
    """One step of the run as an action sees it (`StepContext.steps`): read-only, for messages reporting progress."""

    index: int
    name: str
    action: str
    status: str
    """pending, running, succeeded, failed, planned, skipped, ... (remediate.runs.StepStatus) when the step began."""
    error: str | None = None
    outcome: str | None = None
    """The `outcome` its result names (a burn-in succeeded as `skipped`, a hand-off `not_needed`); None: none."""


def step_views(steps: Iterable[StepRecord]) -> tuple[StepView, ...]:
    """The run's steps as the store has them, as actions see them (StepContext.steps)."""
    return tuple(StepView(s.idx, s.name, s.action, str(s.status), s.error, s.outcome) for s in steps)


@dataclass(frozen=True)
class StepContext:
    """What an action may know about the step it runs for."""

    run_id: int
    step_index: int
    playbook: str
    target: str
    alert: AlertRef
    """The alert the run is for (labels, fingerprint, startsAt parsed, ...); `AlertRef()` where there is none."""
    deadline: float = float("inf")
    """time.monotonic() value after which the executor gives up on this step."""
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("remediate.actions"))
    memory: ActionMemory = field(default_factory=InMemoryMemory)
    breaker: CircuitBreaker | None = None
    """The cluster breaker (`acquire` claims a node before a change, `release` ends remediate's hold, `status`
    reads); None where there is no store (a gated action then refuses to change anything)."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set by Executor.stop (SIGTERM): an action that waits should stop waiting, undo what has not taken
    effect yet (e.g. withdraw an unclaimed command) and fail with that reason."""
    mode: str = "enforce"
    """The run's mode: enforce, dry-run or approve (an approve-mode run executes once a person approved it)."""
    phase: str = "firing"
    """firing (the playbook's steps) or resolved (its on_resolved steps)."""
    rung: int | None = None
    """The escalation ladder's rung (1 = the gentlest) the run is for; None for a playbook without `escalate`."""
    steps: tuple[StepView, ...] = ()
    """Every step of the run, this one included, as the store had them when this step began (the executor
    fills it; empty elsewhere). Lets a notification say what the earlier steps did."""
    approved_by: str | None = None
    """Who approved the run (an approve-mode run; the principal, e.g. `slack:alice`); None otherwise."""

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class Action(ABC):
    """Base class of every action. Subclasses set the ClassVars and implement plan/execute."""

    name: ClassVar[str]
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    schema: ClassVar[ParamSchema] = ParamSchema()
    description: ClassVar[str] = ""
    breaker_gated: ClassVar[bool] = False
    """True for cluster changes the circuit breaker caps (cordon, taint, drain): the guards refuse
    new firing runs of playbooks with such steps while the breaker is open."""
    undoes: ClassVar[bool] = False
    """True for a node step that only gives back what remediate changed (gpu.restore_power_limit,
    gpu.unlock_clocks): never refused on a node another system owns (remediate.kube.owner)."""
    runs_if_owner_unknown: ClassVar[bool] = False
    """True for a node step that keeps the node and its GPUs in service and can be undone (a power cap, a clock
    lock, a command to a training job): when the node's owner cannot be read (the Kubernetes API down, or no
    permission to get nodes) it runs, its plan and result saying why the check was skipped. False (gpu.reset,
    disk.cleanup, any action that does not say): it fails as it would on an owned node, until the API answers."""
    reports_run: ClassVar[bool] = False
    """True for an action that tells people about its run (a chat message): its StepContext gets the run's
    steps as they stand (`steps`), one more store read that other steps are spared."""
    settings_section: ClassVar[str | None] = None
    """The section of the settings (remediate.config.settings.Settings) the action's family is built from, e.g. "kube":
    `from_deps` gets that section as `deps.settings`, never the whole settings. None: it needs none."""
    scheduler: ClassVar[Scheduler | None] = None
    """The scheduler the action acts on (k8s.*: kubernetes, slurm.*: slurm): its steps load only on a server whose
    `schedulers` setting names it (remediate.config.schedulers). None: it runs under any scheduler or none."""

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        """The instance `default_registry` registers. Override when the action needs settings or a backend."""
        return cls()

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Check rendered params against the schema; raise ParamsError. Override to add cross-field rules."""
        return self.schema.validate(params)

    @abstractmethod
    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """Say what execute would do, reading state where that is safe. Must change nothing."""

    @abstractmethod
    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """Do it. Return what was done; raise ActionError (give up) or RetryableActionError."""

    def replan(self, recorded_plan: Any, params: Mapping[str, Any]) -> str | None:
        """What the step would change with `params` instead, on the state its `recorded_plan` read (a plan this
        action made for the same step, other params), in one line; None when the action cannot tell without
        reading the state again. `remediate replay` shows it beside the params that differ. Pure: no I/O."""
        return None


class ActionRegistry:
    """Name -> action instance. Built once (see `remediate.actions.default_registry`) and passed down.

    `schedulers`: the schedulers of the site it was built for (the `schedulers` setting); a step of an action
    that acts on another is left out of the playbooks it loads (`left_out`). None: every scheduler's steps load
    (a registry built for no site, e.g. a test's)."""

    def __init__(self, actions: Iterable[Action] = (), *, schedulers: Iterable[Scheduler] | None = None) -> None:
        self._actions: dict[str, Action] = {}
        self.schedulers = None if schedulers is None else tuple(schedulers)
        for action in actions:
            self.register(action)

    def left_out(self, name: str, jobs: JobPath | None = None) -> str | None:
        """Why a step of action `name` (of the restart path `jobs`, a step's `jobs:` key) does not load on this
        site; None: it loads."""
        if self.schedulers is None:
            return None
        scheduler = self.get(name).scheduler
        shown = describe(self.schedulers)
        if scheduler is not None and scheduler not in self.schedulers:
            return f"{name} acts on {scheduler}; this server's schedulers setting is {shown}"
        here = job_path(self.schedulers)
        if jobs is not None and jobs != here:
            return f"the restart path of jobs under {jobs}; with schedulers {shown} jobs restart under {here}"
        return None

    def register(self, action: Action) -> None:
        if action.name in self._actions:
            raise ValueError(f"action {action.name} registered twice")
        self._actions[action.name] = action

    def get(self, name: str) -> Action:
        try:
            return self._actions[name]
        except KeyError:
            raise ParamsError(f"unknown action {name!r} (known: {', '.join(sorted(self._actions))})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def names(self) -> list[str]:
        return sorted(self._actions)


@dataclass(frozen=True)
class ActionDeps:
    """What `Action.from_deps` may build an action from: its family's settings section and the shared, lazily
    opened backends.

    The backends are providers, called on first use: a server on a node without GPUs or without a
    cluster starts fine, and a step that needs one fails with the backend's own clear error.
    """

    settings: Any
    """The section named by the action's `settings_section` (e.g. remediate.config.settings.KubeSettings);
    None without."""
    gpu_backend: Callable[[], GpuBackend]
    kube_client: Callable[[], KubeClient]
    slurm_cache: Callable[[], SlurmNodeCache] | None = None
    """The process's one Slurm node cache and, as its `client`, the process's one Slurm client (built from the
    `slurm` settings); None outside a registry."""
    peer: Callable[[str], Action] | None = None
    """Another action of the same registry by name, looked up when called (so a reload's changes, e.g. the
    `notify` action's sinks, apply): for an action that calls another as it is (k8s.handoff posts through
    `notify`). None outside a registry."""
    burnin: BurninSettings | None = None
    """The site's burn-in settings (`burnin_*`), which slurm.burnin and k8s.burnin take beside their scheduler's
    section for the params a step does not write; None: none configured (a burn-in without baselines skips)."""
