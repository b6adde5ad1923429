"""slurmctld down during a run, through the real engine, executor and SQLite store (tests/support/slurm.py's real
daemons): the drain fails as retryable and changes nothing, the run is handed back as a k8s.* run is in an API
outage (`rerunnable`), and AlertManager's next delivery of the same alert runs it again once slurmctld is back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions import default_registry
from remediate.breaker import CircuitBreaker, limits_from_settings
from remediate.config.schedulers import Scheduler
from remediate.config.settings import ExecutorSettings, Settings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine, IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.store import Store
from tests.conftest import alert_payload, notification_payload
from tests.support.slurm import SlurmCluster, xid_playbook
from tests.support.store_json import run_json_of
from tests.support.waiting import scaled, wait_until


@pytest.fixture
def engine_and_store(slurm: SlurmCluster, tmp_path: Path) -> Iterator[tuple[Engine, Store]]:
    settings = Settings.of(
        schedulers=(Scheduler.SLURM,),
        slurm_conf=slurm.conf,
        slurm_partitions=("train",),
        slurm_command_timeout=scaled(5),
    )
    # What the server builds: the process's one Slurm node cache (the `slurm` fixture stops it), the registry on it.
    registry = default_registry(settings, slurm=slurm.node_cache(interval=settings.slurm.poll_interval))
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    executor = Executor(
        store=store,
        registry=registry,
        retry_wait_max=0.05,
        breaker=CircuitBreaker(
            store.breaker.ledger, store.breaker.view, limits=limits_from_settings(settings.kube.breaker)
        ),
        settings=ExecutorSettings(threads=1, poll_interval=0.02),
    )
    drain = yaml.safe_load(xid_playbook(cooldown="30m", requeue=False, retries=1, timeout="120s"))
    playbooks = PlaybookSet([parse_playbook(drain, registry, source="pb.yaml")])
    engine = Engine(store=store, playbooks=playbooks, registry=registry, on_queued=executor.wake)
    executor.start()
    try:
        yield engine, store
    finally:
        executor.stop()
        store.close()


def _deliver(engine: Engine, alert: dict[str, Any]) -> IngestResult:
    return engine.ingest_body(json.dumps(notification_payload(alert)).encode(), received_at=time.time())


def _ended(store: Store, run_id: int) -> dict[str, Any]:
    return wait_until(
        lambda: (run := run_json_of(store, run_id))["status"] in ("succeeded", "failed") and run,
        scaled(120),
        interval=0.1,
        message=f"run {run_id} never ended",
    )


def test_a_drain_in_a_slurmctld_outage_is_handed_back_and_runs_again_on_the_next_delivery(
    slurm: SlurmCluster, engine_and_store: tuple[Engine, Store]
) -> None:
    engine, store = engine_and_store
    alert = alert_payload("GPUXidCritical", labels={"Hostname": slurm.host, "gpu": "3", "xid": "79"})
    slurm.stop_controller()

    (first,) = _deliver(engine, alert).decisions
    failed = _ended(store, first.run_id)

    assert failed["status"] == "failed" and failed["rerunnable"] is True
    assert "plan failed" in failed["error"] and "Unable to contact slurm controller" in failed["error"]
    assert "(2 tries)" in failed["error"]
    assert failed["steps"][0]["attempts"] == []  # nothing was changed: the plan could not read the cluster
    slurm.start_controller()
    assert "remediate run" not in slurm.show_node(slurm.host)

    (again,) = _deliver(engine, alert).decisions  # AlertManager's re-send of the same occurrence
    assert again.decision.value == "accepted", again.reason
    assert f"runs again: run {first.run_id} failed before changing anything" in again.reason
    succeeded = _ended(store, again.run_id)
    assert succeeded["status"] == "succeeded", succeeded["error"]
    assert f"remediate run {again.run_id}: GPUXidCritical GPU 3" in slurm.show_node(slurm.host)
