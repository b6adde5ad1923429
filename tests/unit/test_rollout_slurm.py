"""Staged rollout with waves from Slurm (`rollout: {slurm: feature | partition, ...}`): the parsing, and which wave
a node is in (remediate.config.rollout, remediate.judging.waves.NodeWaves on a node cache's view; the real
cluster's reads are in tests/integration/test_rollout_slurm.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from remediate.config.rollout import Mode, NodeWave, Rollout, RolloutError, SlurmAttribute, parse_rollout, wave_mode
from remediate.config.settings import load_settings
from remediate.errors import ConfigError
from remediate.judging.waves import NodeWaves
from remediate.slurm import SlurmClient, SlurmConfigError, SlurmNode, SlurmNodeCache, SlurmUnavailable

FEATURES = {"slurm": "feature", "waves": {"wave1": "enforce", "wave2": "approve"}, "default": "dry-run"}
ROLLOUT = parse_rollout(FEATURES)


def test_a_slurm_rollout_parses_its_attribute_and_wave_names() -> None:
    expected = Rollout(None, (("wave1", Mode.ENFORCE), ("wave2", Mode.APPROVE)), Mode.DRY_RUN, SlurmAttribute.FEATURE)
    assert expected == ROLLOUT
    by_partition = parse_rollout({"slurm": "partition", "waves": {"canary": "enforce"}})
    assert by_partition is not None and (by_partition.slurm, by_partition.label) == (SlurmAttribute.PARTITION, None)
    assert by_partition.default is Mode.DRY_RUN


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"waves": {"1": "enforce"}}, "rollout: needs exactly one of label"),
        ({"label": "remediate.io/wave", "slurm": "feature", "waves": {"1": "enforce"}}, "rollout: needs exactly one"),
        ({"slurm": "gres", "waves": {"a": "enforce"}}, "rollout.slurm: must be feature or partition, got 'gres'"),
        ({"slurm": "feature"}, r"rollout.waves: must be a mapping of wave \(Slurm feature name\) to mode"),
        ({"slurm": "feature", "waves": {"a,b": "enforce"}}, "rollout.waves.a,b: not a Slurm feature name"),
        ({"slurm": "partition", "waves": {"a|b": "enforce"}}, r"rollout.waves.a\|b: not a Slurm partition name"),
        ({"slurm": "feature", "waves": {"wave1": "sometimes"}}, "rollout.waves.wave1: must be one of"),
        ({"slurm": "feature", "waves": {"wave1": "enforce"}, "feature": "x"}, "rollout.feature: unknown key"),
    ],
)
def test_a_wrong_slurm_rollout_names_its_field(value: Any, message: str) -> None:
    with pytest.raises(RolloutError, match=message):
        parse_rollout(value)


def test_the_settings_read_a_slurm_rollout_from_the_environment() -> None:
    settings = load_settings(env={"REMEDIATE_ROLLOUT": "{slurm: partition, waves: {canary: enforce}}"})
    assert settings.engine.rollout == Rollout(None, (("canary", Mode.ENFORCE),), Mode.DRY_RUN, SlurmAttribute.PARTITION)
    with pytest.raises(ConfigError, match=r"setting 'rollout': rollout\.slurm: must be feature or partition"):
        load_settings(env={}, overrides={"rollout": {"slurm": "features", "waves": {"a": "enforce"}}})


def test_a_node_in_two_waves_runs_the_more_cautious_and_the_note_names_both() -> None:
    assert ROLLOUT is not None
    one = wave_mode(ROLLOUT, NodeWave("gpu-01", "wave1", "Slurm feature wave1"))
    assert (one.mode, one.note) == (Mode.ENFORCE, "node gpu-01 in wave wave1 (Slurm feature wave1): enforce")
    both = wave_mode(ROLLOUT, NodeWave("gpu-03", "wave1", "Slurm features wave1, wave2", also=("wave2",)))
    assert (both.mode, both.note) == (
        Mode.APPROVE,
        "node gpu-03 in waves wave1, wave2 (Slurm features wave1, wave2): approve",
    )


class ViewOfNodes:
    """What NodeWaves reads of a SlurmNodeCache (`nodes`), from given nodes or a given failure."""

    def __init__(self, nodes: list[SlurmNode] | Exception) -> None:
        self.answer = nodes
        self.reads = 0
        self.client = SlurmClient(conf=Path("/etc/slurm/slurm.conf"))  # configured; never runs a command here

    def nodes(self, *, wait: float = 10.0) -> Mapping[str, SlurmNode]:
        self.reads += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return {node.name: node for node in self.answer}


def _node(name: str, *features: str, partitions: tuple[str, ...] = ("train",), host: str = "") -> SlurmNode:
    return SlurmNode(name, host or name, "idle", frozenset(), partitions=partitions, features=("gpu", *features))


NODES = [
    _node("gpu-01", "wave1"),
    _node("gpu-02", "wave2", "wave1", partitions=("train", "canary")),
    _node("gpu-03"),
    _node("gpu-04", "wave2", host="rack4-gpu"),
]


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _waves(view: ViewOfNodes, clock: Clock | None = None, **static: str) -> NodeWaves:
    cache: Any = view
    return NodeWaves(None, static, slurm=lambda: cache, clock=clock or Clock())


def test_a_nodes_wave_is_its_feature_that_names_a_wave_and_its_other_features_do_not_count() -> None:
    assert ROLLOUT is not None
    view = ViewOfNodes(NODES)
    waves = _waves(view, **{"gpu-03": "wave1"})

    assert waves.of(ROLLOUT, "gpu-01") == NodeWave("gpu-01", "wave1", "Slurm feature wave1")
    assert waves.of(ROLLOUT, "gpu-02") == NodeWave("gpu-02", "wave1", "Slurm features wave1, wave2", also=("wave2",))
    assert waves.of(ROLLOUT, "gpu-03") == NodeWave("gpu-03", "wave1", "rollout_nodes")  # never looked up
    assert waves.of(ROLLOUT, "rack4-gpu") == NodeWave("rack4-gpu", "wave2", "Slurm feature wave2")  # NodeHostName
    assert waves.of(ROLLOUT, "gpu-01.example.org") == NodeWave("gpu-01.example.org", "wave1", "Slurm feature wave1")
    assert waves.of(ROLLOUT, "gpu-09") == NodeWave("gpu-09", None, "not a node of the Slurm cluster")
    assert view.reads == 1  # one pass over the nodes per TTL, whatever the number of alerts
    partition = parse_rollout({"slurm": "partition", "waves": {"canary": "enforce"}, "default": "approve"})
    assert partition is not None
    assert waves.of(partition, "gpu-02") == NodeWave("gpu-02", "canary", "Slurm partition canary")
    assert waves.of(partition, "gpu-01") == NodeWave("gpu-01", None, "no Slurm partition names a wave")
    assert wave_mode(partition, waves.of(partition, "gpu-01")).mode is Mode.APPROVE


def test_slurm_unreadable_is_an_unknown_wave_and_no_slurm_configured_the_default() -> None:
    assert ROLLOUT is not None
    down = _waves(ViewOfNodes(SlurmUnavailable("sinfo --json: slurmctld did not answer"))).of(ROLLOUT, "gpu-01")
    assert down == NodeWave(
        "gpu-01", None, "Slurm feature unreadable: sinfo --json: slurmctld did not answer", unknown=True
    )
    assert wave_mode(parse_rollout({**FEATURES, "default": "enforce"}), down).mode is Mode.DRY_RUN  # type: ignore[arg-type]

    missing = _waves(ViewOfNodes(SlurmConfigError("slurm_conf /x is not a file"))).of(ROLLOUT, "gpu-01")
    assert missing == NodeWave("gpu-01", None, "not in rollout_nodes; slurm_conf /x is not a file")
    unset = SlurmNodeCache(SlurmClient(conf=None))
    none = NodeWaves(None, slurm=lambda: unset).of(ROLLOUT, "gpu-01")
    assert wave_mode(ROLLOUT, none).note == (
        "node gpu-01 in no wave (not in rollout_nodes; no Slurm cluster configured (slurm_conf)): dry-run"
    )
    assert not unset.status().started  # no poll that could only fail, logging it every interval
    assert NodeWaves(None).of(ROLLOUT, "gpu-01") == none


def test_a_feature_change_moves_the_node_after_the_ttl_and_is_audited(caplog: pytest.LogCaptureFixture) -> None:
    assert ROLLOUT is not None
    clock = Clock()
    view = ViewOfNodes(NODES)
    waves = _waves(view, clock)
    assert waves.of(ROLLOUT, "gpu-03").wave is None
    caplog.set_level(logging.INFO, logger="remediate.audit")

    view.answer = [_node("gpu-01", "wave1"), _node("gpu-02", "wave1"), _node("gpu-03", "wave2"), NODES[3]]
    clock.now += 29
    still = waves.of(ROLLOUT, "gpu-03").wave
    clock.now += 1
    moved = waves.of(ROLLOUT, "gpu-03").wave

    assert (still, moved) == (None, "wave2")
    events = [(r.node, r.slurm, r.wave, r.was) for r in caplog.records if r.name == "remediate.audit"]  # type: ignore[attr-defined]
    assert events == [("gpu-02", "feature", "wave1", "wave1,wave2"), ("gpu-03", "feature", "wave2", None)]
