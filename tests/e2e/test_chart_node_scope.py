"""Which nodes the chart lets the k8s.* actions (cordon, taint, drain) act on: by default only the GPU nodes the
agents run on (agent.nodeSelector, the GPU operator's label), so a GPU-less node an alert names is out of
scope without the user having to know the setting; a node selector the user sets (of the k8s actions or of the
breaker, which the actions fall back to) is theirs, untouched. Read with remediate's own settings loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remediate.config.settings import Settings, read_config_file
from tests.support.helm import RELEASE, Helm, by_kind

CONFIG = f"{RELEASE}-remediate-config"


def _kube(helm: Helm, tmp_path: Path, values: dict[str, Any] | None = None) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(by_kind(helm.objects(values or {}), "ConfigMap", CONFIG)["data"]["config.yaml"])
    return Settings.of(**read_config_file(path)).kube


def test_by_default_the_kubernetes_actions_act_only_on_the_gpu_nodes_the_agents_run_on(
    helm: Helm, tmp_path: Path
) -> None:
    kube = _kube(helm, tmp_path)
    assert kube.node_selector == "nvidia.com/gpu.present=true"


def test_the_default_follows_the_agents_node_selector(helm: Helm, tmp_path: Path) -> None:
    kube = _kube(helm, tmp_path, {"agent": {"nodeSelector": {"pool": "a100", "nvidia.com/gpu.present": "true"}}})
    assert kube.node_selector == "nvidia.com/gpu.present=true,pool=a100"


def test_a_node_selector_the_user_sets_is_kept(helm: Helm, tmp_path: Path) -> None:
    kube = _kube(helm, tmp_path, {"server": {"config": {"kube_node_selector": "pool=h100"}}})
    assert kube.node_selector == "pool=h100"
    # The breaker's selector alone: the actions fall back to it (docs/kubernetes.md), so the chart adds none.
    kube = _kube(helm, tmp_path, {"server": {"config": {"breaker_node_selector": "pool=h100"}}})
    assert (kube.node_selector, kube.breaker.node_selector) == (None, "pool=h100")
