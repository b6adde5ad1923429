"""Staged rollout on the test API server: a node's wave is its label (remediate.judging.waves.NodeWaves), read once per
30 s (remediate.judging.waves.TTL); a label changed (a promotion) is seen after the TTL, audited as `rollout_wave`."""

from __future__ import annotations

import logging
import time

import pytest

from remediate.config.rollout import Mode, NodeWave, parse_rollout
from remediate.judging.waves import NodeWaves
from remediate.kube import KubeClient
from remediate.store import Store
from remediate.store import schema as t
from tests.conftest import ingest_alerts
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.stores import rows
from tests.unit.test_engine import T0, MakeEngine, playbook, xid

LABEL = "remediate.io/wave"
ROLLOUT = parse_rollout({"label": LABEL, "waves": {"1": "enforce", "2": "dry-run"}, "default": "approve"})
TTL = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster(kube_api: FakeKubeAPI) -> FakeKubeAPI:
    kube_api.add_node("node-a", labels={LABEL: "1"})
    kube_api.add_node("node-b", labels={LABEL: "2"})
    kube_api.add_node("node-c")
    return kube_api


def _waves(client: KubeClient, clock: Clock, **static: str) -> NodeWaves:
    return NodeWaves(lambda: client, static, ttl=TTL, clock=clock)


def _until_cached(client: KubeClient, node: str, label: str, value: str) -> None:
    """Until the node cache's watch delivered the label change (it is asynchronous: within its staleness bound)."""
    deadline = time.monotonic() + 5
    while client.node_cache().nodes()[node].labels.get(label) != value:
        assert time.monotonic() < deadline, f"the node cache never saw {node}'s {label}={value}"
        time.sleep(0.01)


def test_a_nodes_wave_is_its_label_read_in_one_list_per_ttl(cluster: FakeKubeAPI, kube_client: KubeClient) -> None:
    assert ROLLOUT is not None
    waves = _waves(kube_client, Clock(), **{"host-x": "1"})

    assert waves.of(ROLLOUT, "node-a") == NodeWave("node-a", "1", f"label {LABEL}=1")
    assert waves.of(ROLLOUT, "node-b") == NodeWave("node-b", "2", f"label {LABEL}=2")
    assert waves.of(ROLLOUT, "node-c") == NodeWave("node-c", None, f"no label {LABEL}")
    assert waves.of(ROLLOUT, "host-x") == NodeWave("host-x", "1", "rollout_nodes")
    assert cluster.request_count(verb="list", resource="nodes") == 1


def test_a_label_change_promotes_the_node_after_the_ttl_and_is_audited(
    cluster: FakeKubeAPI, kube_client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert ROLLOUT is not None
    clock = Clock()
    waves = _waves(kube_client, clock)
    assert waves.of(ROLLOUT, "node-b").wave == "2"
    caplog.set_level(logging.INFO, logger="remediate.audit")

    kube_client.patch_node("node-b", {"metadata": {"labels": {LABEL: "1"}}})
    _until_cached(kube_client, "node-b", LABEL, "1")
    clock.now += TTL - 1
    still = waves.of(ROLLOUT, "node-b").wave
    clock.now += 1
    promoted = waves.of(ROLLOUT, "node-b").wave

    assert (still, promoted) == ("2", "1")
    (event,) = [r for r in caplog.records if r.name == "remediate.audit"]
    assert (event.getMessage(), event.node, event.label, event.wave, event.was) == (  # type: ignore[attr-defined]
        "rollout_wave",
        "node-b",
        LABEL,
        "1",
        "2",
    )


def test_a_wave_the_api_cannot_tell_is_unknown_and_runs_dry_run(cluster: FakeKubeAPI, kube_client: KubeClient) -> None:
    assert ROLLOUT is not None
    cluster.inject("status", method="GET", path=r"/api/v1/nodes", status=403)

    where = _waves(kube_client, Clock()).of(ROLLOUT, "node-a")

    assert (where.wave, where.unknown) == (None, True)
    assert where.source.startswith(f"label {LABEL} unreadable: ")


def test_ingest_runs_each_node_in_its_labelled_waves_mode_and_a_promotion_changes_the_next_run(
    cluster: FakeKubeAPI, kube_client: KubeClient, store: Store, make_engine: MakeEngine
) -> None:
    clock = Clock()
    engine = make_engine(playbook(), rollout=ROLLOUT, waves=_waves(kube_client, clock))

    first = ingest_alerts(engine, xid("node-a"), xid("node-b"), xid("node-c"), at=T0)
    kube_client.patch_node("node-b", {"metadata": {"labels": {LABEL: "1"}}})
    _until_cached(kube_client, "node-b", LABEL, "1")
    clock.now += TTL
    again = ingest_alerts(engine, xid("node-b", starts_at="2026-01-01T01:00:00Z"), at=T0 + 3600)

    assert [(r.target, r.mode) for r in rows(store, t.runs.name)] == [
        ("node-a", Mode.ENFORCE),
        ("node-b", Mode.DRY_RUN),
        ("node-c", Mode.APPROVE),
        ("node-b", Mode.ENFORCE),
    ]
    assert [d.reason.split("; ", 1)[1] for d in first.decisions] == [
        f"node node-a in wave 1 (label {LABEL}=1): enforce",
        f"node node-b in wave 2 (label {LABEL}=2): dry-run",
        f"node node-c in no wave (no label {LABEL}): approve",
    ]
    assert again.decisions[0].reason.endswith(f"node node-b in wave 1 (label {LABEL}=1): enforce")
