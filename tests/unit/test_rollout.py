"""Staged rollout (remediate.config.rollout, the engine's modes): a run's mode is the most cautious of its playbook's
(rung's), its node's wave's and the server's; the decision says which wave and why."""

from __future__ import annotations

from typing import Any

import pytest

from remediate.config.rollout import Mode, NodeWave, Rollout, StaticWaves, most_cautious, parse_rollout, wave_mode
from remediate.config.settings import load_settings
from remediate.errors import ConfigError, PlaybookError
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import ingest_alerts
from tests.support.stores import rows
from tests.unit.test_engine import T0, MakeEngine, playbook, xid

WAVES = {"label": "remediate.io/wave", "waves": {"1": "enforce", "2": "approve"}, "default": "dry-run"}
ROLLOUT = parse_rollout(WAVES)


def test_the_most_cautious_mode_wins_dry_run_then_approve_then_enforce() -> None:
    assert most_cautious(Mode.ENFORCE, Mode.APPROVE) is Mode.APPROVE
    assert most_cautious(Mode.APPROVE, Mode.DRY_RUN, Mode.ENFORCE) is Mode.DRY_RUN
    assert most_cautious(Mode.ENFORCE) is Mode.ENFORCE


def test_a_wave_gets_its_mode_other_nodes_the_default_and_an_unreadable_wave_dry_run() -> None:
    assert Rollout("remediate.io/wave", (("1", Mode.ENFORCE), ("2", Mode.APPROVE)), Mode.DRY_RUN) == ROLLOUT
    one = wave_mode(ROLLOUT, NodeWave("gpu-07", "1", "label remediate.io/wave=1"))
    assert (one.mode, one.note) == (Mode.ENFORCE, "node gpu-07 in wave 1 (label remediate.io/wave=1): enforce")
    assert wave_mode(ROLLOUT, NodeWave("gpu-08", "2", "rollout_nodes")).mode is Mode.APPROVE
    assert wave_mode(ROLLOUT, NodeWave("gpu-09", "3", "label remediate.io/wave=3")).mode is Mode.DRY_RUN
    none = wave_mode(ROLLOUT, NodeWave("gpu-10", None, "no label remediate.io/wave"))
    assert none.note == "node gpu-10 in no wave (no label remediate.io/wave): dry-run"
    unknown = wave_mode(
        parse_rollout({**WAVES, "default": "enforce"}), NodeWave("gpu-11", None, "label unreadable: 503", unknown=True)
    )
    assert (unknown.mode, unknown.note) == (
        Mode.DRY_RUN,
        "node gpu-11 in an unknown wave (label unreadable: 503): dry-run",
    )


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"label": "remediate.io/wave", "waves": {"1": "yes"}}, "rollout.waves.1: must be one of"),
        ({"label": "not a label!", "waves": {"1": "enforce"}}, "rollout.label: must be a Kubernetes label name"),
        ({"label": "remediate.io/wave"}, "rollout.waves: must be a mapping"),
        ({"label": "remediate.io/wave", "waves": {"1": "enforce"}, "stage": 1}, "rollout.stage: unknown key"),
        ({"label": "remediate.io/wave", "waves": {"1": "enforce"}, "default": "maybe"}, "rollout.default: must be"),
        ("[1, 2]", "must be a mapping"),
    ],
)
def test_a_wrong_rollout_setting_names_its_field(tmp_path: Any, value: Any, field: str) -> None:
    with pytest.raises(ConfigError, match="setting 'rollout': .*" + field.split(":")[0].replace(".", r"\.")):
        load_settings(env={}, overrides={"rollout": value})
    with pytest.raises(ConfigError, match=r"rollout_nodes\.host-a: the wave must be a label value"):
        load_settings(env={}, overrides={"rollout_nodes": {"host-a": "not a wave!"}})


def test_the_settings_read_a_rollout_from_the_environment_as_yaml() -> None:
    settings = load_settings(
        env={
            "REMEDIATE_ROLLOUT": '{label: remediate.io/wave, waves: {"1": enforce}}',
            "REMEDIATE_ROLLOUT_NODES": "{a: 1}",
        }
    )
    assert settings.engine.rollout == Rollout("remediate.io/wave", (("1", Mode.ENFORCE),), Mode.DRY_RUN)
    assert settings.engine.rollout_nodes == (("a", "1"),)


def test_a_playbook_rollout_is_checked_when_loaded(make_engine: MakeEngine) -> None:
    with pytest.raises(PlaybookError, match=r"field rollout.*rollout\.waves\.1: must be one of"):
        make_engine(playbook(rollout={"label": "remediate.io/wave", "waves": {"1": "always"}}))


def _runs(store: Store) -> list[tuple[str, str, str]]:
    return [(r.target, r.mode, r.status) for r in rows(store, t.runs.name)]


def test_each_node_runs_in_its_waves_mode_and_the_decision_says_why(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(), rollout=ROLLOUT, rollout_nodes=(("node-a", "1"), ("node-b", "2")), waves=None)

    result = ingest_alerts(engine, xid("node-a"), xid("node-b"), xid("node-c"), at=T0)

    assert _runs(store) == [
        ("node-a", "enforce", "queued"),
        ("node-b", "approve", "awaiting_approval"),
        ("node-c", "dry-run", "queued"),
    ]
    assert [d.reason for d in result.decisions] == [
        "matched playbook xid (firing); node node-a in wave 1 (rollout_nodes): enforce",
        "matched playbook xid (firing); node node-b in wave 2 (rollout_nodes): approve",
        "matched playbook xid (firing); node node-c in no wave (not in rollout_nodes): dry-run",
    ]
    (decision, *_) = rows(store, t.decisions.name)
    assert decision.reason.endswith("node node-a in wave 1 (rollout_nodes): enforce")


def test_a_wave_never_makes_a_playbook_bolder_nor_the_server_s_dry_run(store: Store, make_engine: MakeEngine) -> None:
    waves = StaticWaves({"node-a": "1"})
    ingest_alerts(make_engine(playbook("asks", mode="approve"), rollout=ROLLOUT, waves=waves), xid("node-a"), at=T0)
    ingest_alerts(make_engine(playbook("shadow"), rollout=ROLLOUT, mode="dry-run", waves=waves), xid("node-a"), at=T0)
    assert _runs(store) == [("node-a", "approve", "awaiting_approval"), ("node-a", "dry-run", "queued")]


def test_a_playbook_rollout_wins_over_the_servers(store: Store, make_engine: MakeEngine) -> None:
    own = {"label": "team.io/canary", "waves": {"yes": "enforce"}, "default": "approve"}
    engine = make_engine(playbook(rollout=own), rollout=ROLLOUT, waves=StaticWaves({"node-a": "1"}))

    (decision,) = ingest_alerts(engine, xid("node-a"), at=T0).decisions

    # StaticWaves knows one wave per node; under the playbook's own rollout "1" is no wave of its: approve.
    assert _runs(store) == [("node-a", "approve", "awaiting_approval")]
    assert decision.reason.endswith("node node-a in wave 1 (rollout_nodes): approve")


def test_a_ladder_rung_takes_the_more_cautious_of_its_mode_and_the_waves(store: Store, make_engine: MakeEngine) -> None:
    ladder = playbook(
        steps=None,
        on_resolved=None,
        escalate=[
            {
                "name": "ask",
                "mode": "approve",
                "holds_for": "1h",
                "steps": [{"action": "log", "with": {"message": "x"}}],
            },
            {"name": "act", "holds_for": "1h", "steps": [{"action": "log", "with": {"message": "y"}}]},
        ],
    )
    engine = make_engine(ladder, rollout=ROLLOUT, waves=StaticWaves({"node-a": "1", "node-c": "3"}))

    ingest_alerts(engine, xid("node-a"), xid("node-c"), at=T0)

    assert _runs(store) == [("node-a", "approve", "awaiting_approval"), ("node-c", "dry-run", "queued")]


def test_an_undo_is_not_held_back_by_the_wave(store: Store, make_engine: MakeEngine) -> None:
    engine = make_engine(playbook(), rollout=ROLLOUT, waves=StaticWaves({"node-a": "1"}))
    ingest_alerts(engine, xid("node-a"), at=T0)
    demoted = make_engine(playbook(), rollout=ROLLOUT, waves=StaticWaves({}))

    (decision,) = ingest_alerts(demoted, xid("node-a", status="resolved"), at=T0 + 60).decisions

    assert [r.mode for r in rows(store, t.runs.name)] == ["enforce", "enforce"]
    assert decision.reason == "matched playbook xid (resolved)"
