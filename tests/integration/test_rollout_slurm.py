"""Staged rollout with waves from Slurm features, on the real test cluster (tests/support/slurm.py: gpu-01 and gpu-02
have feature wave1, gpu-03 wave1 and wave2, the others neither): a node's wave is read from the process's one
Slurm node cache, as the server reads it; slurmctld stopped makes the wave unknown and the run dry-run. The same
rollout through `remediate dry-run` and `remediate replay`, which build their own cache from slurm_conf."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from remediate.config.rollout import parse_rollout
from remediate.config.settings import Settings
from remediate.judging.engine import Engine
from remediate.judging.waves import NodeWaves
from remediate.services import build_services
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import alert_payload, ingest_alerts
from tests.support.cli import run_cli as cli
from tests.support.slurm import WAVE_FEATURES, SlurmCluster
from tests.support.stores import rows
from tests.support.waiting import scaled, wait_until
from tests.unit.test_engine import T0, MakeEngine, playbook, xid

FEATURES = {"slurm": "feature", "waves": {"wave1": "enforce", "wave2": "approve"}, "default": "dry-run"}
ROLLOUT = parse_rollout(FEATURES)


def _runs(store: Store) -> list[tuple[str, str, str]]:
    return [(r.target, r.mode, r.status) for r in rows(store, t.runs.name)]


def test_a_node_in_a_feature_wave_runs_its_mode_and_slurmctld_away_makes_it_dry_run(
    slurm: SlurmCluster, store: Store, make_engine: MakeEngine
) -> None:
    cache = slurm.node_cache()
    # TTL 0: every judgement reads the cache, so slurmctld's outage shows as soon as the cache's view is past its
    # bound (3 of its reads), not 30 s later; a short wait for a fresh view keeps the outage's judgements quick.
    waves = NodeWaves(None, slurm=lambda: cache, ttl=0.0, read_wait=0.2)
    engine = make_engine(playbook(), rollout=ROLLOUT, waves=waves)
    assert {name: tuple(sorted(set(n.features) - {"gpu"})) for name, n in cache.nodes().items() if n.features} == {
        "gpu-04": (),
        "gpu-05": (),
        "gpu-06": (),
        **WAVE_FEATURES,
    }

    result = ingest_alerts(engine, xid("gpu-01"), xid("gpu-03"), xid("gpu-04"), xid(slurm.host), at=T0)

    assert _runs(store) == [
        ("gpu-01", "enforce", "queued"),
        ("gpu-03", "approve", "awaiting_approval"),
        ("gpu-04", "dry-run", "queued"),
        (slurm.host, "dry-run", "queued"),
    ]
    assert [d.reason.partition("; ")[2] for d in result.decisions] == [
        "node gpu-01 in wave wave1 (Slurm feature wave1): enforce",
        "node gpu-03 in waves wave1, wave2 (Slurm features wave1, wave2): approve",
        "node gpu-04 in no wave (no Slurm feature names a wave): dry-run",
        f"node {slurm.host} in no wave (no Slurm feature names a wave): dry-run",
    ]

    slurm.stop_controller()
    where = wait_until(
        lambda: (found := waves.of(ROLLOUT, "gpu-01")).unknown and found,  # type: ignore[arg-type]
        scaled(60),
        interval=0.2,
        message="the wave of gpu-01 never became unknown with slurmctld stopped",
    )
    assert where.source.startswith("Slurm feature unreadable: the Slurm node cache is not current")
    (decision,) = ingest_alerts(engine, xid("gpu-02"), at=T0 + 60).decisions

    assert _runs(store)[-1] == ("gpu-02", "dry-run", "queued")
    assert decision.reason.partition("; ")[2].startswith("node gpu-02 in an unknown wave (Slurm feature unreadable: ")
    assert decision.reason.endswith("): dry-run")


def test_the_servers_waves_and_slurm_actions_read_the_processs_one_node_cache(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "xid.yaml").write_text(yaml.safe_dump(playbook()), encoding="utf-8")
    settings = Settings.of(
        playbooks=playbooks,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        slurm_conf=slurm.conf,
        slurm_poll_interval=3600.0,
        rollout=ROLLOUT,
        insecure_no_auth=True,
    )
    services = build_services(settings)
    assert services.slurm is not None
    try:
        (decision,) = ingest_alerts(services.engine, xid("gpu-01"), at=T0).decisions
        drain = services.engine.registry.get("slurm.drain")
        drain.cache.census()  # type: ignore[attr-defined]
        status = services.slurm.status()
    finally:
        services.slurm.stop()
        services.store.close()

    assert decision.reason.endswith("node gpu-01 in wave wave1 (Slurm feature wave1): enforce")
    assert drain.cache is services.slurm  # type: ignore[attr-defined]
    assert status.reads == 1  # the wave and the breaker's census: one sinfo --json


def test_dry_run_reads_a_slurm_rollout_from_slurm_conf_and_stops_its_cache(slurm: SlurmCluster, tmp_path: Path) -> None:
    playbooks = tmp_path / "pb"
    playbooks.mkdir()
    (playbooks / "xid.yaml").write_text(yaml.safe_dump(playbook()), encoding="utf-8")
    config = tmp_path / "remediate.yaml"
    settings = {
        "playbooks": str(playbooks),
        "database_url": f"sqlite:///{tmp_path / 'absent.db'}",
        "slurm_conf": str(slurm.conf),
        "rollout": FEATURES,
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")

    def dry_run(node: str) -> dict[str, Any]:
        argv = (
            "dry-run",
            "--config",
            config,
            "--alertname",
            "GpuXidError",
            "--label",
            f"Hostname={node}",
            "--label",
            "gpu=0",
            "--json",
        )
        result = cli(*argv)
        assert result.exit_code == 0, result.output
        (found,) = json.loads(result.stdout)["alerts"][0]["playbooks"]
        return found

    before = set(threading.enumerate())
    one, four = dry_run("gpu-02"), dry_run("gpu-04")

    assert (one["mode"], one["wave"]) == ("enforce", "node gpu-02 in wave wave1 (Slurm feature wave1): enforce")
    assert (four["mode"], four["wave"]) == (
        "dry-run",
        "node gpu-04 in no wave (no Slurm feature names a wave): dry-run",
    )
    assert not [t for t in set(threading.enumerate()) - before if t.name == "remediate-slurm-cache" and t.is_alive()]


DRAIN = {
    "name": "xid",
    "match": {"alertname": "GpuXidError"},
    "target": "node",
    "mode": "enforce",
    "steps": [{"name": "drain", "action": "slurm.drain"}],
}


def test_replay_under_a_slurm_rollout_plans_the_drain_of_a_node_in_no_wave(
    slurm: SlurmCluster, store: Store, db_url: str, make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    """Recorded in enforce mode (no rollout); replayed under one whose only wave is wave1: gpu-04's drain becomes a
    plan, so it is gone from the report's drained nodes; gpu-01's stays."""
    for host in ("gpu-01", "gpu-04"):
        ingest_alerts(make_engine(DRAIN), alert_payload(labels={"Hostname": host}), at=T0)
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "xid.yaml").write_text(yaml.safe_dump(DRAIN), encoding="utf-8")
    config = tmp_path / "remediate.yaml"
    rollout = {"slurm": "feature", "waves": {"wave1": "enforce"}}
    config.write_text(
        yaml.safe_dump({"schedulers": "slurm", "slurm_conf": str(slurm.conf), "rollout": rollout}), encoding="utf-8"
    )

    window = ("--since", str(T0 - 60), "--until", str(T0 + 3600))
    result = cli("replay", "--database-url", db_url, "--playbooks", changed, *window, "--json", "--config", config)

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["cordoned"]["removed"], report["cordoned"]["added"]) == (["gpu-04"], [])
