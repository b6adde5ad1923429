"""The shipped gpu-degraded ladder on Kubernetes through `remediate serve`, against the test API server with the
chart's RBAC: rung 1 notifies; the alert still firing after holds_for (AlertManager's re-send) cordons and taints
the node remediate.io/gpu-degraded; the resolve removes both. Only holds_for (1h) and the cooldown (30m) shrink
(tests/support/degraded.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.degraded import start_ladder
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-09"


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        cluster(api, 20)
        api.add_node(NODE)
        yield api


def taints(api: FakeKubeAPI) -> list[str]:
    return [t["key"] for t in api.node(NODE)["spec"].get("taints") or []]


def test_a_persistent_degradation_cordons_and_taints_the_node_on_rung_two_and_the_resolve_undoes_it(
    start_server: Callable[..., RemediateServer], tmp_path: Path, kube_api: FakeKubeAPI, recorder: WebhookRecorder
) -> None:
    kube_env = {
        "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
        "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
    }
    ladder = start_ladder(start_server, tmp_path, recorder, NODE, kube_env)

    first = ladder.fire()
    told = ladder.settled(first)
    assert told["status"] == "succeeded", told
    assert first["rung"] == 1 and not kube_api.node(NODE)["spec"].get("unschedulable")

    drained = ladder.settled(ladder.climb())
    assert drained["status"] == "succeeded", drained
    assert [s["name"] for s in drained["steps"]] == ["cordon", "taint", "notify"]  # slurm's are left out
    assert kube_api.node(NODE)["spec"].get("unschedulable") is True
    assert "remediate.io/gpu-degraded" in taints(kube_api)
    assert any("cordoned and tainted remediate.io/gpu-degraded" in json.dumps(r.json) for r in recorder.requests)

    undone = ladder.settled(ladder.resolve())
    assert undone["status"] == "succeeded", undone
    assert [s["name"] for s in undone["steps"]] == ["untaint", "uncordon", "notify-resolved"]
    assert not kube_api.node(NODE)["spec"].get("unschedulable")
    assert "remediate.io/gpu-degraded" not in taints(kube_api)
