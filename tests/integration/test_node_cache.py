"""The watch-fed node cache (remediate.kube.nodecache) against the test API server: real LIST pages and WATCH
streams through the official client, 410s, staleness, and the rule that a stale view never changes a wrong node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.k8s.common import NodeOutOfScope
from remediate.breaker import BreakerLimits, memory_breaker
from remediate.kube import CORDONED_BY_RUN, Census, KubeClient, KubeUnavailable, NodeCache
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.kube import context, kube_actions_on
from tests.support.steps import run
from tests.support.waiting import wait_until


@pytest.fixture
def make_cache(kube_client: KubeClient) -> Iterator[Callable[..., NodeCache]]:
    made: list[NodeCache] = []

    def make(**options: Any) -> NodeCache:
        cache = NodeCache(kube_client, **options)
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.stop()


def _seen(cache: NodeCache, check: Callable[[dict[str, Any]], bool], what: str) -> None:
    wait_until(lambda: check(dict(cache.nodes())), 5, message=f"the cache never saw {what}")


def test_the_cache_lists_in_pages_then_follows_the_watch(kube_api: FakeKubeAPI, make_cache: Any) -> None:
    cluster(kube_api, 5)
    kube_api.add_node(
        "gpu-x", labels={"pool": "a"}, annotations={CORDONED_BY_RUN: "3", "kubelet.example/images": "x" * 5000}
    )
    cache = make_cache(page_size=2)

    nodes = cache.nodes()

    assert sorted(nodes) == [*(f"gpu-node-0{i}" for i in range(5)), "gpu-x"]
    assert kube_api.request_count(verb="list", resource="nodes") == 3  # 6 nodes, 2 a page
    # Only remediate's own annotations are kept: a node costs what remediate reads, not what the kubelet wrote.
    assert dict(nodes["gpu-x"].annotations) == {CORDONED_BY_RUN: "3"}
    assert nodes["gpu-x"].labels["pool"] == "a"

    kube_api.add_node("gpu-new")
    kube_api.update_node("gpu-x", lambda n: n["spec"].update(unschedulable=True))
    kube_api.delete_node("gpu-node-00")
    _seen(cache, lambda n: "gpu-new" in n and "gpu-node-00" not in n and n["gpu-x"].unschedulable, "the changes")

    assert kube_api.request_count(verb="list", resource="nodes") == 3  # the watch, no new list
    assert kube_api.request_count(verb="watch", resource="nodes") >= 1
    assert cache.nodes()["gpu-x"].held_by_remediate  # cordoned + remediate's mark: the breaker counts it


def test_a_watch_whose_resource_version_is_too_old_relists(kube_api: FakeKubeAPI, make_cache: Any) -> None:
    cluster(kube_api, 3)
    cache = make_cache()
    cache.nodes()
    kube_api.stall_watches = True  # the stream falls behind: the next change reaches it only after compaction
    kube_api.add_node("gpu-late")
    kube_api.compact()

    _seen(cache, lambda n: "gpu-late" in n, "the node added while the watch was behind")

    assert cache.status().lists == 2
    assert kube_api.request_count(verb="list", resource="nodes") == 2


def test_the_census_follows_the_watch_and_a_relist(kube_api: FakeKubeAPI, make_cache: Any) -> None:
    """The breaker's counts are kept as events arrive (a run does not pass over the nodes), and stay right
    through every kind of event and a relist."""
    for index in range(4):
        kube_api.add_node(f"gpu-{index}", labels={"pool": "gpu"})
    kube_api.add_node("cpu-0", labels={"pool": "cpu"})
    cache = make_cache()

    assert cache.census() == Census(5, frozenset())
    assert cache.census("pool=gpu") == Census(4, frozenset())

    def mark(node: dict[str, Any]) -> None:  # a cordon as remediate writes it
        node["spec"]["unschedulable"] = True
        node["metadata"].setdefault("annotations", {})[CORDONED_BY_RUN] = "7"

    kube_api.update_node("gpu-1", mark)
    kube_api.update_node("cpu-0", mark)
    kube_api.update_node("gpu-2", lambda n: n["metadata"]["labels"].update(pool="cpu"))  # leaves the pool
    kube_api.add_node("gpu-9", labels={"pool": "gpu"})
    kube_api.delete_node("gpu-0")
    wait_until(lambda: cache.census("pool=gpu") == Census(3, frozenset({"gpu-1", "cpu-0"})), 5)
    assert cache.census() == Census(5, frozenset({"gpu-1", "cpu-0"}))

    kube_api.stall_watches = True  # these changes reach the cache only through a relist
    kube_api.update_node("gpu-1", lambda n: n["spec"].update(unschedulable=False))
    kube_api.add_node("gpu-10", labels={"pool": "gpu"})
    kube_api.compact()
    wait_until(lambda: cache.census("pool=gpu") == Census(4, frozenset({"cpu-0"})), 5)
    assert cache.status().lists == 2


def test_stop_ends_a_watch_on_a_quiet_cluster_at_once(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A watch of a cluster where nothing changes carries nothing for its 60 s; stop() (a client's close) must
    not wait for that: a CLI command or a test would keep a thread retrying against a server that is gone."""
    cluster(kube_api, 2)
    kube_api.bookmark_interval = None  # not even a bookmark
    before = set(threading.enumerate())
    client = KubeClient(kubeconfig=kubeconfig)
    client.node_cache().nodes()
    wait_until(lambda: kube_api.request_count(verb="watch", resource="nodes") == 1, 5)

    client.close()

    assert not [t for t in set(threading.enumerate()) - before if t.name == "remediate-node-cache"]


def test_a_continue_token_that_expired_between_pages_starts_the_list_again(
    kube_api: FakeKubeAPI, make_cache: Any
) -> None:
    cluster(kube_api, 5)

    def churn(api: FakeKubeAPI) -> None:
        api.add_node(f"gpu-churn-{len(api.nodes)}")
        api.compact()

    # Page 1 and page 2 of the first list each find the cluster changed and compacted: page 2's token is gone.
    kube_api.before("GET", r"^/api/v1/nodes$", churn, times=2)
    nodes = make_cache(page_size=3).nodes()

    assert len(nodes) == 7
    codes = [code for method, path, code in kube_api.requests if method == "GET" and path == "/api/v1/nodes"]
    assert codes[:4] == [200, 410, 200, 200]


def test_every_list_of_the_facade_is_paginated(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    """PAGE_SIZE (500) a request: 501 nodes are 2 LISTs, 501 pods on one node are 2 LISTs."""
    kube_client = KubeClient(kubeconfig=kubeconfig, request_timeout=30)  # pages of 500 on a busy test machine
    names = cluster(kube_api, 501)
    for index in range(501):
        kube_api.add_pod("ml", f"job-{index}", names[0])

    assert len(kube_client.list_nodes()) == 501
    assert len(kube_client.pods_on_node(names[0])) == 501
    assert kube_client.list_pdbs() == []

    assert kube_api.request_count(verb="list", resource="nodes") == 2
    assert kube_api.request_count(verb="list", resource="pods") == 2
    assert kube_api.request_count(verb="list", resource="poddisruptionbudgets") == 1
    pages = [path for method, path, _ in kube_api.requests if method == "GET" and path.endswith("/pods")]
    assert len(pages) == 2
    kube_client.close()


def test_the_staleness_bound_is_explicit_and_a_stale_view_is_refused(kube_api: FakeKubeAPI, make_cache: Any) -> None:
    cluster(kube_api, 2)
    kube_api.bookmark_interval = 0.05
    cache = make_cache(max_staleness=0.5)
    cache.nodes()
    time.sleep(0.7)
    assert cache.status().fresh  # a quiet cluster: the bookmarks keep the view current

    kube_api.stall_watches = True  # a stream that stopped delivering, bookmarks included
    wait_until(lambda: not cache.status().fresh, 3, message="the cache never went stale")
    status = cache.status().as_dict()
    # age_s is rounded to the millisecond: a view just past its bound may show 0.5.
    assert status["fresh"] is False and status["age_s"] >= 0.5 and status["max_staleness_s"] == 0.5
    with pytest.raises(KubeUnavailable, match=r"the node cache is not current \(its last update is \d+s old"):
        cache.nodes(wait=0.1)

    kube_api.stall_watches = False
    assert len(cache.nodes(wait=3)) == 2


def test_a_cordon_on_a_stale_view_reads_the_node_fresh_and_refuses_one_out_of_scope(
    kube_api: FakeKubeAPI, kube_client: KubeClient
) -> None:
    kube_api.add_node("gpu-1", labels={"pool": "gpu"})
    kube_api.add_node("gpu-2", labels={"pool": "gpu"})
    actions = kube_actions_on(kube_client, scope_selector="pool=gpu", node_selector="pool=gpu")
    breaker = memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10))
    assert run(actions["k8s.cordon"], {}, context(labels={"Hostname": "gpu-2"}, breaker=breaker, run_id=1))
    kube_api.stall_watches = True
    # The node leaves the scope after the cache last heard: the view still has it in the pool.
    kube_api.update_node("gpu-1", lambda n: n["metadata"]["labels"].update(pool="cpu"))
    assert kube_client.node_cache().nodes()["gpu-1"].labels["pool"] == "gpu"

    with pytest.raises(NodeOutOfScope, match="out of scope"):
        run(actions["k8s.cordon"], {}, context(labels={"Hostname": "gpu-1"}, breaker=breaker, run_id=2))

    assert not kube_api.node("gpu-1")["spec"].get("unschedulable")


def test_a_cordon_on_a_stale_view_writes_only_on_the_version_it_read(
    kube_api: FakeKubeAPI, kube_client: KubeClient
) -> None:
    kube_api.add_node("gpu-1")
    actions = kube_actions_on(kube_client)
    breaker = memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=10))
    kube_client.node_cache().nodes()
    kube_api.stall_watches = True

    def cordoned_elsewhere(api: FakeKubeAPI) -> None:
        api.update_node("gpu-1", lambda n: n["spec"].update(unschedulable=True))

    # Someone else cordons between remediate's GET and its PATCH: the conditional write is refused (409) and
    # the re-read finds a node cordoned by someone else, which remediate leaves as it is.
    kube_api.before("PATCH", r"/nodes/gpu-1$", cordoned_elsewhere)
    result = run(actions["k8s.cordon"], {}, context(labels={"Hostname": "gpu-1"}, breaker=breaker))

    assert [code for m, _, code in kube_api.requests if m == "PATCH"] == [409]
    assert result["outcome"] == "left_alone"
    assert CORDONED_BY_RUN not in (kube_api.node("gpu-1")["metadata"].get("annotations") or {})


def test_with_a_warm_cache_a_cordon_makes_no_list_whatever_the_cluster_size(
    kube_api: FakeKubeAPI, kube_client: KubeClient
) -> None:
    actions = kube_actions_on(kube_client)
    breaker = memory_breaker(BreakerLimits(max_fraction=1.0, max_nodes=1000))
    per_size = {}
    for size in (10, 300):
        names = cluster(kube_api, size, prefix=f"size{size}")
        wait_until(lambda n=names[-1]: n in kube_client.node_cache().nodes(), 5)
        lists, gets = kube_api.request_count(verb="list"), kube_api.request_count(verb="get")
        result = run(actions["k8s.cordon"], {}, context(labels={"Hostname": names[-1]}, breaker=breaker))
        assert result["outcome"] == "cordoned"
        per_size[size] = (kube_api.request_count(verb="list") - lists, kube_api.request_count(verb="get") - gets)
        assert result["breaker"]["cluster_nodes"] >= size

    assert per_size[10] == per_size[300]
    assert per_size[10][0] == 0  # no LIST at all: the cluster's size is the cache's
    assert kube_api.request_count(verb="list", resource="nodes") == 1  # the cache's first list, once


def test_readyz_and_metrics_show_the_node_cache_once_a_step_read_it(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    from remediate.config.settings import Settings
    from remediate.server import build_services, create_app

    cluster(kube_api, 3)
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    settings = Settings.of(
        token="w-token-0123456789ab",
        playbooks=playbooks,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        kubeconfig=kubeconfig,
        kube_request_timeout=5,
    )
    services = build_services(settings)
    app = create_app(settings, services=services).test_client()
    try:
        assert "node_cache" not in app.get("/readyz").get_json()  # nothing read it: nothing is watched
        assert kube_api.request_count(verb="watch") == 0
        assert services.kube is not None
        # The actions and the waves share the process's one client, so one cache and one watch.
        assert services.engine.registry.get("k8s.cordon").client is services.kube  # type: ignore[attr-defined]
        services.kube.node_cache().nodes()

        shown = app.get("/readyz").get_json()["node_cache"]
        metrics = app.get("/metrics").get_data(as_text=True)
    finally:
        services.kube.close()
        services.store.close()

    assert (shown["fresh"], shown["nodes"], shown["max_staleness_s"], shown["lists"]) == (True, 3, 120.0, 1)
    assert 0 <= shown["age_s"] < 120
    assert "remediate_node_cache_age_seconds " in metrics
    assert "remediate_node_cache_max_staleness_seconds 120.0" in metrics
