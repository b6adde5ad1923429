"""The circuit breaker's cap per group of nodes (slurm.drain: each partition in scope the node is in): the same
fraction as the whole scope's, rounded the same way, checked in the same transaction; in memory and on the
store (claims not yet in any census still count in their group)."""

from __future__ import annotations

import threading

import pytest

from remediate.breaker import BreakerLimits, BreakerOpen, CapCount, CircuitBreaker, cap_counts, memory_breaker
from remediate.store import Store
from tests.support.stores import EVERY_DATABASE

SMALL = frozenset(f"s{i}" for i in range(8))
BIG = frozenset(f"b{i}" for i in range(1000))
WIDE = BreakerLimits(max_fraction=0.25, max_nodes=100)
"""25%: 2 of the 8 small nodes, 100 (max_nodes) of the 1,008 of the whole scope."""


def small(node: str) -> dict[str, frozenset[str]]:
    return {"partition small": SMALL} if node in SMALL else {"partition big": BIG}


def claim(breaker: CircuitBreaker, node: str, run_id: int, held: set[str] | None = None) -> dict[str, object]:
    return breaker.acquire(
        node, kind="drain", run_id=run_id, cluster_nodes=1008, held_in_cluster=held or set(), groups=small(node)
    )


def test_a_group_takes_its_share_exactly_and_the_next_node_trips_the_breaker_naming_the_group() -> None:
    breaker = memory_breaker(WIDE)
    claim(breaker, "s0", 1)
    at_cap = claim(breaker, "s1", 2)
    assert at_cap["open"] is False
    assert at_cap["groups"] == [{"group": "partition small", "nodes": 8, "held": 2, "recent": 2, "cap": 2}]
    claim(breaker, "b0", 3)  # the big partition's share is not the small one's
    with pytest.raises(BreakerOpen) as refused:
        claim(breaker, "s2", 4)
    reason = breaker.status()["reason"]
    assert reason == (
        "drain of node s2 (run 4) would make 3 of the 8 nodes of partition small held by remediate now and 3 "
        "changed within 10m; the cap is 2 = min(25% of 8 nodes of partition small = 2, max_nodes 100)"
    )
    assert reason in str(refused.value) and breaker.status()["tripped_node"] == "s2"
    # The whole scope was far from its cap: only the group's share refused it.
    assert breaker.status()["held_nodes"] == ["b0", "s0", "s1"] and breaker.status(1008)["cap"] == 100
    # One mechanism: the breaker is open now for every new node, until a person resets it; undo never refused.
    with pytest.raises(BreakerOpen):
        claim(breaker, "b1", 5)
    assert breaker.release("s0", run_id=6) == 1


def test_a_group_counts_nodes_the_cluster_shows_held_and_nodes_changed_within_the_window() -> None:
    breaker = memory_breaker(WIDE)
    with pytest.raises(BreakerOpen, match="3 of the 8 nodes of partition small held"):
        claim(breaker, "s2", 1, held={"s0", "s1", "b5"})  # drained by remediate before this process knew
    recent = memory_breaker(WIDE)
    claim(recent, "s0", 1)
    recent.release("s0", run_id=2)  # resumed at once: not held, still recent
    claim(recent, "s1", 3)
    with pytest.raises(BreakerOpen, match="2 of the 8 nodes of partition small held by remediate now and 3 changed"):
        claim(recent, "s2", 4)


def test_a_node_in_two_groups_is_refused_by_the_smaller_share_and_counts_in_each() -> None:
    gpu, debug = frozenset({"x", "a1", "a2", "a3"}), frozenset({"x", *(f"d{i}" for i in range(99))})
    both = {"partition gpu": gpu, "partition debug": debug}
    breaker = memory_breaker(WIDE)  # gpu: 1 of 4; debug: 25 of 100
    breaker.acquire("x", kind="drain", run_id=1, cluster_nodes=103, groups=both)
    # x, held, counts in gpu as well as in debug: a1 is gpu's second node held.
    with pytest.raises(BreakerOpen, match="2 of the 4 nodes of partition gpu held"):
        breaker.acquire("a1", kind="drain", run_id=2, cluster_nodes=103, groups={"partition gpu": gpu})

    other = memory_breaker(WIDE)
    other.acquire("a1", kind="drain", run_id=1, cluster_nodes=103, groups={"partition gpu": gpu})
    with pytest.raises(BreakerOpen, match="partition gpu") as refused:  # debug alone would allow x
        other.acquire("x", kind="drain", run_id=2, cluster_nodes=103, groups=both)
    assert "partition debug" not in str(refused.value)


@pytest.mark.parametrize(
    ("members", "fraction", "max_nodes", "cap"),
    [
        (8, 0.25, 100, 2),
        (9, 0.25, 100, 2),  # 2.25 rounds down
        (5, 0.1, 100, 1),  # 0.5 rounds down to 0: at least one node, as for the whole scope
        (1, 0.1, 100, 1),  # a partition of one node may lose it (the same floor of 1)
        (10, 0.3, 100, 3),  # 0.3 x 10 is 2.9999...: not 2
        (1000, 0.1, 3, 3),  # max_nodes caps a group too (no group holds more than the whole scope)
        (8, 0.0, 100, 0),
    ],
)
def test_a_groups_cap_is_rounded_as_the_whole_scopes(members: int, fraction: float, max_nodes: int, cap: int) -> None:
    limits = BreakerLimits(max_fraction=fraction, max_nodes=max_nodes)
    group = frozenset(f"g{i}" for i in range(members))
    others = sorted(group - {"g0"})

    def with_held(count: int) -> CapCount:
        """The group's count for a claim of g0 while `count` other nodes of it are held (whole scope: 5,000)."""
        held = set(others[:count])
        return cap_counts(limits, "g0", held=held, recent=set(), cluster_nodes=5000, groups={"partition g": group})[1]

    assert with_held(0).cap == cap == limits.cap(members)
    if cap == 0:
        assert with_held(0).over
    else:
        assert not with_held(cap - 1).over  # g0 makes exactly `cap` held
        assert with_held(cap).over is (cap < members)  # cap + 1, where the group has that many nodes


def test_a_node_missing_from_its_groups_list_counts_as_one_of_its_nodes() -> None:
    # The group's list is the node cache's, up to its bound old; the node's own partitions come from a fresh read.
    counts = cap_counts(WIDE, "s8", held={"s0"}, recent=set(), cluster_nodes=1009, groups={"partition small": SMALL})
    assert (counts[1].nodes, counts[1].held, counts[1].cap) == (9, 2, 2)


def test_without_groups_the_breaker_is_as_before() -> None:
    breaker = memory_breaker(BreakerLimits(max_fraction=0.25, max_nodes=100))
    for index in range(3):  # 3 of 8: the small partition's share, were it counted
        status = breaker.acquire(f"s{index}", kind="drain", run_id=index + 1, cluster_nodes=1008)
    assert status["open"] is False and "groups" not in status


@EVERY_DATABASE
def test_a_groups_share_holds_across_stores_claiming_at_once(store: Store, db_url: str) -> None:
    """Eight workers drain the 8 small nodes at once, none yet in any census: the claims count, 2 win."""
    stores = [Store.open(db_url) for _ in range(8)]
    won: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def worker(index: int, store: Store) -> None:
        breaker = CircuitBreaker(store.breaker.ledger, store.breaker.view, limits=WIDE)
        start.wait()
        try:
            claim(breaker, f"s{index}", index + 1)
        except BreakerOpen:
            return
        with lock:
            won.append(f"s{index}")

    threads = [threading.Thread(target=worker, args=(i, s)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = CircuitBreaker(stores[0].breaker.ledger, limits=WIDE).status()
    for opened in stores:
        opened.close()
    assert len(won) == 2 and sorted(won) == status["held_nodes"] and status["refused"] == 6
