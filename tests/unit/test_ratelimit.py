"""The bounds on unauthenticated requests (server.ratelimit): a token bucket per address, refusals remembered."""

from __future__ import annotations

import pytest

from remediate.server.ratelimit import RecentRefusals, TokenBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_one_token_per_interval_per_key() -> None:
    clock = Clock()
    buckets = TokenBuckets(capacity=3, per_second=0.5, clock=clock)

    assert [buckets.take("10.0.0.1") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("10.0.0.1") == pytest.approx(2.0)  # one token comes every 2 s
    assert buckets.take("10.0.0.2") == 0.0  # another address has its own bucket
    clock.now += 1.0
    assert buckets.take("10.0.0.1") == pytest.approx(1.0)  # refused tries take nothing, nor push it back
    clock.now += 1.0
    assert buckets.take("10.0.0.1") == 0.0
    clock.now += 3600
    assert [buckets.take("10.0.0.1") for _ in range(4)][-1] > 0  # refilled to the burst, never beyond


def test_buckets_keep_at_most_max_keys_dropping_the_least_recently_used() -> None:
    clock = Clock()
    buckets = TokenBuckets(capacity=1, per_second=0.001, max_keys=2, clock=clock)
    buckets.take("a")
    buckets.take("b")
    buckets.take("a")  # "a" used last: "b" goes when "c" comes
    buckets.take("c")

    assert buckets.take("a") > 0  # still remembered, still empty
    assert buckets.take("b") == 0.0  # forgotten: a fresh bucket


def test_a_refusal_is_remembered_for_its_ttl_by_hash_only() -> None:
    clock = Clock()
    refusals: RecentRefusals[str] = RecentRefusals(ttl=60, max_entries=2, clock=clock)
    refusals.put("secret-token-1", "401 expired")

    assert refusals.get("secret-token-1") == "401 expired"
    assert refusals.get("secret-token-2") is None
    assert "secret-token-1" not in repr(vars(refusals))  # the token itself is not kept
    clock.now += 60
    assert refusals.get("secret-token-1") is None
    for n in range(3):
        refusals.put(f"t{n}", str(n))
    assert [refusals.get(f"t{n}") for n in range(3)] == [None, "1", "2"]
