"""The shipped gpu-degraded ladder on Kubernetes through `remediate serve`, against the test API server with the
chart's RBAC: rung 1 notifies; the alert still firing after holds_for (AlertManager's re-send) cordons and taints
the node remediate.io/gpu-degraded; the resolve removes both. Only holds_for (1h) and the cooldown (30m) shrink."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import notification_payload
from tests.e2e.test_slurm_degraded import downtrained
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer
from tests.support.shipped import shipped_playbook
from tests.support.waiting import wait_until

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
    playbook = shipped_playbook("gpu-degraded")
    playbook["cooldown"] = "0s"
    playbook["escalate"][0]["holds_for"] = "2s"
    playbooks = tmp_path / "degraded"
    playbooks.mkdir()
    (playbooks / "gpu-degraded.yaml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    server = start_server(
        playbooks=playbooks,
        env={
            "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
            "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
            "REMEDIATE_SINKS": json.dumps({"oncall": {"type": "webhook", "url": recorder.url}}),
        },
    )

    server.post_webhook(notification_payload(downtrained(NODE))).raise_for_status()
    first = server.wait_for_run(playbook="gpu-degraded")
    told = server.wait_for_run_status(first["run_id"], "succeeded", "failed")
    assert told["status"] == "succeeded", told
    assert first["rung"] == 1 and not kube_api.node(NODE)["spec"].get("unschedulable")

    def climbed() -> dict[str, Any] | None:  # AlertManager re-sends the alert while it fires
        server.post_webhook(notification_payload(downtrained(NODE))).raise_for_status()
        return next((e for e in server.runs(playbook="gpu-degraded") if e["rung"] == 2), None)

    second = wait_until(climbed, 30, interval=0.5)
    drained = server.wait_for_run_status(second["run_id"], "succeeded", "failed")
    assert drained["status"] == "succeeded", drained
    assert [s["name"] for s in drained["steps"]] == ["cordon", "taint", "notify"]  # slurm's are left out
    assert kube_api.node(NODE)["spec"].get("unschedulable") is True
    assert "remediate.io/gpu-degraded" in taints(kube_api)
    assert any("cordoned and tainted remediate.io/gpu-degraded" in json.dumps(r.json) for r in recorder.requests)

    server.post_webhook(notification_payload(downtrained(NODE, "resolved"))).raise_for_status()
    undo = server.wait_for_run(lambda e: e["run"]["phase"] == "resolved", playbook="gpu-degraded")
    undone = server.wait_for_run_status(undo["run_id"], "succeeded", "failed")
    assert undone["status"] == "succeeded", undone
    assert [s["name"] for s in undone["steps"]] == ["untaint", "uncordon", "notify-resolved"]
    assert not kube_api.node(NODE)["spec"].get("unschedulable")
    assert "remediate.io/gpu-degraded" not in taints(kube_api)
