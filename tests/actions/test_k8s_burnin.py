"""k8s.burnin through the official client against the test API server (tests/support/fake_apiserver.py): a Job
pinned to the node remediate cordoned and tainted, tolerating exactly its taints, whose completion the test
plays with the log of a real run of `python -m remediate.burnin` (gloo on this host's CPUs); the figure passes a
baseline it meets and fails one it cannot, a failed Job fails the step with its reason, a retried step finds its
Job instead of creating a second, a node remediate did not take out of service gets no Job, and the Helm chart's
RBAC grants the Job in the release's namespace and nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.actions.burnin_common import BurninFailedStep
from remediate.actions.k8s.common import digest
from remediate.errors import ActionError
from remediate.kube import OWNER, KubeClient, KubeError
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.helm import NAMESPACE, ChartRbac
from tests.support.kube import context, kube_actions_on
from tests.support.waiting import scaled, wait_until

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"image": "registry.example/remediate-burnin:1.0", "python": "/usr/bin/python3", "megabytes": 4,
          "iters": 5, "namespace": "remediate", "timeout": 60}  # fmt: skip
TAINT = "remediate.io/gpu-xid"


@pytest.fixture(scope="module")
def measured_log() -> str:
    """The output of a real burn-in on this host, as the Job's pod would log it."""
    done = subprocess.run([sys.executable, "-m", "remediate.burnin", "--megabytes", "4", "--iters", "5"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=scaled(120), check=True)  # fmt: skip
    return done.stderr + done.stdout


def ctx(run_id: int = 7, breaker: Any = None) -> StepContext:
    return context(run_id=run_id, labels={"alertname": "GPUXidCritical", "Hostname": "gpu-1"}, breaker=breaker)


@pytest.fixture
def quarantined(kube_api: FakeKubeAPI, actions: dict[str, Any], breaker: Any) -> str:
    kube_api.add_node("gpu-1")
    kube_api.add_node("gpu-2")
    actions["k8s.cordon"].execute(actions["k8s.cordon"].validate({}), ctx(breaker=breaker))
    taint = actions["k8s.taint"]
    taint.execute(taint.validate({"key": TAINT, "effect": "NoExecute"}), ctx(breaker=breaker))
    return "gpu-1"


def burn(
    action: Any,
    params: dict[str, Any],
    step: StepContext,
    api: FakeKubeAPI,
    *,
    succeeded: bool,
    log: str,
    namespace: str = "remediate",
) -> tuple[dict[str, Any] | None, BaseException | None, dict[str, Any]]:
    """The step run in a thread while the test plays the Job controller once its Job exists: (result, error, Job)."""
    action.poll_interval = 0.05
    outcome: dict[str, Any] = {}

    def step_thread() -> None:
        try:
            outcome["result"] = action.execute(action.validate(params), step)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=step_thread)
    thread.start()
    wait_until(lambda: bool(api.jobs) or not thread.is_alive(), 10, message="the burn-in Job created")
    assert api.jobs, f"no Job created: {outcome.get('error')!r}"
    (ns, name), *_ = api.jobs
    job = api.job(ns, name)
    assert job is not None and ns == namespace
    api.finish_job(ns, name, succeeded=succeeded, log=log)
    thread.join(scaled(20))
    return outcome.get("result"), outcome.get("error"), job


def test_a_job_pinned_to_the_node_tolerating_its_taints_passes_a_baseline_it_meets(
    kube_api: FakeKubeAPI, actions: dict[str, Any], quarantined: str, measured_log: str
) -> None:
    result, error, job = burn(actions["k8s.burnin"], {**PARAMS, "baselines": {"cpu": 0.0001}}, ctx(), kube_api,
                              succeeded=True, log=measured_log)  # fmt: skip
    assert error is None, error
    assert result is not None and result["verdict"] == "pass" and result["model"] == "cpu"
    assert result["figure"] > 0.0001 and result["baseline"] == 0.0001 and result["measurement"]["correct"]
    print(f"\nk8s.burnin gpu-1: {result['figure']} GB/s vs baseline {result['baseline']}: {result['verdict']}")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-1" and pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert {"key": TAINT, "operator": "Exists", "effect": "NoExecute"} in pod["tolerations"]
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert len(pod["tolerations"]) == 2  # remediate's own taints only, never a blanket toleration
    assert pod["containers"][0]["command"] == [
        "/usr/bin/python3", "-m", "remediate.burnin", "--backend", "gloo", "--ranks", "2", "--megabytes", "4",
        "--iters", "5", "--seconds", "60",
    ]  # fmt: skip
    assert job["spec"]["activeDeadlineSeconds"] == 60 and kube_api.node("gpu-1")["spec"]["unschedulable"] is True


def test_a_figure_below_its_baseline_fails_the_step_with_figure_baseline_and_verdict(
    kube_api: FakeKubeAPI, actions: dict[str, Any], quarantined: str, measured_log: str
) -> None:
    _, error, _ = burn(actions["k8s.burnin"], {**PARAMS, "baselines": {"cpu": 1000000}}, ctx(), kube_api,
                       succeeded=True, log=measured_log)  # fmt: skip
    assert isinstance(error, BurninFailedStep), error
    assert error.result["verdict"] == "fail" and error.result["baseline"] == 1000000
    assert 0 < error.result["figure"] < error.result["threshold"] == 800000


def test_a_failed_job_fails_the_step_with_its_reason_and_log(
    kube_api: FakeKubeAPI, actions: dict[str, Any], quarantined: str
) -> None:
    _, error, _ = burn(actions["k8s.burnin"], {**PARAMS, "baselines": {"cpu": 1}}, ctx(), kube_api,
                       succeeded=False, log="burn-in failed: rank 1: exit status 1\n")  # fmt: skip
    assert isinstance(error, ActionError) and not isinstance(error, BurninFailedStep)
    assert "BackoffLimitExceeded" in str(error) and "rank 1: exit status 1" in str(error)


def test_a_retried_step_waits_for_its_job_instead_of_creating_a_second(
    kube_api: FakeKubeAPI, actions: dict[str, Any], quarantined: str, measured_log: str
) -> None:
    params = {**PARAMS, "baselines": {"cpu": 0.0001}}
    burn(actions["k8s.burnin"], params, ctx(), kube_api, succeeded=True, log=measured_log)
    again = actions["k8s.burnin"].execute(actions["k8s.burnin"].validate(params), ctx())
    assert again["created"].startswith("earlier") and again["verdict"] == "pass"
    assert len(kube_api.jobs) == 1 and kube_api.request_count(verb="create", resource="jobs") == 2


def test_a_node_remediate_did_not_take_out_of_service_gets_no_job(
    kube_api: FakeKubeAPI, actions: dict[str, Any]
) -> None:
    kube_api.add_node("gpu-1")
    action = actions["k8s.burnin"]
    params = action.validate({**PARAMS, "baselines": {"cpu": 1}})
    assert action.plan(params, ctx())["can_act"] is False
    with pytest.raises(ActionError, match="not taken out of service by remediate"):
        action.execute(params, ctx())
    assert kube_api.jobs == {}


def test_a_node_handed_to_another_system_gets_no_job_in_a_run_but_does_on_its_release(
    kube_api: FakeKubeAPI, actions: dict[str, Any], quarantined: str, measured_log: str
) -> None:
    """Its owner tests it; `remediate node release` (for_release) takes it back, so its burn-in runs there, as a
    Job of its own (named from the release's start, not from a run)."""
    kube_api.update_node(quarantined, lambda node: node["metadata"]["annotations"].update({OWNER: "breakfix"}))
    action = actions["k8s.burnin"]
    params = action.validate({**PARAMS, "baselines": {"cpu": 0.0001}})
    assert action.plan(params, ctx())["can_act"] is False
    with pytest.raises(ActionError, match="breakfix"):
        action.execute(params, ctx())
    assert kube_api.jobs == {}

    releasing = action.for_release(datetime(2026, 12, 3, 18, 0, 5, tzinfo=UTC))
    result, error, job = burn(releasing, {**PARAMS, "baselines": {"cpu": 0.0001}}, ctx(), kube_api, succeeded=True,
                              log=measured_log)  # fmt: skip
    assert error is None and result is not None and result["verdict"] == "pass", error
    assert job["metadata"]["name"] == f"remediate-burnin-release-20261203180005-{digest(quarantined)}"


@pytest.mark.parametrize("param", ["image", "namespace", "python", "baselines"])
def test_no_part_of_the_job_may_come_from_an_alert(actions: dict[str, Any], param: str) -> None:
    written = {**PARAMS, "baselines": {"cpu": 1}, param: "{{ labels.image }}"}
    errors = actions["k8s.burnin"].schema.check_static(written)
    assert any(f"parameter {param!r} must be written in the playbook" in error for error in errors), errors


def test_the_charts_rbac_grants_the_burnin_in_the_release_namespace_only(
    default_chart_rbac: ChartRbac, tmp_path: Path, measured_log: str, breaker: Any
) -> None:
    with FakeKubeAPI() as api:
        api.authorize_as(default_chart_rbac.objects, default_chart_rbac.service_account)
        client = KubeClient(kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"), request_timeout=2)
        try:
            actions = kube_actions_on(client)
            api.add_node("gpu-1")
            actions["k8s.cordon"].execute({}, ctx(breaker=breaker))
            params = {**PARAMS, "namespace": NAMESPACE, "baselines": {"cpu": 0.0001}}
            result, error, _ = burn(actions["k8s.burnin"], params, ctx(), api, succeeded=True, log=measured_log,
                                    namespace=NAMESPACE)  # fmt: skip
            assert error is None and result is not None and result["verdict"] == "pass", error
            elsewhere = actions["k8s.burnin"].validate({**params, "namespace": "ml"})
            with pytest.raises(KubeError, match="forbidden"):
                actions["k8s.burnin"].execute(elsewhere, ctx(run_id=8))
        finally:
            client.close()
