"""A playbook as the server holds it: Playbook, its rungs, steps and target, and PlaybookSet, the loaded set that
matches alerts. Matching and target resolution are pure functions of an Alert (remediate.playbooks.loading makes
these from YAML)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from remediate.config.rollout import Mode, Rollout
from remediate.gpu.errors import GpuSelectionError
from remediate.gpu.selection import parse_gpu_ref
from remediate.intake.alertref import node_label
from remediate.intake.alerts import Alert
from remediate.intake.matchers import Matcher, matches_all
from remediate.playbooks.repeat import RepeatOffender

NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
MAX_TARGET_LENGTH = 200
NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
GPU_IDENTITY_LABELS = frozenset({"UUID", "uuid", "gpu_uuid", "pci_bus_id", "gpu"})
"""Labels that name a GPU (dcgm-exporter's `UUID`, `pci_bus_id`, `gpu`): in `guard_by` their values are
normalised as the gpu actions read them, so that spellings of one GPU share one cooldown and cap."""
DEFAULT_RESET_AFTER = timedelta(hours=24)


@dataclass(frozen=True)
class StepSpec:
    """One step as written: the action, its raw (template) params, and its execution policy."""

    action: str
    params: Mapping[str, Any]
    name: str
    timeout: float | None = None
    retries: int = 2
    """How often a retryable error is retried (0 = one attempt only)."""
    always: bool = False
    """Run this step even when an earlier step failed (e.g. a notification); the run stays failed."""
    continue_on_error: bool = False
    """A failure of this step is recorded, but the run goes on as if it had succeeded (best effort)."""
    run_on: tuple[str, ...] = ()
    """A node step's `run_on: {labels: [...]}`: it runs on the node the first of these labels the alert has
    names (normalised as the target's), else on the run's target; empty: on the run's target."""

    def node(self, alert: Alert, target: str) -> str | None:
        """Where a `run_on` step runs for this alert (resolved once, when its run is created); None: no
        `run_on`, the run's target."""
        if not self.run_on:
            return None
        found = node_label(alert.labels, self.run_on)
        return bounded_target(found[1]) if found else target


@dataclass(frozen=True)
class LeftOutStep:
    """A step as written that this server does not load: it acts on a scheduler the site does not run."""

    where: str
    """Its place in the file, as errors name fields: `escalate[0].steps[3]`."""
    name: str
    action: str
    why: str

    def describe(self) -> str:
        return f"{self.where} ({self.name}): {self.why}"


@dataclass(frozen=True)
class Rung:
    """One rung of an escalation ladder (`escalate:`): its steps, and how long they must hold."""

    name: str
    holds_for: timedelta
    """How long the alert must stay resolved (or not re-fire) for this rung to count as having worked."""
    steps: tuple[StepSpec, ...]
    on_resolved: tuple[StepSpec, ...] = ()
    mode: Mode | None = None
    """None: the playbook's mode."""
    cooldown: timedelta | None = None
    """None: the playbook's cooldown."""
    max_attempts: int | None = None
    """Runs of this rung per guard key in 24 h (the playbook's max_attempts caps all rungs together)."""


@dataclass(frozen=True)
class TargetSpec:
    """Where the target (cooldown/attempt key, and the node for node steps) comes from."""

    labels: tuple[str, ...] = NODE_LABELS
    constant: str | None = None

    def resolve(self, alert: Alert) -> str:
        if self.constant is not None:
            return self.constant
        found = node_label(alert.labels, self.labels)
        return bounded_target(found[1]) if found else f"alert/{alert.fingerprint}"


@dataclass(frozen=True)
class Playbook:
    name: str
    description: str
    alertnames: tuple[str, ...]
    matchers: tuple[Matcher, ...]
    mode: Mode
    target: TargetSpec
    cooldown: timedelta
    max_attempts: int | None
    steps: tuple[StepSpec, ...]
    on_resolved: tuple[StepSpec, ...]
    source: str
    guard_by: tuple[str, ...] = ()
    """Labels that narrow cooldown and max_attempts below the target (e.g. UUID: per GPU of a node)."""
    rungs: tuple[Rung, ...] = ()
    """The escalation ladder (`escalate:`), gentlest first; empty for a playbook with `steps`."""
    reset_after: timedelta = DEFAULT_RESET_AFTER
    """After a rung held, this much quiet puts the ladder back on rung 1."""
    rollout: Rollout | None = None
    """The playbook's staged rollout (remediate.config.rollout); None: the server's `rollout` setting, if any."""

    repeat_offender: RepeatOffender | None = None
    """A target whose runs of this ladder acted `count` times within `within` goes straight to a rung."""
    left_out: tuple[LeftOutStep, ...] = ()
    """Steps as written that this server does not load (remediate.config.schedulers): the scheduler steps of a
    scheduler the site does not run."""
    version: str = ""
    """The content hash of the playbook as loaded (`playbook_version`, remediate.playbooks.loading): recorded on
    each run; a staged rollout's promotion counts the runs of one version (remediate.config.promotion)."""
    start_at: tuple[tuple[str, str], ...] = ()
    """A ladder's `start_at:` (alertname, rung name) pairs: an alert of that name starts on that rung at the
    lowest (a later signal of one incident skips the rung an earlier signal gets)."""

    def start_rung(self, alertname: str) -> tuple[int, str] | None:
        """The lowest rung (1-based, and its name) an alert of this name runs, from `start_at`; None: rung 1."""
        name = dict(self.start_at).get(alertname)
        if name is None:
            return None
        return next(index for index, r in enumerate(self.rungs, start=1) if r.name == name), name

    @property
    def is_ladder(self) -> bool:
        return bool(self.rungs)

    def every_step(self) -> Iterator[StepSpec]:
        """Every step it may run: its steps and on_resolved, then each rung's."""
        yield from self.steps
        yield from self.on_resolved
        for rung in self.rungs:
            yield from rung.steps
            yield from rung.on_resolved

    @property
    def undoes(self) -> bool:
        """Does a resolved alert have anything to run: the playbook's on_resolved or a rung's."""
        return bool(self.on_resolved) or any(r.on_resolved for r in self.rungs)

    def rung_cooldown(self, rung: int) -> timedelta:
        """The cooldown of rung `rung` (1-based): its own, else the playbook's."""
        own = self.rungs[rung - 1].cooldown
        return self.cooldown if own is None else own

    def warnings(self) -> list[str]:
        """What loads but is likely a mistake (`remediate playbooks validate` prints them)."""
        warnings = []
        if len(self.rungs) == 1:
            warnings.append("escalate: a one-rung ladder never climbs (write `steps` unless more rungs are coming)")
        if self.left_out and not self.rungs and not self.steps:
            warnings.append("steps: every step acts on a scheduler this server does not run: the playbook does nothing")
        warnings.extend(
            f"escalate[{index}].steps: every step acts on a scheduler this server does not run: the rung does nothing"
            for index, rung in enumerate(self.rungs)
            if not rung.steps
        )
        return warnings

    def matches(self, alert: Alert) -> bool:
        return alert.name in self.alertnames and matches_all(self.matchers, alert.labels)

    def guard_key(self, alert: Alert, target: str) -> str:
        """What cooldown and max_attempts count per: the target, plus the `guard_by` label values."""
        if not self.guard_by:
            return target
        values = (canonical_label_value(label, alert.labels.get(label, "")) for label in self.guard_by)
        return bounded_target("/".join([target, *values]))

    def steps_for(self, status: str) -> tuple[StepSpec, ...]:
        """The steps of a phase; for a ladder's firing phase every rung's (what the breaker looks at)."""
        if status == "firing":
            return self.steps + tuple(step for rung in self.rungs for step in rung.steps)
        return self.on_resolved


class PlaybookSet:
    """The loaded playbooks, indexed by alertname for fast matching."""

    def __init__(self, playbooks: Iterable[Playbook]) -> None:
        self.playbooks: tuple[Playbook, ...] = tuple(playbooks)
        self._by_alertname: dict[str, list[Playbook]] = {}
        for playbook in self.playbooks:
            for alertname in playbook.alertnames:
                self._by_alertname.setdefault(alertname, []).append(playbook)

    def matching(self, alert: Alert) -> list[Playbook]:
        return [p for p in self._by_alertname.get(alert.name, ()) if p.matches(alert)]

    def get(self, name: str) -> Playbook | None:
        return next((p for p in self.playbooks if p.name == name), None)

    def __len__(self) -> int:
        return len(self.playbooks)


def bounded_target(value: str) -> str:
    """Targets are indexed keys: a label value longer than 200 characters is cut and made unique by a hash."""
    if len(value) <= MAX_TARGET_LENGTH:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    return f"{value[: MAX_TARGET_LENGTH - 17]}~{digest}"


def canonical_label_value(label: str, value: str) -> str:
    """A guard_by label's value as guards count it: GPU identity labels through the GPU reference
    parser (`GPU-5F6A…` and `gpu-5f6a…`, `0000:3b:00.0` and `00000000:3B:00.0` are one GPU: five
    spellings of one UUID once got five times max_attempts). Other labels, and values that are no
    GPU reference, are kept as sent."""
    if label not in GPU_IDENTITY_LABELS:
        return value
    try:
        return parse_gpu_ref(value).value
    except GpuSelectionError:
        return value
