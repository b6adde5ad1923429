"""End to end: staged rollout through the real AlertManager, `remediate serve` and the test API server (with
the Helm chart's RBAC). Two nodes fire the same alert: gpu-node-00 (label remediate.io/wave=1, enforce) is
cordoned; gpu-node-01 (wave 2, dry-run) only gets a plan. /history shows each run with its wave and why."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.helm import ChartRbac
from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer, write_playbook

pytestmark = [pytest.mark.integration]

LABEL = "remediate.io/wave"
ACTING, SHADOW = "gpu-node-00", "gpu-node-01"
PLAYBOOK = """\
name: xid-cordon
match:
  alertname: E2ERolloutXid
target: node
steps:
  - name: cordon
    action: k8s.cordon
    with:
      note: "{{ alertname }}"
"""


@pytest.fixture
def kube_api(default_chart_rbac: ChartRbac) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        api.add_node(ACTING, labels={LABEL: "1"})
        api.add_node(SHADOW, labels={LABEL: "2"})
        cluster(api, 18, prefix="gpu-other")
        yield api


def test_wave_1_enforces_and_wave_2_only_plans_each_run_saying_its_wave(
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    playbooks_dir: Path,
    kube_api: FakeKubeAPI,
    tmp_path: Path,
) -> None:
    write_playbook(playbooks_dir, "xid-cordon", PLAYBOOK)
    server = start_server(
        env={
            "REMEDIATE_KUBECONFIG": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
            "REMEDIATE_KUBE_REQUEST_TIMEOUT": "5s",
            "REMEDIATE_ROLLOUT": json.dumps({"label": LABEL, "waves": {"1": "enforce", "2": "dry-run"}}),
        }
    )
    am = start_alertmanager(server.webhook_url)

    for node in (ACTING, SHADOW):
        am.fire({"alertname": "E2ERolloutXid", "severity": "critical", "Hostname": node}, {"summary": "XID 79"})
    acted = server.wait_for_run(status="succeeded", target=ACTING)
    planned = server.wait_for_run(status="planned", target=SHADOW)

    assert (acted["run"]["mode"], planned["run"]["mode"]) == ("enforce", "dry-run")
    assert acted["reason"].endswith(f"node {ACTING} in wave 1 (label {LABEL}=1): enforce")
    assert planned["reason"].endswith(f"node {SHADOW} in wave 2 (label {LABEL}=2): dry-run")
    assert kube_api.nodes[ACTING]["spec"].get("unschedulable") is True
    assert not kube_api.nodes[SHADOW]["spec"].get("unschedulable")
