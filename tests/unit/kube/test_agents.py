"""Issue 15, finding 12c: agent discovery on the test API server never picks a pod its DaemonSet does not own.

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

from remediate.agent_protocol import AgentNotFound
from remediate.kube.agents import KubernetesAgents
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
