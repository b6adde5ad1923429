"""gpu.health's soak (remediate/actions/gpu_health_soak.py): the NVML checks repeated over a window on a simulated
GPU file, every round kept, the first failing round failing the step — a fault that comes back mid-window
(a volatile DBE counted again) is caught though the first round passed; a soak longer than the step's timeout is
refused before it starts; a stopping server ends it. Windows are seconds here (the shipped ladder soaks 30m)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.actions.gpu_health import DIAG_MARGIN_S, NodeUnhealthy
from remediate.actions.gpu_health_soak import UNLISTED, Round, Soak, SoakStopped, SoakTooLong, run_soak
from remediate.agent.service import AgentService
from remediate.executor import readmission
from remediate.executor.agent_calls import AgentRunner, StaticAgents
from remediate.executor.dispatch import Dispatch
from remediate.executor.readmission import CheckVerdict, Gate, GateOptions, GateRound
from remediate.gpu import SimulatedBackend, dcgm_diag
from tests.support.agent import AGENT_TOKEN, agent_settings, serve_agent
from tests.support.gpu import HEALTHY, healthy_simulator, simulated_registry, step_context
from tests.support.waiting import scaled
from tests.unit.gpu.test_dcgm_diag import fake_dcgmi, fixture


@pytest.fixture
def sim(tmp_path: Path) -> SimulatedBackend:
    return healthy_simulator(tmp_path)


@pytest.fixture
def registry(sim: SimulatedBackend, db_url: str) -> ActionRegistry:
    return simulated_registry(sim, db_url)


def test_the_rounds_cover_the_window_the_first_at_once_and_the_last_at_its_end() -> None:
    assert Soak(0, 300).offsets() == [0.0]
    assert Soak(1800, 300).offsets() == [0, 300, 600, 900, 1200, 1500, 1800]
    assert Soak(1000, 300).offsets() == [0, 300, 600, 900, 1000]


def test_a_healthy_node_passes_every_round_and_the_result_keeps_each(registry: ActionRegistry) -> None:
    action = registry.get("gpu.health")
    params = action.validate({"soak": "2s", "every": "1s"})
    started = time.monotonic()
    result = action.execute(params, step_context())
    assert time.monotonic() - started >= 2.0  # it waited out the window
    soak = result["soak"]
    assert (soak["window_s"], soak["every_s"], soak["rounds_planned"], soak["rounds_run"]) == (2.0, 1.0, 3, 3)
    assert [r["verdict"] for r in soak["rounds"]] == ["ok", "ok", "ok"]
    assert [r["at_s"] >= i for i, r in enumerate(soak["rounds"])] == [True] * 3
    assert result["verdict"] == "ok" and result["diag"]["verdict"] == "skipped"
    assert action.plan(params, step_context())["soak"]["rounds_planned"] == 3


def test_a_fault_that_comes_back_mid_soak_fails_the_step_with_that_rounds_evidence(
    registry: ActionRegistry, sim: SimulatedBackend
) -> None:
    action = registry.get("gpu.health")
    params = action.validate({"soak": "4s", "every": "1s"})
    uuid = sim.devices()[1].uuid
    # The first round reads a healthy node; then GPU 1 counts a volatile double-bit ECC error again.
    timer = threading.Timer(0.5, lambda: sim.update_device(uuid, health={**HEALTHY, "ecc_dbe_volatile": 1}))
    timer.start()
    with pytest.raises(NodeUnhealthy) as caught:
        action.execute(params, step_context())
    timer.join()
    rounds = caught.value.result["soak"]["rounds"]
    assert [r["verdict"] for r in rounds] == ["ok", "fail"]  # the first failing round ends it: no 4 s wait
    assert rounds[1]["failed"] == [f"GPU 1 ({uuid}): ecc_dbe_volatile: 1 > 0"]
    assert str(caught.value) == f"node unhealthy (soak round 2 of 5, at +1s): GPU 1 ({uuid}): ecc_dbe_volatile: 1 > 0"
    assert caught.value.result["failed"] == rounds[1]["failed"]


def test_a_soak_longer_than_the_steps_timeout_is_refused_before_its_first_round() -> None:
    rounds: list[int] = []

    def one() -> Round:
        rounds.append(1)
        return Round(0.0, "ok")

    with pytest.raises(SoakTooLong, match="does not fit in the 60s left"):
        run_soak(Soak(1800, 300), one, remaining=lambda: 60.0, stopping=threading.Event(), margin_s=5)
    assert rounds == []


def test_a_stopping_server_ends_the_soak_unproven() -> None:
    stopping = threading.Event()
    threading.Timer(0.2, stopping.set).start()
    started = time.monotonic()
    with pytest.raises(SoakStopped, match="stopped after 1 of 3 soak rounds"):
        run_soak(Soak(600, 300), lambda: Round(0.0, "ok"), remaining=lambda: 1e9, stopping=stopping, margin_s=5)
    assert time.monotonic() - started < scaled(10)


def test_through_the_node_agent_a_soak_longer_than_its_request_timeout_comes_back_whole(tmp_path: Path) -> None:
    """The gate's path on a cluster: the server's AgentRunner to the node's agent over HTTP, the step running for
    longer than the agent's request_timeout (which bounds reading a request, not running its step)."""
    backend = SimulatedBackend(SimulatedBackend.write_example(tmp_path / "node-gpus.yaml", count=2))
    settings = agent_settings(tmp_path, gpu_backend="simulated", gpu_simulator_file=backend.path, request_timeout=1.0)
    service = AgentService(settings)
    action = default_registry(settings).get("gpu.health")
    params = action.validate({"soak": "3s", "every": "1s"})
    ctx = replace(step_context(), target="node-b", deadline=time.monotonic() + scaled(30))
    with serve_agent(service, settings) as url:
        remote = AgentRunner("node-b", StaticAgents({"node-b": url}), AGENT_TOKEN, retry_wait_max=0.01)
        result = remote.execute(action, params, ctx)
    service.close()
    assert [r["verdict"] for r in result["soak"]["rounds"]] == ["ok"] * 4
    assert result["soak"]["rounds"][-1]["at_s"] >= 3.0


def test_the_release_gate_reports_each_round_as_it_ends_and_a_fault_back_mid_soak_fails_it_there(
    registry: ActionRegistry, sim: SimulatedBackend
) -> None:
    """`remediate node release`'s gate (remediate.executor.readmission): one gpu.health call per round, each round
    told as it ends; the round after a fault came back fails the gate and ends it, as the step's soak does."""
    bad = sim.devices()[1].uuid
    seen: list[tuple[int, int, str, float]] = []

    def on_round(done: GateRound) -> None:
        seen.append((done.number, done.planned, done.verdict, time.monotonic()))
        if done.number == 1:  # after a healthy first round, GPU 1 counts a volatile double-bit ECC error again
            sim.update_device(bad, health={**HEALTHY, "ecc_dbe_volatile": 1})

    gate = Gate(Dispatch(node_name="node-a"), registry.get("gpu.health"), "node-a", GateOptions("3s", "1s", 0),
                on_round=on_round)  # fmt: skip
    outcome = gate.run()

    assert [(n, planned, verdict) for n, planned, verdict, _ in seen] == [(1, 4, "ok"), (2, 4, "fail")]
    assert seen[1][3] - seen[0][3] >= 0.9  # the second round waited for its time
    evidence = f"GPU 1 ({bad}): ecc_dbe_volatile: 1 > 0"
    assert (outcome.passed, outcome.failed, outcome.error) == (False, (evidence,), None)
    assert outcome.line() == f"gate failed on node-a (server) (round 2): {evidence}"
    (failing,) = [c for c in outcome.rounds[1].checks if c.verdict == "fail"]
    assert failing == CheckVerdict(f"GPU 1 ({bad})", "ecc_dbe_volatile", "fail", "ecc_dbe_volatile: 1 > 0")


def test_a_gpu_nvml_stops_listing_mid_soak_fails_the_step_on_bus(tmp_path: Path, db_url: str) -> None:
    """8 GPUs in the first round, 7 listed later, the 7 all healthy: the step fails, naming the GPU gone."""
    sim = healthy_simulator(tmp_path, count=8)
    action = simulated_registry(sim, db_url).get("gpu.health")
    gone = sim.devices()[5].uuid
    timer = threading.Timer(0.5, lambda: sim.remove_device(gone))
    timer.start()
    with pytest.raises(NodeUnhealthy) as caught:
        action.execute(action.validate({"soak": "3s", "every": "1s"}), step_context())
    timer.join()
    line = f"GPU 5 ({gone}): on_bus: no longer listed by NVML: fell off the bus?"
    rounds = caught.value.result["soak"]["rounds"]
    assert [(r["verdict"], r["failed"]) for r in rounds] == [("ok", []), ("fail", [line])]
    assert caught.value.result["failed"] == [line]
    (entry,) = [g for g in caught.value.result["gpus"] if g["gpu"] == gone]
    assert entry["checks"] == [{"check": "on_bus", "verdict": "fail", "evidence": UNLISTED}]


def test_the_release_gate_fails_a_round_short_of_a_gpu_its_plan_listed(tmp_path: Path, db_url: str) -> None:
    """The release's per-round calls each judge only what NVML lists then; the gate holds them to the plan's."""
    sim = healthy_simulator(tmp_path, count=8)
    gone = sim.devices()[7].uuid

    def on_round(done: GateRound) -> None:
        if done.number == 2:
            sim.remove_device(gone)

    gate = Gate(Dispatch(node_name="node-a"), simulated_registry(sim, db_url).get("gpu.health"), "node-a",
                GateOptions("3s", "1s", 0), on_round=on_round)  # fmt: skip
    outcome = gate.run()

    line = f"GPU 7 ({gone}): on_bus: {UNLISTED}"
    assert [r.verdict for r in outcome.rounds] == ["ok", "ok", "fail"]
    assert (outcome.passed, outcome.failed, outcome.error) == (False, (line,), None)
    (failing,) = [c for c in outcome.rounds[2].checks if c.verdict == "fail"]
    assert failing == CheckVerdict(f"GPU 7 ({gone})", "on_bus", "fail", UNLISTED)


def test_the_release_gate_gives_dcgmi_the_time_its_level_takes(
    registry: ActionRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--diag 3` runs 30 minutes and more on 8 GPUs: the gate's margin beyond its soak comes from the same
    per-level figure (dcgm_diag.ALLOWED_S), not a fixed 15 minutes that cuts it short."""
    given: list[float] = []

    def diag(level: int, *, timeout_s: float) -> dcgm_diag.DiagResult:
        given.append(timeout_s)
        return dcgm_diag.parse(fixture("dcgm4_r1_pass.json"), level)

    monkeypatch.setattr(dcgm_diag, "run", diag)
    for level in (1, 3):
        outcome = Gate(Dispatch(node_name="node-a"), registry.get("gpu.health"), "node-a",
                       GateOptions("0s", "1s", level)).run()  # fmt: skip
        assert outcome.passed, outcome.line()
        assert given[-1] >= dcgm_diag.ALLOWED_S[level]
    assert given[0] < given[1]


def test_a_dcgmi_out_of_time_in_the_release_gate_reads_as_could_not_run(
    registry: ActionRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_pass.json"), sleep_s=5)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(readmission, "margin_s", lambda diag: DIAG_MARGIN_S + 1.5)  # dcgmi gets 1.5 s
    outcome = Gate(Dispatch(node_name="node-a"), registry.get("gpu.health"), "node-a",
                   GateOptions("0s", "1s", 1)).run()  # fmt: skip
    assert (outcome.passed, outcome.failed) == (False, ())
    assert outcome.error is not None and "dcgmi diag -r 1 gave no answer in 1." in outcome.error
    assert outcome.line().startswith("gate could not run on node-a (server): gate could not judge the node")
