"""The shared Slurm node cache (remediate.slurm.nodecache) under the slurm.* actions, against the real slurmctld
(tests/support/slurm.py): the commands are counted by the client's own hook (what the metric
remediate_slurm_commands_total counts), so "one sinfo per interval, not one per step" is what slurmctld was
sent. A stale view only moves counts: the node itself is read fresh for every decision."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from remediate.breaker import CircuitBreaker
from remediate.errors import RetryableActionError
from remediate.slurm import SlurmUnavailable
from tests.support.slurm import SlurmCluster, slurm_actions, step_context
from tests.support.waiting import scaled, wait_until

NEVER_AGAIN = 3600.0
"""An interval no test outlives: the cache reads the cluster once, at its first read."""


def cache_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "remediate-slurm-cache"]


def test_many_steps_send_one_sinfo_per_interval_not_one_per_step(slurm: SlurmCluster, breaker: CircuitBreaker) -> None:
    sent: Counter[str] = Counter()
    cache = slurm.node_cache(interval=NEVER_AGAIN, on_command=lambda tool: sent.update([tool]))
    actions = slurm_actions(slurm, cache=cache)
    nodes = ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"]
    for run_id, node in enumerate(nodes, start=100):
        ctx = step_context(node, run_id=run_id, breaker=breaker)
        assert actions["slurm.drain"].plan({}, ctx)["breaker"]["would_be"].startswith("allowed")
        assert actions["slurm.drain"].execute({}, ctx)["outcome"] == "drained"
        assert actions["slurm.resume"].plan({"scope": "any"}, ctx)["would"].startswith("resume")
    # Six drains, each planned and executed with the breaker's counts, and six resume plans: one sinfo.
    assert sent["sinfo"] == 1 == cache.status().reads
    # scontrol: per drain a fresh read for its plan, one for its execute and its update; one for the resume plan.
    assert sent["scontrol"] == 4 * len(nodes)
    assert set(sent) == {"sinfo", "scontrol"}


def test_the_cache_reads_the_cluster_each_interval_and_the_steps_never_do(
    slurm: SlurmCluster, breaker: CircuitBreaker
) -> None:
    sent: Counter[str] = Counter()
    cache = slurm.node_cache(interval=scaled(0.3), on_command=lambda tool: sent.update([tool]))
    actions = slurm_actions(slurm, cache=cache)
    for run_id, node in enumerate(["gpu-01", "gpu-02", "gpu-03"], start=200):
        actions["slurm.drain"].execute({}, step_context(node, run_id=run_id, breaker=breaker))
    wait_until(lambda: cache.status().reads >= 3, 30, interval=0.05, message="three reads of the cluster")
    cache.stop()
    assert sent["sinfo"] == cache.status().reads  # every sinfo was one of the cache's reads, one per interval


def test_a_drain_on_a_stale_view_reads_its_node_fresh(slurm: SlurmCluster, breaker: CircuitBreaker) -> None:
    slurm.drain_by_hand("gpu-03", "remediate run 7: GPUXidCritical")
    cache = slurm.node_cache(interval=NEVER_AGAIN)
    actions = slurm_actions(slurm, cache=cache)
    assert cache.census().held == {"gpu-03"} and not cache.nodes()["gpu-01"].drained  # the view, read once

    # A person drains gpu-01 and resumes gpu-03 after the view was read: it says neither.
    slurm.drain_by_hand("gpu-01", "bad DIMM, ticket 4411")
    slurm.run("scontrol", "update", "NodeName=gpu-03", "State=RESUME")
    assert cache.census().held == {"gpu-03"} and not cache.nodes()["gpu-01"].drained

    left = actions["slurm.drain"].execute({}, step_context("gpu-01", run_id=301, breaker=breaker))
    assert (left["outcome"], left["slurm_reason"]) == ("left_alone", "bad DIMM, ticket 4411")
    assert slurm.client().node("gpu-01").reason == "bad DIMM, ticket 4411"  # theirs, not taken over

    drained = actions["slurm.drain"].execute({}, step_context("gpu-03", run_id=302, breaker=breaker))
    assert drained["outcome"] == "drained"  # not "already drained by run 7", as the stale view would say
    assert slurm.client().node("gpu-03").drained_by_run == 302


def test_slurmctld_away_makes_the_view_stale_and_steps_retryable_until_it_is_back(
    slurm: SlurmCluster, breaker: CircuitBreaker
) -> None:
    cache = slurm.node_cache(interval=scaled(0.3))
    actions = slurm_actions(slurm, cache=cache)
    assert cache.census(("train",)).counted == len(slurm.train) and cache.status().fresh
    slurm.stop_controller()
    # Past its bound, and a read that failed since (one in flight when slurmctld stopped may wait it out first).
    wait_until(lambda: not cache.status().fresh and cache.status().error, 60, interval=0.05, message="a stale view")
    with pytest.raises(SlurmUnavailable, match=r"not current \(its last read is .*: sinfo --json: ") as caught:
        cache.census(wait=0)
    assert isinstance(caught.value, RetryableActionError)
    with pytest.raises(SlurmUnavailable) as caught:
        actions["slurm.drain"].execute({}, step_context("gpu-02", run_id=401, breaker=breaker))
    assert isinstance(caught.value, RetryableActionError) and breaker.status(7)["held_nodes"] == []

    slurm.start_controller()
    wait_until(lambda: cache.status().fresh, 60, interval=0.05, message="the view current again")
    assert actions["slurm.drain"].execute({}, step_context("gpu-02", run_id=401, breaker=breaker))["outcome"] == (
        "drained"
    )  # the executor's retry


def test_stop_ends_the_thread_and_a_stopped_cache_stays_stopped(slurm: SlurmCluster) -> None:
    before = cache_threads()
    cache = slurm.node_cache(interval=NEVER_AGAIN)
    cache.census()
    started = [thread for thread in cache_threads() if thread not in before]
    assert len(started) == 1 and started[0].daemon
    cache.stop()
    assert not started[0].is_alive()
    cache.start()
    assert [thread for thread in cache_threads() if thread not in before] == []


def test_the_census_follows_a_drain_by_a_person_and_by_remediate(slurm: SlurmCluster, breaker: CircuitBreaker) -> None:
    cache = slurm.node_cache(interval=scaled(0.3))
    actions = slurm_actions(slurm, partitions=("train",), cache=cache)
    assert (cache.census().counted, cache.census(("train",)).counted) == (len(slurm.nodes), len(slurm.train))
    assert cache.census(("train", "debug")).counted == len(slurm.nodes) and cache.census().held == set()

    slurm.drain_by_hand("gpu-01", "XID 79 on GPU 3")
    wait_until(lambda: cache.nodes()["gpu-01"].drained, 30, interval=0.05, message="the person's drain seen")
    assert cache.census(("train",)).held == set()  # a person's drain is not remediate's to count
    actions["slurm.drain"].execute({}, step_context("gpu-02", run_id=501, breaker=breaker))
    wait_until(lambda: cache.census(("train",)).held == {"gpu-02"}, 30, interval=0.05, message="remediate's drain")
    actions["slurm.resume"].execute({"scope": "any"}, step_context("gpu-02", run_id=501, breaker=breaker))
    wait_until(lambda: cache.census().held == set(), 30, interval=0.05, message="the resume seen")
    assert cache.census(("train",)).counted == len(slurm.train)  # drained or not, a node in scope counts


def status_of(cache: Any) -> dict[str, Any]:
    shown: dict[str, Any] = cache.status().as_dict()
    return shown


def test_the_status_says_age_bound_nodes_and_reads(slurm: SlurmCluster) -> None:
    cache = slurm.node_cache(interval=NEVER_AGAIN)
    assert status_of(cache)["synced"] is False and not cache.status().started  # nothing read: nothing polled
    cache.census()
    shown = status_of(cache)
    assert (shown["fresh"], shown["nodes"], shown["reads"], shown["max_staleness_s"]) == (
        True, len(slurm.nodes), 1, 3 * NEVER_AGAIN
    )  # fmt: skip
    assert 0 <= shown["age_s"] <= shown["max_staleness_s"] and "error" not in shown
