"""doctor's cluster checks: Kubernetes permissions asked of the API server's authorizer (SelfSubjectAccessReview
on the fake API server's RBAC), Slurm's controller and user on the real slurmctld (tests/support/slurm.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediate.doctor import Status, cluster
from remediate.kube import KubeClient
from remediate.slurm.client import SlurmClient
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.integration]

ACCOUNT = ("gpu-ops", "remediate")
NODE_VERBS = ["get", "list", "watch", "patch"]


def rbac(*, node_verbs: list[str], events: bool = True) -> list[dict[str, Any]]:
    """A ClusterRole on nodes (and pods, evictions, budgets) and a Role for events in default, bound to ACCOUNT."""
    subject = [{"kind": "ServiceAccount", "namespace": ACCOUNT[0], "name": ACCOUNT[1]}]
    objects: list[dict[str, Any]] = [
        {
            "kind": "ClusterRole",
            "metadata": {"name": "remediate"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": node_verbs},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
            ],
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "remediate"},
            "roleRef": {"kind": "ClusterRole", "name": "remediate"},
            "subjects": subject,
        },
    ]
    if events:
        objects += [
            {
                "kind": "Role",
                "metadata": {"name": "events", "namespace": "default"},
                "rules": [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}],
            },
            {
                "kind": "RoleBinding",
                "metadata": {"name": "events", "namespace": "default"},
                "roleRef": {"kind": "Role", "name": "events"},
                "subjects": subject,
            },
        ]
    return objects


def test_kubernetes_ok_when_rbac_grants_every_verb_the_loaded_steps_use(
    kube_api: FakeKubeAPI, kube_client: KubeClient
) -> None:
    kube_api.authorize_as(rbac(node_verbs=NODE_VERBS), ACCOUNT)

    (check,) = cluster.check_kube(kube_client, ["k8s.cordon", "k8s.drain", "log"])

    assert check.status is Status.OK, check
    assert check.detail.endswith("may do all 9 things k8s.cordon, k8s.drain need")


def test_kubernetes_fails_naming_each_verb_rbac_does_not_grant(kube_api: FakeKubeAPI, kube_client: KubeClient) -> None:
    kube_api.authorize_as(rbac(node_verbs=["get", "list", "watch"], events=False), ACCOUNT)
    before = {name: dict(node) for name, node in kube_api.nodes.items()}

    (check,) = cluster.check_kube(kube_client, ["k8s.cordon"])

    assert check.status is Status.FAIL
    assert "may not create events.k8s.io/events in default, patch nodes (for k8s.cordon)" in check.detail
    assert kube_api.nodes == before  # asking changed nothing


def test_kubernetes_is_not_checked_when_no_loaded_step_uses_it(kube_client: KubeClient) -> None:
    assert cluster.check_kube(kube_client, ["log", "notify", "slurm.drain"]) == []
    (check,) = cluster.check_kube(KubeClient(), ["k8s.cordon"])
    assert check.status is Status.FAIL and "no cluster is configured" in check.detail


def test_slurm_ok_as_root_the_controllers_slurm_user(slurm: SlurmCluster) -> None:
    (check,) = cluster.check_slurm(slurm.client(), ["slurm.drain", "slurm.resume"])

    assert check.status is Status.OK, check
    assert "is UP" in check.detail and "running as root, SlurmUser root" in check.detail


def test_slurm_warns_for_a_user_slurm_may_not_let_update_nodes(
    slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster, "_user", lambda: "alice")

    (check,) = cluster.check_slurm(slurm.client(), ["slurm.drain"])

    assert check.status is Status.WARN
    assert check.fix.startswith("give alice AdminLevel=Operator")


def test_slurm_fails_when_slurmctld_does_not_answer(slurm: SlurmCluster, tmp_path: Path) -> None:
    slurm.stop_controller()  # the `slurm` fixture starts it again

    (check,) = cluster.check_slurm(slurm.client(timeout=5), ["slurm.drain"])

    assert check.status is Status.FAIL
    assert check.detail.startswith("slurmctld does not answer: scontrol ping")
    (unset,) = cluster.check_slurm(SlurmClient(), ["slurm.drain"])
    assert unset.status is Status.FAIL and "slurm_conf is not set" in unset.detail
