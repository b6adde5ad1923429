"""Fixtures for the Kubernetes tests: the test API server (real HTTP), a kubeconfig for it, clients and actions.

The official client is configured as for a real cluster: `kubeconfig` is a file naming
http://127.0.0.1:PORT and a bearer token; nothing is patched or mocked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import action_classes
from remediate.actions.base import StepContext
from remediate.actions.k8s import KubeOptions
from remediate.actions.k8s.common import KubeAction
from remediate.breaker import CircuitBreaker
from remediate.intake.alerts import alert_ref
from remediate.kube import KubeClient
from tests.support.fake_apiserver import FakeKubeAPI

FAST = KubeOptions(api_retry_wait=0.01, reporting_instance="test-runner")
STARTS_AT = "2026-01-01T00:00:00Z"


@pytest.fixture
def kube_api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as api:
        yield api


@pytest.fixture
def kubeconfig(kube_api: FakeKubeAPI, tmp_path: Path) -> Path:
    return kube_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_client(kubeconfig: Path) -> Iterator[KubeClient]:
    client = KubeClient(kubeconfig=kubeconfig, request_timeout=0.5)
    yield client
    client.close()


def kube_actions_on(client: KubeClient, **options: Any) -> dict[str, Any]:
    """One of each k8s.* action on `client`, with fast retries (`options` replace those of FAST): every shipped
    KubeAction, found as the registry finds them, so a new one is in the family's tests without a list to extend."""
    kinds = [kind for kind in action_classes() if issubclass(kind, KubeAction)]
    return {kind.name: kind(lambda: client, replace(FAST, **options)) for kind in kinds}


@pytest.fixture
def actions(kube_client: KubeClient) -> dict[str, Any]:
    """`kube_actions_on(kube_client)`."""
    return kube_actions_on(kube_client)


def context(
    *,
    run_id: int = 7,
    step_index: int = 0,
    labels: dict[str, str] | None = None,
    breaker: CircuitBreaker | None = None,
    fingerprint: str = "f00dfeed",
    starts_at: str = STARTS_AT,
    deadline: float = float("inf"),
) -> StepContext:
    return StepContext(
        run_id=run_id,
        step_index=step_index,
        playbook="gpu-xid-quarantine",
        target=(labels or {}).get("Hostname", "node"),
        alert=alert_ref(
            {
                "labels": labels or {},
                "annotations": {},
                "fingerprint": fingerprint,
                "startsAt": starts_at,
                "status": "firing",
            }
        ),
        breaker=breaker,
        deadline=deadline,
    )


@pytest.fixture
def ctx_for(breaker: CircuitBreaker) -> Callable[..., StepContext]:
    """ctx_for(node, **kwargs): a StepContext whose alert names `node` in its Hostname label."""

    def build(node: str, **kwargs: Any) -> StepContext:
        kwargs.setdefault("breaker", breaker)
        labels = {"alertname": "GPUXidCritical", "Hostname": node, **kwargs.pop("labels", {})}
        return context(labels=labels, **kwargs)

    return build
