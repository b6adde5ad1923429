"""The circuit breaker: caps, window, trip and reset, stale alerts; in memory and on the store (atomic claims)."""

from __future__ import annotations

import threading

import pytest

from remediate.breaker import (
    BreakerLimits,
    BreakerOpen,
    BreakerState,
    CircuitBreaker,
    StaleAlert,
    is_stale,
    limits_from_settings,
    memory_breaker,
)
from remediate.config.settings import Settings, load_settings
from remediate.errors import ConfigError
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE

T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("nodes", "fraction", "max_nodes", "cap"),
    [
        (50, 0.1, 3, 3),  # the default: min(10% of 50 = 5, 3)
        (20, 0.1, 3, 2),
        (5, 0.1, 3, 1),  # 10% of 5 rounds down to 0: at least one node
        (0, 0.1, 3, 0),
        (100, 0.5, 0, 0),  # max_nodes 0: no node at all
        (100, 0.0, 3, 0),
        (1000, 0.1, 3, 3),
    ],
)
def test_the_cap_is_the_smaller_of_the_fraction_and_the_absolute_number(
    nodes: int, fraction: float, max_nodes: int, cap: int
) -> None:
    assert BreakerLimits(max_fraction=fraction, max_nodes=max_nodes).cap(nodes) == cap


def test_default_limits_and_settings_agree() -> None:
    assert limits_from_settings(Settings().kube.breaker) == BreakerLimits()
    assert BreakerLimits().describe_cap(50) == "3 = min(10% of 50 nodes = 5, max_nodes 3)"
    limits = limits_from_settings(
        load_settings(
            env={
                "REMEDIATE_BREAKER_MAX_FRACTION": "0.25",
                "REMEDIATE_BREAKER_MAX_NODES": "8",
                "REMEDIATE_BREAKER_WINDOW": "30m",
                "REMEDIATE_BREAKER_NODE_SELECTOR": "nvidia.com/gpu.present=true",
                "REMEDIATE_BREAKER_STALE_HORIZON": "1h",
            }
        ).kube.breaker
    )
    assert limits == BreakerLimits(0.25, 8, 1800.0, "nvidia.com/gpu.present=true", 3600.0)
    assert "nodes matching nvidia.com/gpu.present=true" in limits.describe_cap(40)
    with pytest.raises(ConfigError, match="between 0 and 1"):
        load_settings(env={"REMEDIATE_BREAKER_MAX_FRACTION": "10"})


def test_claims_up_to_the_cap_pass_and_the_next_node_trips_the_breaker() -> None:
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(), clock)
    for index in range(3):
        status = breaker.acquire(f"n{index}", kind="cordon", run_id=index + 1, cluster_nodes=50)
    assert status["held_nodes"] == ["n0", "n1", "n2"] and status["open"] is False

    with pytest.raises(BreakerOpen) as refused:
        breaker.acquire("n3", kind="cordon", run_id=4, cluster_nodes=50)

    state = breaker.status()
    assert state["open"] is True and state["tripped_node"] == "n3" and state["tripped_by_run"] == 4
    assert "would make 4 nodes held by remediate now" in state["reason"]
    assert "3 nodes held by remediate [n0, n1, n2]" in str(refused.value)
    assert refused.value.status["cap"] == 3


def test_an_open_breaker_refuses_every_new_node_and_counts_refusals_but_lets_a_run_finish_its_node() -> None:
    breaker = memory_breaker(BreakerLimits(max_nodes=1))
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50)
    with pytest.raises(BreakerOpen):
        breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=50)
    with pytest.raises(BreakerOpen):
        breaker.acquire("n2", kind="drain", run_id=3, cluster_nodes=50)
    # n0 is held by another run: refused too while open.
    with pytest.raises(BreakerOpen):
        breaker.acquire("n0", kind="taint", run_id=9, cluster_nodes=50)
    # Run 1 goes on with the node it holds (cordon -> taint -> drain).
    assert breaker.acquire("n0", kind="drain", run_id=1, cluster_nodes=50)["open"] is True
    assert breaker.status()["refused"] == 3


def test_a_node_already_held_is_not_counted_twice() -> None:
    breaker = memory_breaker(BreakerLimits(max_nodes=2))
    for run_id, kind in enumerate(("cordon", "taint", "drain"), start=1):
        breaker.acquire("n0", kind=kind, run_id=run_id, cluster_nodes=50)
    breaker.acquire("n1", kind="cordon", run_id=9, cluster_nodes=50)
    assert breaker.status()["held_nodes"] == ["n0", "n1"]
    assert breaker.status()["open"] is False


def test_nodes_the_cluster_shows_held_count_even_without_a_claim() -> None:
    breaker = memory_breaker(BreakerLimits(max_nodes=2))
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50, held_in_cluster={"old-1"})
    with pytest.raises(BreakerOpen):
        breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=50, held_in_cluster={"old-1", "n0"})


def test_the_window_and_the_held_count_both_limit() -> None:
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(max_nodes=2, window=600), clock)
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50)
    breaker.release("n0", run_id=2)  # uncordoned at once: no longer held, still recent
    breaker.acquire("n1", kind="cordon", run_id=3, cluster_nodes=50)
    with pytest.raises(BreakerOpen, match="3 changed within 10m"):
        breaker.acquire("n2", kind="cordon", run_id=4, cluster_nodes=50)

    fresh = memory_breaker(BreakerLimits(max_nodes=2, window=600), clock)
    fresh.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50)
    fresh.release("n0", run_id=2)
    clock.now += 601  # n0 left the window
    fresh.acquire("n1", kind="cordon", run_id=3, cluster_nodes=50)
    fresh.acquire("n2", kind="cordon", run_id=4, cluster_nodes=50)
    assert fresh.status()["held_nodes"] == ["n1", "n2"]


def test_a_claim_whose_marks_vanished_is_released_once_out_of_the_window() -> None:
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(max_nodes=1, window=600), clock)
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50)
    clock.now += 700  # someone uncordoned n0 by hand: the cluster no longer shows it held
    breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=50, held_in_cluster=set())
    assert breaker.status()["held_nodes"] == ["n1"]


def test_reset_closes_the_breaker_and_records_who_and_why() -> None:
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(max_nodes=1), clock)
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50)
    with pytest.raises(BreakerOpen):
        breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=50)
    breaker.release("n0", run_id=3)
    clock.now += 60
    status = breaker.reset(by="alice", reason="bad exporter rollout")

    assert status["open"] is False and status["refused"] == 0
    assert (status["reset_by"], status["reset_reason"], status["reset_at"]) == (
        "alice",
        "bad exporter rollout",
        T0 + 60,
    )
    assert status["tripped_by_run"] == 2  # history kept
    # The window starts again at the reset (n0 was changed 60 s ago, but a person has checked it since).
    assert breaker.acquire("n1", kind="cordon", run_id=4, cluster_nodes=50)["held_nodes"] == ["n1"]
    assert breaker.status()["recent_nodes"] == ["n1"]


def _tripped(breaker: CircuitBreaker) -> None:
    """Open the breaker: two nodes changed where the cap allows one (cluster of 50, max_nodes 1)."""
    breaker.acquire("t0", kind="cordon", run_id=91, cluster_nodes=50)
    with pytest.raises(BreakerOpen):
        breaker.acquire("t1", kind="cordon", run_id=92, cluster_nodes=50)
    breaker.release("t0", run_id=93)


def test_after_a_reset_old_alerts_are_stale_and_new_ones_are_not() -> None:
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(max_nodes=1, stale_horizon=900), clock)
    _tripped(breaker)
    clock.now += 1  # the reset after the trip: the window restarts with it
    assert breaker.reset(by="bob")["reset"] is True
    clock.now += 10
    with pytest.raises(StaleAlert, match=r"before the circuit breaker was reset .* older than the stale horizon 15m"):
        breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50, alert_started_at=T0 - 3600)
    # Started before the reset but recently: acted on. Started after the reset: acted on.
    breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=50, alert_started_at=T0 - 60)
    assert breaker.status()["held_nodes"] == ["n1"]
    breaker.release("n1", run_id=3)
    clock.now += 700  # out of the cap's window
    breaker.acquire("n2", kind="cordon", run_id=4, cluster_nodes=50, alert_started_at=T0 + 5)
    assert breaker.status()["held_nodes"] == ["n2"]


def test_resetting_a_closed_breaker_changes_nothing_and_says_so() -> None:
    """A reset of a closed breaker moved the stale horizon, silently turning older
    alerts stale. Only an open breaker is reset; a closed one answers reset: false and keeps its state."""
    clock = Clock()
    breaker = memory_breaker(BreakerLimits(max_nodes=5, stale_horizon=900), clock)
    before = breaker.status()

    status = breaker.reset(by="bob", reason="just in case")

    assert status["reset"] is False and status["open"] is False
    assert status["reset_at"] is None and status["reset_by"] is None
    assert {k: v for k, v in status.items() if k != "reset"} == before
    clock.now += 10
    # An alert from an hour ago is still acted on: nothing was reset, so nothing is stale.
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=50, alert_started_at=T0 - 3600)
    assert breaker.status()["held_nodes"] == ["n0"]


def test_without_a_reset_nothing_is_stale() -> None:
    assert not is_stale(T0 - 10**6, BreakerState(), T0, 900)
    assert is_stale(T0 - 10**6, BreakerState(reset_at=T0), T0 + 1, 900)
    assert not is_stale(T0 + 1, BreakerState(reset_at=T0), T0 + 10**6, 900)
    assert not is_stale(None, BreakerState(reset_at=T0), T0, 900)


@EVERY_DATABASE
def test_the_store_keeps_the_breaker_across_restarts_and_the_guards_see_it(store: Store, db_url: str) -> None:
    url = db_url
    breaker = CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=BreakerLimits(max_nodes=1))
    breaker.acquire("n0", kind="cordon", run_id=1, cluster_nodes=10)
    with pytest.raises(BreakerOpen):
        breaker.acquire("n1", kind="cordon", run_id=2, cluster_nodes=10)
    store.close()

    reopened = Store.open(url)
    again = CircuitBreaker(reopened.breaker.ledger, reopened.breaker.view, limits=BreakerLimits(max_nodes=1))
    assert again.status()["open"] is True
    assert again.status()["held_nodes"] == ["n0"]
    assert (reopened.breaker.state() or {})["open"] is True
    with reopened.ingest.reader() as reader:
        assert reader.breaker_state()["tripped_node"] == "n1"
    reopened.close()


@EVERY_DATABASE
def test_claims_are_atomic_across_threads_and_stores_of_one_database(store: Store, db_url: str) -> None:
    """Eight workers (each its own Store, as gunicorn workers are) claim 40 nodes at once: exactly the cap wins."""
    stores = [Store.open(db_url) for _ in range(8)]
    limits = BreakerLimits(max_fraction=0.1, max_nodes=3)
    won: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def worker(index: int, store: Store) -> None:
        breaker = CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=limits)
        start.wait()
        for node in range(index * 5, index * 5 + 5):
            try:
                breaker.acquire(f"n{node}", kind="cordon", run_id=node + 1, cluster_nodes=40)
            except BreakerOpen:
                with lock:
                    refused.append(f"n{node}")
            else:
                with lock:
                    won.append(f"n{node}")

    threads = [threading.Thread(target=worker, args=(i, s)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = CircuitBreaker(stores[0].breaker.ledger, limits=limits).status()
    for store in stores:
        store.close()

    assert len(won) == 3 == len(status["held_nodes"])
    assert len(refused) == 37 == status["refused"]
    assert sorted(won) == status["held_nodes"]
