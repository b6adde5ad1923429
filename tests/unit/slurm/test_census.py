"""The node cache's census per partition (remediate.slurm.nodecache), from a parsed `sinfo --json` answer in
22.05's shape: what the breaker's cap per partition counts, computed once per read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from remediate.slurm import SlurmNode, SlurmNodeCache, parse_nodes
from tests.support.waiting import scaled, wait_until

NEVER_AGAIN = 3600.0


def entry(name: str, partitions: list[str], *, flags: list[str] | None = None, reason: str = "") -> dict[str, Any]:
    """One node as `sinfo --json` (v0.0.38) prints it, the fields remediate reads."""
    return {
        "name": name,
        "hostname": name,
        "state": "idle",
        "state_flags": flags or [],
        "reason": reason,
        "reason_set_by_user": "root" if reason else "",
        "reason_changed_at": 1_800_000_000 if reason else 0,
        "partitions": partitions,
        "active_features": "gpu",
    }


DRAIN = ["DRAIN"]
ANSWER = {
    "meta": {"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}}},
    "errors": [],
    "nodes": [
        entry("s1", ["small"], flags=DRAIN, reason="remediate run 7: GPUXidCritical GPU 3"),
        entry("s2", ["small"]),
        entry("x1", ["small", "big"], flags=DRAIN, reason="remediate run 8: GPUXidCritical"),
        entry("b1", ["big"], flags=DRAIN, reason="disk swap, ticket 4411"),  # a person's: not counted as held
        entry("b2", ["big"], flags=DRAIN, reason="breakfix: XID 79 after a reset (from remediate run 9)"),
        entry("b3", ["big"]),
        entry("b4", ["big"], reason="remediate run 10: not drained any more"),  # resumed: a reason, no DRAIN
        entry("o1", ["other"]),
    ],
}


class AnswerClient:
    """What the cache needs of a SlurmClient: one `sinfo --json` answer, parsed as the real client parses it."""

    timeout = 1.0

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    def nodes(self) -> tuple[SlurmNode, ...]:
        return parse_nodes(self.answer)


@pytest.fixture
def cache() -> Iterator[SlurmNodeCache]:
    cache = SlurmNodeCache(AnswerClient(ANSWER), interval=NEVER_AGAIN)  # type: ignore[arg-type]
    yield cache
    cache.stop()


def test_the_census_counts_each_partitions_nodes_and_held_nodes(cache: SlurmNodeCache) -> None:
    census = cache.census()
    assert census.counted == 8 and census.held == {"s1", "x1", "b2"}
    assert set(census.partitions) == {"small", "big", "other"}
    small, big = census.partitions["small"], census.partitions["big"]
    assert (small.counted, small.nodes, small.held) == (3, {"s1", "s2", "x1"}, {"s1", "x1"})
    # x1 is in both partitions and counts in each; a hand-off still holds; a person's drain does not.
    assert (big.counted, big.held) == (5, {"x1", "b2"})
    assert census.partitions["other"].held == frozenset()


def test_a_scoped_census_counts_only_the_partitions_in_scope(cache: SlurmNodeCache) -> None:
    census = cache.census(("small",))
    assert census.counted == 3 and set(census.partitions) == {"small"}
    # Held nodes stay whatever their partition (the whole scope's count takes them all, as before).
    assert census.held == {"s1", "x1", "b2"}
    both = cache.census(("big", "small"))
    assert both.counted == 7 and set(both.partitions) == {"small", "big"}
    assert cache.census(("small", "big")) is both  # one census per set of partitions per read, not per step
    assert cache.census(("nowhere",)).partitions == {}


def test_the_census_per_partition_follows_the_next_read() -> None:
    client = AnswerClient(ANSWER)
    cache = SlurmNodeCache(client, interval=scaled(0.05))  # type: ignore[arg-type]
    try:
        assert cache.census(("small",)).partitions["small"].held == {"s1", "x1"}
        client.answer = {**ANSWER, "nodes": [entry("s1", ["small"]), entry("s3", ["small"], flags=DRAIN,
                         reason="remediate run 11")]}  # fmt: skip
        wait_until(
            lambda: cache.census(("small",)).partitions["small"].held == {"s3"}, 30, message="the next read's census"
        )
        assert cache.census(("small",)).partitions["small"].counted == 2
    finally:
        cache.stop()
