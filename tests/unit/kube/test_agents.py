"""Agent discovery on the test API server never picks a pod its DaemonSet does not own.

The official client talks real HTTP to tests/support/fake_apiserver.py: an impostor pod with the agent's
labels on the target node (created later, so it would win the "newest Ready pod" choice) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from remediate.agentwire.protocol import AgentNotFound
from remediate.kube.agents import DiscoveryUnavailable, KubernetesAgents
from tests.support.fake_apiserver import FakeKubeAPI

SELECTOR = "app.kubernetes.io/component=agent"
LABELS = {"app.kubernetes.io/component": "agent"}
NAMESPACE = "gpu-ops"
DAEMONSET = "rel-remediate-agent"
EARLIER, LATER = "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[Any]:
    api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    yield k8s.CoreV1Api(api_client)
    api_client.close()


def running_pod(
    kube_api: FakeKubeAPI, name: str, ip: str, *, owner: str | None, owner_name: str | None, created: str
) -> None:
    kube_api.add_pod(NAMESPACE, name, "gpu-node-1", owner=owner, owner_name=owner_name, labels=LABELS)
    with kube_api.lock:
        kube_api.pods[(NAMESPACE, name)]["metadata"]["creationTimestamp"] = created
        kube_api.pods[(NAMESPACE, name)]["status"] = {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        }


@pytest.mark.parametrize(
    ("owner", "owner_name"),
    [
        pytest.param(None, None, id="no-owner"),
        pytest.param("ReplicaSet", "evil-deployment-1234", id="a-replicaset"),
        pytest.param("DaemonSet", "another-daemonset", id="another-daemonset"),
    ],
)
def test_an_impostor_pod_with_the_agent_labels_is_never_chosen(
    kube_api: FakeKubeAPI, core: Any, owner: str | None, owner_name: str | None
) -> None:
    real = "rel-remediate-agent-x7k2p"
    running_pod(kube_api, real, "10.1.0.4", owner="DaemonSet", owner_name=DAEMONSET, created=EARLIER)
    # Newer than the real agent pod: discovery's "newest Ready pod" would pick it on labels alone.
    running_pod(kube_api, "zz-impostor", "10.66.6.6", owner=owner, owner_name=owner_name, created=LATER)
    agents = KubernetesAgents(SELECTOR, NAMESPACE, 9096, daemonset=DAEMONSET, api=core)

    assert agents.url_for("gpu-node-1") == "http://10.1.0.4:9096"


def test_a_node_with_only_an_impostor_pod_has_no_agent_and_says_why(kube_api: FakeKubeAPI, core: Any) -> None:
    running_pod(kube_api, "zz-impostor", "10.66.6.6", owner="ReplicaSet", owner_name="evil", created=LATER)
    agents = KubernetesAgents(SELECTOR, NAMESPACE, 9096, daemonset=DAEMONSET, api=core)

    with pytest.raises(AgentNotFound, match="zz-impostor is not owned by DaemonSet rel-remediate-agent") as refused:
        agents.url_for("gpu-node-1")

    assert not refused.value.retryable


def test_while_the_api_cannot_answer_the_agent_found_last_is_still_used_for_a_while(
    kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """In a cluster the server finds agents through the API: with the API down past the 30 s cache, every
    node step (a training rollback) failed with "cannot list agent pods". Answers are signed by the node's
    agent, so its last address is safe to use for a while; an answer of the API that there is no agent is not
    overruled."""
    running_pod(kube_api, "rel-remediate-agent-x7k2p", "10.1.0.4", owner="DaemonSet", owner_name=DAEMONSET,
                created=EARLIER)  # fmt: skip
    now = [1000.0]
    api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    try:
        agents = KubernetesAgents(
            SELECTOR, NAMESPACE, 9096, daemonset=DAEMONSET, api=k8s.CoreV1Api(api_client), clock=lambda: now[0]
        )
        assert agents.url_for("gpu-node-1") == "http://10.1.0.4:9096"

        kube_api.inject("status", method="GET", path="/pods", status=503)  # the API is failing
        now[0] += agents.ttl + 1
        assert agents.url_for("gpu-node-1") == "http://10.1.0.4:9096"
        assert agents.url_for("gpu-node-1") == "http://10.1.0.4:9096"  # not refreshed: it stays as old as it is
        now[0] += agents.stale_max
        with pytest.raises(DiscoveryUnavailable, match="cannot list agent pods on node 'gpu-node-1'") as too_old:
            agents.url_for("gpu-node-1")
        assert too_old.value.retryable

        kube_api.clear_faults()  # the API answers again: the pod is gone, so is the agent
        agents.url_for("gpu-node-1")
        kube_api.pods.pop((NAMESPACE, "rel-remediate-agent-x7k2p"))
        now[0] += agents.ttl + 1
        with pytest.raises(AgentNotFound, match="no Ready agent pod on node 'gpu-node-1'"):
            agents.url_for("gpu-node-1")
    finally:
        api_client.close()
