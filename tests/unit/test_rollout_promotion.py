"""Waves promoted on evidence (remediate.config.promotion, the store's reading of it, the engine's judging): the
rule, its notes, the playbook version it counts per, and the engine on both databases."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from remediate.actions.base import ActionRegistry
from remediate.breaker import BreakerLimits, CircuitBreaker
from remediate.config.promotion import PromoteRule, WaveEvidence, judge
from remediate.config.rollout import Mode, NodeWave, StaticWaves, parse_rollout, promotion_ask, run_wave
from remediate.errors import PlaybookError
from remediate.executor.loop import Executor
from remediate.playbooks.loading import parse_playbook, playbook_version
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows
from tests.unit.test_engine import T0, MakeEngine, playbook, xid

DAY = 86_400.0
PROMOTING = {
    "label": "remediate.io/wave",
    "waves": {"canary": "enforce", "10": "approve", "2": "dry-run"},
    "promote": {"after": 2, "within": "7d"},
}
NODES = StaticWaves({"c-1": "canary", "c-2": "canary", "c-3": "canary", "ten-1": "10", "two-1": "2"})


def test_a_wave_is_promoted_on_the_wave_written_before_it_not_on_the_names_order() -> None:
    rollout = parse_rollout(PROMOTING)
    assert rollout is not None
    assert rollout.promote == PromoteRule(2, 7 * DAY, ("canary", "10", "2"))
    assert [rollout.promote.previous(w) for w in ("canary", "10", "2", "3")] == [None, "canary", "10", None]


@pytest.mark.parametrize(
    ("promote", "error"),
    [
        ({"after": 0, "within": "7d"}, r"rollout\.promote\.after: must be a whole number of runs from 1 to 1000"),
        ({"after": True, "within": "7d"}, r"rollout\.promote\.after: must be a whole number"),
        ({"after": 5}, r"rollout\.promote\.within: required, a duration"),
        ({"after": 5, "within": "soon"}, r"rollout\.promote\.within: "),
        ({"after": 5, "within": "7d", "when": 1}, r"rollout\.promote\.when: unknown key"),
        ([5], r"rollout\.promote: must be a mapping"),
    ],
)
def test_a_wrong_promote_names_its_field_when_the_playbook_loads(
    registry: ActionRegistry, promote: Any, error: str
) -> None:
    with pytest.raises(PlaybookError, match=error):
        parse_playbook(playbook(rollout={**PROMOTING, "promote": promote}), registry)
    one_wave = {"label": "remediate.io/wave", "waves": {"1": "enforce"}, "promote": {"after": 1, "within": "1d"}}
    with pytest.raises(PlaybookError, match=r"rollout\.promote: needs at least two waves"):
        parse_playbook(playbook(rollout=one_wave), registry)


def test_the_rule_promotes_at_k_verified_runs_and_a_failure_demotes_naming_the_evidence() -> None:
    rule = PromoteRule(5, 7 * DAY, ("1", "2"))
    version = "3f2a1b2c" + "0" * 56

    promoted = judge(rule, "2", "1", version, "approve", WaveEvidence(5, T0))
    held = judge(rule, "2", "1", version, "approve", WaveEvidence(3, T0))
    demoted = judge(rule, "2", "1", version, "approve", WaveEvidence(1, T0 + 60, 17, T0 + 30, "failed"))

    assert promoted.promoted and promoted.note == (
        "wave 2 enforcing: 5 of 5 wave-1 runs of version 3f2a1b2c… verified since 2026-01-01T00:00:00Z"
    )
    assert not held.promoted and held.note == (
        "wave 2 approve (not promoted: 3 of 5 wave-1 runs of version 3f2a1b2c… verified within 7d)"
    )
    assert not demoted.promoted and demoted.demoted
    assert demoted.note == (
        "wave 2 approve (demoted: run 17 of wave 1 failed at 2026-01-01T00:00:30Z; 1 of 5 wave-1 runs of "
        "version 3f2a1b2c… verified since)"
    )


def test_the_playbook_version_is_its_parsed_content_not_its_text(registry: ActionRegistry) -> None:
    text = yaml.safe_dump(playbook(), sort_keys=False)
    reordered = "# a comment changes nothing\n" + yaml.safe_dump(playbook(), sort_keys=True)
    edited = yaml.safe_dump(playbook(cooldown="5m"))
    versions = [parse_playbook(yaml.safe_load(x), registry).version for x in (text, reordered, edited)]
    assert versions[0] == versions[1] == playbook_version(playbook()) != versions[2]
    assert len(versions[0]) == 64


def test_only_a_node_in_one_later_wave_not_enforcing_asks_for_evidence() -> None:
    rollout = parse_rollout(PROMOTING)
    assert rollout is not None

    def ask(where: NodeWave) -> tuple[str, str] | None:
        found = promotion_ask(rollout, where)
        return None if found is None else (found.wave, found.previous)

    assert ask(NodeWave("n", "10", "label")) == ("10", "canary")
    assert ask(NodeWave("n", "2", "label")) == ("2", "10")
    assert ask(NodeWave("n", "canary", "label")) is None  # the first wave: nothing before it
    assert ask(NodeWave("n", None, "no label")) is None
    assert ask(NodeWave("n", "10", "label", unknown=True)) is None
    assert ask(NodeWave("n", "10", "features", also=("2",))) is None  # in two waves: the more cautious holds
    assert run_wave(NodeWave("n", "10", "features", also=("2",))) is None
    assert ask(NodeWave("n", "7", "label")) is None  # a wave not named: the default mode


def _verified_canary_runs(store: Store, registry: ActionRegistry, engine: Any, *nodes: str) -> list[int]:
    """Each node's firing run executed, then its undo: verified evidence."""
    ids = []
    for node in nodes:
        (decision,) = ingest_alerts(engine, xid(node), at=T0).decisions
        assert decision.run_id is not None
        ids.append(decision.run_id)
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()
    ingest_alerts(engine, *(xid(node, status="resolved") for node in nodes), at=T0 + 60)
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()
    return ids


@EVERY_DATABASE
def test_runs_record_the_version_and_wave_and_a_new_version_starts_as_written(
    store: Store, registry: ActionRegistry, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(rollout=PROMOTING), waves=NODES)
    _verified_canary_runs(store, registry, engine, "c-1", "c-2")

    (promoted,) = ingest_alerts(engine, xid("ten-1"), at=T0 + 120).decisions
    edited = make_engine(playbook(rollout=PROMOTING, cooldown="1s"), waves=NODES)
    (fresh,) = ingest_alerts(edited, xid("two-1"), xid("ten-1", gpu="4"), at=T0 + 180).decisions[1:]

    assert "wave 10 enforcing: 2 of 2 wave-canary runs of version" in promoted.reason
    assert "wave 10 dry-run" not in promoted.reason
    assert "wave 10 approve (not promoted: 0 of 2 wave-canary runs of version" in fresh.reason
    firing = [(r.target, r.wave, r.mode, r.playbook_version[:8]) for r in rows(store, t.runs.name, phase="firing")]
    old, new = engine.playbooks.playbooks[0].version[:8], edited.playbooks.playbooks[0].version[:8]
    assert firing == [
        ("c-1", "canary", "enforce", old),
        ("c-2", "canary", "enforce", old),
        ("ten-1", "10", "enforce", old),
        ("two-1", "2", "dry-run", new),
        ("ten-1", "10", "approve", new),
    ]


@EVERY_DATABASE
def test_a_person_s_relabel_wins_and_an_undo_by_hand_demotes(
    store: Store, registry: ActionRegistry, make_engine: MakeEngine
) -> None:
    engine = make_engine(playbook(rollout=PROMOTING), waves=NODES)
    first, _ = _verified_canary_runs(store, registry, engine, "c-1", "c-2")
    # A person uncordoned c-1 by hand: the breaker, at its next claim past the window, finds its marks gone.
    breaker = CircuitBreaker(store.breaker.ledger, limits=BreakerLimits(window=60.0), clock=lambda: T0 + 200)
    with store.write() as conn:
        conn.execute(t.breaker_claims.insert().values(node="c-1", kind="cordon", run_id=first, claimed_at=T0))
    breaker.acquire("c-3", kind="cordon", run_id=999, cluster_nodes=100, held_in_cluster=())

    relabelled = make_engine(playbook(rollout=PROMOTING), waves=StaticWaves({"ten-1": "canary", "ten-2": "10"}))
    moved, held = ingest_alerts(relabelled, xid("ten-1"), xid("ten-2"), at=T0 + 300).decisions

    assert moved.reason.endswith("node ten-1 in wave canary (rollout_nodes): enforce")
    assert f"wave 10 approve (demoted: run {first} of wave canary was undone by hand at " in held.reason
    modes = [(r.target, r.mode) for r in rows(store, t.runs.name, phase="firing")][-2:]
    assert modes == [("ten-1", "enforce"), ("ten-2", Mode.APPROVE.value)]


def test_slurm_feature_waves_promote_in_their_written_order_too() -> None:
    rollout = parse_rollout(
        {"slurm": "feature", "waves": {"wave1": "enforce", "wave2": "approve"}, "promote": {"after": 3, "within": "2d"}}
    )
    assert rollout is not None
    found = promotion_ask(rollout, NodeWave("gpu-03", "wave2", "Slurm feature wave2"))
    assert found is not None and (found.previous, found.configured, found.rule.after) == ("wave1", Mode.APPROVE, 3)
