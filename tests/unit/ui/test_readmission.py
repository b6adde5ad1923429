"""The node page's re-admission gate rows (remediate/server/ui/readmission.py) over real step results: gpu.health run
against the simulated GPU file (a soak that passes, a volatile double-bit ECC error that fails it, dcgmi absent,
passing and failing as a fake dcgmi printing a real diag's JSON), its plan for a step still running, and k8s.burnin
judging a real burn-in's figure against a baseline it meets and one it cannot (the test API server's Job)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.actions.burnin_common import NOT_CONFIGURED, BurninFailedStep
from remediate.actions.gpu_health import DiagTimedOut, NodeUnhealthy
from remediate.gpu import SimulatedBackend
from remediate.playbooks.loading import load_playbooks, parse_playbook
from remediate.server.ui.readmission import CheckRow, SoakRow, gate_playbooks, gate_views
from remediate.store import GateRun, GateStep
from tests.actions.test_k8s_burnin import PARAMS, TAINT, burn, ctx
from tests.actions.test_k8s_burnin import measured_log as measured_log  # the fixture: a real burn-in's output
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.gpu import HEALTHY, healthy_simulator, node_playbook, simulated_registry, step_context
from tests.support.shipped import PLAYBOOKS
from tests.unit.gpu.test_dcgm_diag import fake_dcgmi, fixture

T0 = 1_767_225_600.0
CHECKS = ["on_bus", "retired_pages", "row_remap", "ecc_dbe_volatile", "pcie_width", "pcie_gen", "clock_throttle",
          "nvlink_errors"]  # fmt: skip


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return healthy_simulator(tmp_path)


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    return simulated_registry(sim, db_url)


@pytest.fixture
def no_dcgm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def step(
    status: str,
    *,
    plan: Any = None,
    result: Any = None,
    error: str | None = None,
    action: str = "gpu.health",
    name: str = "gate",
    index: int = 1,
    started: float | None = T0,
    finished: float | None = T0 + 60,
) -> GateStep:
    return GateStep(index, name, action, status, plan, result, error, started, finished)


def run_of(*steps: GateStep, status: str = "succeeded") -> GateRun:
    return GateRun(41, "gpu-xid-quarantine", "resolved", status, T0 - 5, T0, T0 + 90, list(steps))


def health(registry: ActionRegistry, **params: Any) -> tuple[str, Any, str | None]:
    """gpu.health executed: (the step's status, its result, its error) as the executor records them."""
    action = registry.get("gpu.health")
    try:
        return "succeeded", action.execute(action.validate(params), step_context()), None
    except NodeUnhealthy as exc:  # a PartialFailure: the executor keeps its result with the failed step
        return "failed", exc.result, str(exc)


def test_a_passed_soak_shows_every_gpu_check_every_round_and_dcgm_not_installed(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None
) -> None:
    status, result, error = health(registry, soak="2s", every="1s", diag=1)
    (view,) = gate_views(run_of(step(status, result=result, error=error)), T0 + 100)

    assert (view.outcome, view.outcome_kind, view.status, view.run_id, view.when) == (
        "passed", "passed", "succeeded", 41, T0 + 60,
    )  # fmt: skip
    uuids = [g.uuid for g in sim.devices()]
    assert [(c.gpu, c.check) for c in view.checks] == [
        (f"GPU {i} ({u})", c) for i, u in enumerate(uuids) for c in CHECKS
    ]
    assert [c.span for c in view.checks] == [8, 0, 0, 0, 0, 0, 0, 0] * 2  # each GPU's cell spans its 8 checks
    ecc = next(c for c in view.checks if c.check == "ecc_dbe_volatile")
    assert ecc == CheckRow(f"GPU 0 ({uuids[0]})", "ecc_dbe_volatile", "ok", "ecc_dbe_volatile: 0 <= 0", 0)
    assert view.diag == "skipped: DCGM not installed (no dcgmi on this node's PATH)"
    assert [(r.at, r.verdict, r.findings) for r in view.soak] == [
        ("+0s", "ok", ""),
        ("+1s", "ok", ""),
        ("+2s", "ok", ""),
    ]
    assert view.soak_note == "3 of 3 rounds over 2s, every 1s"
    assert view.burnins == []


def test_a_failed_gate_leads_with_the_first_failing_checks_evidence(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None
) -> None:
    uuid = sim.devices()[1].uuid
    sim.update_device(uuid, health={**HEALTHY, "ecc_dbe_volatile": 2})
    status, result, error = health(registry, soak="3s", every="1s", diag=1)
    assert status == "failed"
    (view,) = gate_views(run_of(step(status, result=result, error=error), status="failed"), T0 + 100)

    assert (view.outcome, view.outcome_kind) == (f"FAILED: GPU 1 ({uuid}): ecc_dbe_volatile: 2 > 0", "failed")
    failed = [c for c in view.checks if c.verdict == "fail"]
    assert failed == [CheckRow(f"GPU 1 ({uuid})", "ecc_dbe_volatile", "fail", "ecc_dbe_volatile: 2 > 0", 0)]
    # The first round failed: the soak stopped there, and dcgmi was never started.
    assert view.soak == [SoakRow("+0s", "fail", f"GPU 1 ({uuid}): ecc_dbe_volatile: 2 > 0")]
    assert view.soak_note == "1 of 4 rounds over 3s, every 1s"
    assert view.diag == "skipped: not run: the NVML checks failed first"


def test_a_gate_that_only_reports_says_its_checks_failed_though_the_step_succeeded(
    registry: ActionRegistry, sim: SimulatedBackend, no_dcgm: None
) -> None:
    uuid = sim.devices()[0].uuid
    sim.update_device(uuid, health={**HEALTHY, "pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}})
    status, result, error = health(registry, fail_on="never")
    assert status == "succeeded"
    (view,) = gate_views(run_of(step(status, result=result, error=error)), T0)
    assert view.outcome_kind == "failed"
    lead = "FAILED checks (fail_on: never: the step itself succeeded)"
    assert view.outcome == f"{lead}: GPU 0 ({uuid}): pcie_width: pcie width x8 < max x16"


def test_the_diag_line_says_run_or_failed_from_dcgmis_own_json(
    registry: ActionRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_dcgm: None
) -> None:
    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_pass.json"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    status, result, error = health(registry, diag=1)
    (passed,) = gate_views(run_of(step(status, result=result, error=error)), T0)
    tests = len(result["diag"]["tests"])
    assert passed.diag == f"run: dcgmi diag -r 1: ok ({tests} tests, DCGM 4.1.1)"
    assert passed.soak_note == "no soak: one round of the checks"

    fake_dcgmi(bin_dir, output=fixture("dcgm4_r1_persistence_fail.json"), exit_code=226)
    status, result, error = health(registry, diag=1)
    (failed,) = gate_views(run_of(step(status, result=result, error=error)), T0)
    assert failed.diag.startswith("failed: dcgmi diag -r 1: software: GPU 1: Fail (Persistence Mode:")
    assert failed.outcome.startswith("FAILED: dcgmi diag -r 1: software: GPU 1: Fail")
    assert {c.verdict for c in failed.checks} <= {"ok", "skipped"}  # NVML's checks passed; the diag did not


def test_a_dcgmi_out_of_time_reads_as_the_gate_not_judging_the_node(
    registry: ActionRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_pass.json"), sleep_s=5)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    action = registry.get("gpu.health")
    with pytest.raises(DiagTimedOut) as caught:
        action.execute(action.validate({"diag": 3}), replace(step_context(), deadline=time.monotonic() + 6.5))
    (view,) = gate_views(run_of(step("failed", result=caught.value.result, error=str(caught.value))), T0)
    assert view.diag.startswith("could not run: dcgmi diag -r 3 gave no answer in 1.")
    assert view.outcome.startswith("FAILED: gate could not judge the node: dcgmi diag -r 3 gave no answer")


def test_a_running_gate_tells_its_round_by_the_clock_from_the_plan(registry: ActionRegistry, no_dcgm: None) -> None:
    action = registry.get("gpu.health")
    plan = action.plan(action.validate({"soak": "30m", "every": "5m", "diag": 1}), step_context())
    running = step("running", plan=plan, started=T0, finished=None)

    def outcome(now: float) -> str:
        (view,) = gate_views(run_of(running, status="running"), now)
        return view.outcome

    assert outcome(T0 + 10) == "running: round 1 of 7"
    assert outcome(T0 + 700) == "running: round 3 of 7"
    assert outcome(T0 + 5000) == "running: round 7 of 7"  # past the window: the last round, never an 8th
    (view,) = gate_views(run_of(running, status="running"), T0 + 10)
    assert (view.outcome_kind, view.checks, view.soak, view.when) == ("running", [], [], T0)
    assert view.diag == "skipped: DCGM not installed"
    assert view.soak_note == "7 rounds planned over 1800s, every 300s"


def test_a_gate_that_failed_before_judging_or_never_ran_says_why() -> None:
    no_agent = step("failed", error="no agent for node gpu-7: agent_selector found no pod", result=None)
    (view,) = gate_views(run_of(no_agent, status="failed"), T0)
    assert view.outcome == "FAILED: no agent for node gpu-7: agent_selector found no pod"
    assert (view.checks, view.diag, view.soak) == ([], "not recorded", [])

    (skipped,) = gate_views(run_of(step("skipped", started=None, finished=None), status="failed"), T0)
    assert (skipped.outcome, skipped.outcome_kind, skipped.when) == (
        "not run (skipped: an earlier step failed)", "other", T0 - 5,
    )  # fmt: skip
    (queued,) = gate_views(run_of(step("pending", started=None, finished=None), status="queued"), T0)
    assert queued.outcome == "waiting to run (the run is queued)"
    assert gate_views(None, T0) == []


@pytest.mark.parametrize("baseline", [0.0001, 1000000.0], ids=["met", "fell short"])
def test_the_burn_in_of_the_same_run_shows_its_figure_against_the_baseline(
    registry: ActionRegistry,
    kube_api: FakeKubeAPI,
    actions: dict[str, Any],
    breaker: Any,
    measured_log: str,
    baseline: float,
) -> None:
    kube_api.add_node("gpu-1")
    actions["k8s.cordon"].execute(actions["k8s.cordon"].validate({}), ctx(breaker=breaker))
    taint = actions["k8s.taint"]
    taint.execute(taint.validate({"key": TAINT, "effect": "NoExecute"}), ctx(breaker=breaker))
    met, error, _ = burn(actions["k8s.burnin"], {**PARAMS, "baselines": {"cpu": baseline}}, ctx(), kube_api,
                         succeeded=True, log=measured_log)  # fmt: skip
    if baseline < 1:
        assert error is None and met is not None
        burnin = step("succeeded", action="k8s.burnin", name="burnin", index=2, result=met)
    else:
        assert isinstance(error, BurninFailedStep)
        met = error.result
        burnin = step("failed", action="k8s.burnin", name="burnin", index=2, result=met, error=str(error))
    status, result, gate_error = health(registry)

    (view,) = gate_views(run_of(step(status, result=result, error=gate_error), burnin), T0)
    (shown,) = view.burnins
    assert (shown.step, shown.verdict) == ("burnin", "pass" if baseline < 1 else "fail")
    # The health checks passed either way: the gate's outcome is the burn-in's too.
    if baseline < 1:
        assert (view.outcome_kind, view.outcome) == ("passed", "passed")
    else:
        assert (view.outcome_kind, view.outcome) == ("failed", f"FAILED: burn-in burnin: {error}")
    assert shown.figure == f"{met['figure']:.4f}".rstrip("0").rstrip(".") + " GB/s on cpu"
    if baseline < 1:
        assert (shown.status, shown.baseline, shown.error) == (
            "succeeded",
            "baseline 0.0001 GB/s, passes from 0.0001 GB/s",
            None,
        )
    else:
        assert (shown.status, shown.baseline) == ("failed", "baseline 1000000 GB/s, passes from 800000 GB/s")
        assert shown.error == str(error)


def test_a_burn_in_that_measured_nothing_shows_its_error(registry: ActionRegistry) -> None:
    status, result, error = health(registry)
    job_failed = step("failed", action="slurm.burnin", name="burnin", index=2, error="sbatch: job 12 FAILED")
    (view,) = gate_views(run_of(step(status, result=result, error=error), job_failed, status="failed"), T0)
    assert [(b.verdict, b.figure, b.error) for b in view.burnins] == [("", "", "sbatch: job 12 FAILED")]
    assert (view.outcome_kind, view.outcome) == ("failed", "FAILED: burn-in burnin: sbatch: job 12 FAILED")


def test_a_burn_in_skipped_for_want_of_a_baseline_says_so_and_the_gate_still_passed(
    registry: ActionRegistry, actions: dict[str, Any]
) -> None:
    skipped = actions["k8s.burnin"].execute(actions["k8s.burnin"].validate(PARAMS), ctx())  # no baselines: no Job
    assert skipped["reason"] == NOT_CONFIGURED
    status, result, error = health(registry)
    burnin = step("succeeded", action="k8s.burnin", name="burnin", index=2, result=skipped)
    (view,) = gate_views(run_of(step(status, result=result, error=error), burnin), T0)
    assert [(b.status, b.verdict, b.note) for b in view.burnins] == [("succeeded", "", NOT_CONFIGURED)]
    assert (view.outcome_kind, view.outcome) == ("passed", "passed")


def test_the_gate_playbooks_are_those_with_a_gpu_health_step_in_any_phase_or_rung() -> None:
    shipped = load_playbooks(PLAYBOOKS, default_registry()).playbooks
    assert gate_playbooks(shipped) == ("gpu-xid-quarantine",)  # its first rung's on_resolved: the gate
    registry = default_registry()
    written = [
        parse_playbook(node_playbook("firing-gate", "A", {"action": "gpu.health"}), registry),
        parse_playbook(
            node_playbook(
                "resolve-gate", "B", {"action": "log", "with": {"message": "m"}}, on_resolved=[{"action": "gpu.health"}]
            ),
            registry,
        ),
        parse_playbook(node_playbook("no-gate", "C", {"action": "log", "with": {"message": "m"}}), registry),
    ]
    assert gate_playbooks(written) == ("firing-gate", "resolve-gate")
