"""The bounds on unauthenticated requests (server.ratelimit): a token bucket per address, a limit on all of them
in any window, refusals remembered."""

from __future__ import annotations

import bisect
import heapq
import random

import pytest

from remediate.server.agents import server_limit
from remediate.server.ratelimit import RecentRefusals, TokenBuckets, WindowLimit


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


def test_a_window_limit_counts_each_piece_of_work_until_a_window_after_it_ended() -> None:
    clock = Clock()
    limit = WindowLimit(limit=5, window=1.0, clock=clock)

    assert [limit.take() for _ in range(5)] == [0.0] * 5
    assert limit.take() == pytest.approx(1.0)  # all 5 in flight: none ends sooner than that can be known
    clock.now += 0.4
    limit.done()
    assert limit.take() == pytest.approx(1.0)  # it ended at 0.4: it counts until 1.4
    clock.now += 0.6
    assert limit.take() == pytest.approx(0.4)  # a refused take is not counted, nor pushes the window on
    clock.now += 0.4
    assert limit.take() == 0.0
    with pytest.raises(RuntimeError):
        WindowLimit(limit=1).done()


def test_a_window_limit_bounds_what_another_service_sees_whatever_the_latencies() -> None:
    """Requests at random moments (a herd, then stragglers), each calling another service that it reaches at
    some moment before its answer comes back: however a 1 s window is placed on those arrivals, it holds 5
    at most, and the limit is reached (not a bucket's trickle after its burst)."""
    clock = Clock()
    limit = WindowLimit(limit=5, window=1.0, clock=clock)
    rng, arrivals, ends = random.Random(3), [], []
    now = 0.0
    for _ in range(20_000):
        now += rng.expovariate(50.0)
        while ends and ends[0] <= now:
            clock.now = heapq.heappop(ends)
            limit.done()
        clock.now = now
        if limit.take() == 0.0:
            latency = rng.uniform(0.01, 0.5)
            arrivals.append(now + rng.uniform(0.0, latency))
            heapq.heappush(ends, now + latency)
    arrivals.sort()

    most = max(bisect.bisect_left(arrivals, start + 1.0) - i for i, start in enumerate(arrivals))
    assert most == 5
    # Each one holds its place for its latency (0.255 s on average) and a window after it.
    assert len(arrivals) / (arrivals[-1] - arrivals[0]) == pytest.approx(5 / 1.255, rel=0.1)


@pytest.mark.parametrize(("rate", "workers", "share"), [(20, 2, 10), (20, 3, 6), (20, 4, 5), (2, 4, 1), (1, 1, 1)])
def test_the_workers_shares_add_up_to_the_servers_rate_at_most(rate: int, workers: int, share: int) -> None:
    limit = server_limit(rate, workers)
    assert limit.limit == share and limit.window == 1.0
    assert share * workers <= max(rate, workers)
