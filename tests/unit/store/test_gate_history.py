"""remediate.store.gate_history on SQLite and PostgreSQL: a node's latest gate run (the newest run of that target
with a gpu.health step, among the playbooks that have one) with its gate and chosen other steps, after real runs
of gpu.health on the simulated GPU file through the engine and the executor; a node never gated has none; the
newest gate run wins over an older one, newer runs without a gate and a re-sent notification; on SQLite the
statement seeks the node's decisions and each run's steps by index.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from remediate.actions.base import ActionRegistry
from remediate.executor.loop import Executor
from remediate.gpu import SimulatedBackend
from remediate.judging.engine import Engine
from remediate.store import Store
from remediate.store.gate_history import latest_gate
from tests.conftest import alert_payload, ingest_alerts
from tests.support.gpu import HEALTHY, healthy_simulator, simulated_registry
from tests.support.stores import EVERY_DATABASE

T0 = 1_767_225_600.0
GATE = {
    "name": "gate-test",
    "match": {"alertname": "NodeBack"},
    "target": "node",
    "cooldown": "0s",
    "max_attempts": 100,
    "steps": [
        {"name": "note", "action": "log", "with": {"message": "gating {{ labels.Hostname }}"}},
        {"name": "gate", "action": "gpu.health", "with": {"soak": "1s", "every": "1s"}, "timeout": "30s"},
        {"name": "after", "action": "log", "with": {"message": "gated"}, "always": True},
    ],
}
GATED = ("gate-test",)
LOG_ONLY = {"name": "log-only", "match": {"alertname": "DiskNote"}, "target": "node", "cooldown": "0s",
            "steps": [{"action": "log", "with": {"message": "disk"}}]}  # fmt: skip


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return healthy_simulator(tmp_path)


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    return simulated_registry(sim, db_url)


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine(GATE, LOG_ONLY)


def alert(engine: Engine, store: Store, registry: ActionRegistry, alertname: str, node: str, at: float, n: str) -> int:
    """`alertname` on `node` (occurrence `n`) through the engine, its run drained by one executor: the run's id."""
    payload = alert_payload(alertname, labels={"Hostname": node, "n": n})
    (decision,) = ingest_alerts(engine, payload, at=at).decisions
    assert decision.run_id is not None, decision.reason
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()
    return decision.run_id


@EVERY_DATABASE
def test_the_latest_gate_run_of_a_node_with_its_gate_steps_and_no_other_nodes(
    store: Store, registry: ActionRegistry, engine: Engine, sim: SimulatedBackend
) -> None:
    uuid = sim.devices()[1].uuid
    sim.update_device(uuid, health={**HEALTHY, "ecc_dbe_volatile": 2})
    failed = alert(engine, store, registry, "NodeBack", "node-a", T0, "1")
    sim.update_device(uuid, health=HEALTHY)
    passed_b = alert(engine, store, registry, "NodeBack", "node-b", T0 + 60, "2")
    alert(engine, store, registry, "DiskNote", "node-c", T0 + 120, "3")

    gated = store.history.latest_gate("node-a", "gpu.health", playbooks=GATED)
    assert gated is not None
    assert (gated.run_id, gated.playbook, gated.phase, gated.status) == (failed, "gate-test", "firing", "failed")
    (gate,) = gated.steps
    assert (gate.index, gate.name, gate.action, gate.status) == (1, "gate", "gpu.health", "failed")
    assert gate.result["failed"] == [f"GPU 1 ({uuid}): ecc_dbe_volatile: 2 > 0"]
    assert gate.error is not None and "ecc_dbe_volatile: 2 > 0" in gate.error
    assert gate.plan["soak"]["rounds_planned"] == 2
    assert gate.started_at is not None and gate.finished_at is not None and gate.finished_at >= gate.started_at

    on_b = store.history.latest_gate("node-b", "gpu.health", ("log",), playbooks=GATED)
    assert on_b is not None and on_b.run_id == passed_b and on_b.status == "succeeded"
    assert [(s.name, s.action, s.status) for s in on_b.steps] == [
        ("note", "log", "succeeded"), ("gate", "gpu.health", "succeeded"), ("after", "log", "succeeded"),
    ]  # fmt: skip
    assert [r["verdict"] for r in on_b.steps[1].result["soak"]["rounds"]] == ["ok", "ok"]
    # A node with runs but no gate, and a node with nothing at all.
    assert store.history.latest_gate("node-c", "gpu.health", playbooks=GATED) is None
    assert store.history.latest_gate("node-z", "gpu.health", playbooks=GATED) is None
    assert store.history.latest_gate("node-b", "slurm.burnin", playbooks=GATED) is None
    # Only the runs of the playbooks asked about (those with a gate step): others' are not walked.
    assert store.history.latest_gate("node-b", "gpu.health", playbooks=("log-only",)) is None
    assert store.history.latest_gate("node-b", "gpu.health", playbooks=()) is None


@EVERY_DATABASE
def test_the_newest_gate_run_wins_and_later_runs_without_a_gate_are_walked_past(
    store: Store, registry: ActionRegistry, engine: Engine, sim: SimulatedBackend
) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, health={**HEALTHY, "pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}})
    alert(engine, store, registry, "NodeBack", "node-a", T0, "1")
    sim.update_device(uuid, health=HEALTHY)
    second = alert(engine, store, registry, "NodeBack", "node-a", T0 + 60, "2")
    later = alert(engine, store, registry, "DiskNote", "node-a", T0 + 120, "3")
    # AlertManager re-sends the first occurrence: a newer decision, a duplicate that names no run.
    (again,) = ingest_alerts(engine, alert_payload("NodeBack", labels={"Hostname": "node-a", "n": "1"}),
                             at=T0 + 180).decisions  # fmt: skip
    assert (again.decision, again.run_id) == ("duplicate", None)

    gated = store.history.latest_gate("node-a", "gpu.health", playbooks=GATED)
    assert gated is not None and later > gated.run_id == second and gated.status == "succeeded"


def test_on_sqlite_the_node_s_decisions_and_each_run_s_steps_are_index_seeks(store: Store) -> None:
    """The statement latest_gate sends, explained: no scan of decisions, steps or runs (one per node page)."""
    sent: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        sent.append((statement, parameters))

    with store.read() as conn:
        sa.event.listen(conn.engine, "before_cursor_execute", record)
        try:
            assert latest_gate(conn, "node-a", "gpu.health", ("k8s.burnin",), playbooks=("a", "b")) is None
        finally:
            sa.event.remove(conn.engine, "before_cursor_execute", record)
        ((statement, parameters),) = sent
        plan = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    print("\n".join(["", *plan]))
    assert not [p for p in plan if p.startswith("SCAN")], plan
    # ix_decisions_target (in id order, the playbook read from each row) or ix_decisions_target_playbook: SQLite
    # picks without statistics; either way the steps are read only for the gate playbooks' runs.
    assert any(p.startswith("SEARCH decisions USING INDEX ix_decisions_target") for p in plan), plan
    assert sum("steps USING" in p and "(run_id=?)" in p for p in plan) == 2, plan
