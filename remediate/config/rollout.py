"""Staged rollout: which wave a node is in, and the mode that wave runs in (pure; docs/playbooks.md#staged-rollout).

A rollout (the `rollout` setting, or a playbook's `rollout:` key, which wins) names where a node's wave is read,
the mode of each wave and the mode of every other node: `{label: remediate.io/wave, waves: {"1": enforce,
"2": approve}, default: dry-run}` (the wave is the value of a Kubernetes node label), or `{slurm: feature, waves:
{wave1: enforce}}` (the wave is the Slurm feature, or with `slurm: partition` the partition, of the node that
names one of `waves`). A run's effective mode is the most cautious of its playbook's (or rung's)
mode, its node's wave's mode and the server's mode: dry-run < approve < enforce. So a rollout only ever holds
a playbook back; promoting a node is changing its label (or `rollout_nodes`), never editing the playbook, and a
rollout's `promote` lets a wave enforce once the wave before it proved the playbook's version
(remediate.config.promotion).

Where a node's wave comes from (remediate.judging.waves reads it) is told by a `NodeWave`, which the decision's reason
quotes: "node gpu-07 in wave 1 (label remediate.io/wave=1): enforce", "node gpu-03 in wave wave1 (Slurm feature
wave1): enforce".

Why `slurm: feature` and not a key per attribute (`feature: wave1`) nor a `source:` beside `label`: a rollout
names one place a node's wave is read, and exactly one of `label` / `slurm` says which scheduler's view that is,
its value which of the node's attributes; the wave names stay in `waves`, as for a label, so that a node
promoted is a node given another feature (or partition), never an edited rollout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from remediate.config.promotion import PromoteRule, PromotionError, parse_promote


class Mode(StrEnum):
    ENFORCE = "enforce"
    DRY_RUN = "dry-run"
    APPROVE = "approve"


CAUTION = (Mode.DRY_RUN, Mode.APPROVE, Mode.ENFORCE)
"""Modes from the most cautious to the least: the effective mode is the first of these any source asks for."""

_LABEL = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_.:]{0,63}$")
"""A Slurm feature or partition name that can be a wave: no list (`,`), no feature expression (`&|[]*`)."""
_KEYS = {"label", "slurm", "waves", "default", "promote"}


class RolloutError(ValueError):
    """A rollout as written is wrong: the message names the field (`rollout.waves.1`, ...)."""


def most_cautious(*modes: Mode) -> Mode:
    return min(modes, key=CAUTION.index)


class SlurmAttribute(StrEnum):
    """Which of a Slurm node's attributes name its wave (`rollout.slurm`)."""

    FEATURE = "feature"
    """Its active features (slurm.conf `Feature=`; `scontrol update NodeName=.. ActiveFeatures=..`)."""
    PARTITION = "partition"


@dataclass(frozen=True)
class Rollout:
    label: str | None
    """The node label whose value is the node's wave; None when the waves come from Slurm (`slurm`)."""
    waves: tuple[tuple[str, Mode], ...]
    default: Mode = Mode.DRY_RUN
    """The mode of a node in no wave named here (no label, a value not listed)."""
    slurm: SlurmAttribute | None = None
    """The Slurm node attribute (feature, partition) that names the node's wave; None: the label does."""
    promote: PromoteRule | None = None
    """Waves promoted on the evidence of the wave before them (remediate.config.promotion); None: only a
    person promotes a node (a label, feature or partition changed)."""

    def mode_of(self, wave: str | None) -> Mode:
        return next((mode for name, mode in self.waves if name == wave), self.default)

    @property
    def wave_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.waves)


@dataclass(frozen=True)
class NodeWave:
    """A node's wave as it was read, and where from (quoted in the decision's reason)."""

    node: str | None
    wave: str | None
    source: str
    """`label remediate.io/wave=1`, `Slurm feature wave1`, `rollout_nodes`, `no label remediate.io/wave`, ..."""
    unknown: bool = False
    """The wave could not be read (the Kubernetes API failed, slurmctld did not answer): the node runs dry-run
    until it can."""
    also: tuple[str, ...] = ()
    """The node's other waves: a Slurm node with two features (partitions) that name waves is in each; its mode
    is the most cautious of theirs."""

    @property
    def waves(self) -> tuple[str, ...]:
        return () if self.wave is None else (self.wave, *self.also)


@dataclass(frozen=True)
class WaveMode:
    """A node's wave's mode, and why (the decision's reason quotes `note`)."""

    mode: Mode
    note: str


def wave_mode(rollout: Rollout, where: NodeWave) -> WaveMode:
    """The mode of the wave `where` places a node in, and the note a decision's reason takes. A wave that
    cannot be read counts as dry-run: a rollout never acts on a node it cannot place. The run's mode is
    then the most cautious of this and its playbook's (rung's) and the server's (`most_cautious`)."""
    waves = where.waves
    if where.unknown:
        mode, placed = Mode.DRY_RUN, "in an unknown wave"
    elif not waves:
        mode, placed = rollout.default, "in no wave"
    else:
        mode = most_cautious(*(rollout.mode_of(wave) for wave in waves))
        placed = f"in wave {waves[0]}" if len(waves) == 1 else f"in waves {', '.join(waves)}"
    node = f"node {where.node}" if where.node else "the alert's target"
    return WaveMode(mode, f"{node} {placed} ({where.source}): {mode}")


@dataclass(frozen=True)
class PromotionAsk:
    """A firing run on a node of a wave its rollout may promote: what judging reads the evidence of
    (remediate.config.promotion), and the wave's mode as configured."""

    rule: PromoteRule
    wave: str
    previous: str
    """The wave whose runs promote this one (the one written before it in `waves`)."""
    configured: Mode


def run_wave(where: NodeWave) -> str | None:
    """The wave a run records (runs.wave): its node's one wave; None in none, two, or an unknown one."""
    return where.wave if not where.unknown and len(where.waves) == 1 else None


def promotion_ask(rollout: Rollout, where: NodeWave) -> PromotionAsk | None:
    """What a run on the node `where` places asks of the evidence; None when its wave cannot be promoted:
    no `promote`, the first wave, a wave already enforcing, a node in no, two or an unknown wave."""
    wave = run_wave(where)
    if rollout.promote is None or wave is None:
        return None
    configured, previous = rollout.mode_of(wave), rollout.promote.previous(wave)
    if previous is None or configured is Mode.ENFORCE or wave not in rollout.wave_names:
        return None
    return PromotionAsk(rollout.promote, wave, previous, configured)


def parse_rollout(value: Any, field: str = "rollout") -> Rollout | None:
    """A rollout as a settings file or a playbook writes it; None for none (null or `{}`). RolloutError names
    the field that is wrong."""
    if value is None or value == {}:
        return None
    if not isinstance(value, Mapping):
        raise RolloutError(f"{field}: must be a mapping (label or slurm, waves, default)")
    unknown = sorted(set(map(str, value)) - _KEYS)
    if unknown:
        raise RolloutError(f"{field}.{unknown[0]}: unknown key (known: default, label, promote, slurm, waves)")
    if ("label" in value) == ("slurm" in value):
        raise RolloutError(
            f"{field}: needs exactly one of label (a Kubernetes node label) and slurm (feature or partition)"
        )
    label, slurm = None, None
    if "label" in value:
        label = value["label"]
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise RolloutError(f"{field}.label: must be a Kubernetes label name (e.g. remediate.io/wave)")
    else:
        try:
            slurm = SlurmAttribute(value["slurm"])
        except ValueError:
            raise RolloutError(f"{field}.slurm: must be feature or partition, got {value['slurm']!r}") from None
    waves = value.get("waves")
    if not isinstance(waves, Mapping) or not waves:
        example = '{"1": enforce}' if slurm is None else "{wave1: enforce}"
        raise RolloutError(f"{field}.waves: must be a mapping of wave ({_wave_kind(slurm)}) to mode ({example})")
    parsed = []
    for wave, mode in waves.items():
        name = str(wave)
        if isinstance(wave, bool) or not (_VALUE if slurm is None else _SLURM_NAME).fullmatch(name):
            raise RolloutError(f"{field}.waves.{name[:40]}: not a {_wave_kind(slurm)} ({_wave_rule(slurm)})")
        parsed.append((name, to_mode(mode, f"{field}.waves.{name}")))
    default = to_mode(value.get("default", Mode.DRY_RUN.value), f"{field}.default")
    try:
        promote = parse_promote(value.get("promote"), tuple(name for name, _ in parsed), f"{field}.promote")
    except PromotionError as exc:
        raise RolloutError(str(exc)) from None
    return Rollout(label, tuple(sorted(parsed)), default, slurm, promote)


def _wave_kind(slurm: SlurmAttribute | None) -> str:
    return "label value" if slurm is None else f"Slurm {slurm} name"


def _wave_rule(slurm: SlurmAttribute | None) -> str:
    if slurm is None:
        return "letters, digits, -_., at most 63"
    return "letters, digits, -_.:, at most 64; one name, no list or expression"


def parse_node_waves(value: Any, field: str = "rollout_nodes") -> tuple[tuple[str, str], ...]:
    """`{host-a: "1"}`: the wave of hosts without Kubernetes (a node named here is never looked up)."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise RolloutError(f'{field}: must be a mapping of node name to wave ({{host-a: "1"}})')
    nodes = []
    for node, wave in value.items():
        if not isinstance(node, str) or not node:
            raise RolloutError(f"{field}: a node name must be a non-empty string")
        if isinstance(wave, bool) or not isinstance(wave, str | int) or not _VALUE.fullmatch(str(wave)):
            raise RolloutError(f'{field}.{node[:60]}: the wave must be a label value (e.g. "1")')
        nodes.append((node, str(wave)))
    return tuple(sorted(nodes))


def to_mode(value: Any, field: str) -> Mode:
    try:
        return Mode(value)
    except ValueError:
        raise RolloutError(f"{field}: must be one of {', '.join(m.value for m in Mode)}, got {value!r}") from None


class WaveSource(Protocol):
    """Where nodes' waves are read (remediate.judging.waves.NodeWaves; a static one in tests)."""

    def of(self, rollout: Rollout, node: str | None) -> NodeWave: ...


@dataclass(frozen=True)
class StaticWaves:
    """Waves from a map alone (`rollout_nodes`): the dry-run CLI without a cluster, tests."""

    nodes: Mapping[str, str]

    def of(self, rollout: Rollout, node: str | None) -> NodeWave:
        if node is None:
            return NodeWave(None, None, "no node label on the alert")
        wave = self.nodes.get(node)
        return NodeWave(node, wave, "rollout_nodes" if wave is not None else "not in rollout_nodes")
