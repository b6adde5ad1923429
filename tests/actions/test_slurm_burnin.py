"""slurm.burnin against a real slurmctld and slurmd (tests/support/slurm.py): a gloo all-reduce run with `srun
--no-allocate` on this host's node after slurm.drain drained it; the figure passes a baseline it meets and fails
one it cannot (figure, baseline and verdict in the result, the failure failing the step), the node stays drained
throughout (read every few tenths of a second while it runs), and nothing an alert says reaches the command line.

The burn-in runs `python -m remediate.burnin` with this checkout as its directory (`workdir`), so the node's
interpreter imports this checkout's code, as a site's would import the remediate it installed."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.actions.slurm import BurninFailedStep, SlurmBurninAction, SlurmDrainAction, SlurmOptions
from remediate.breaker import CircuitBreaker
from remediate.errors import ActionError
from remediate.slurm import SlurmError, SlurmNodeCache
from tests.support.slurm import SlurmCluster, step_context
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"python": sys.executable, "workdir": str(ROOT), "ranks": 2, "megabytes": 4, "iters": 5, "timeout": 240}


@pytest.fixture
def commands() -> list[str]:
    return []


@pytest.fixture
def cache(slurm: SlurmCluster, commands: list[str]) -> SlurmNodeCache:
    return slurm.node_cache(on_command=commands.append)


@pytest.fixture
def burnin(cache: SlurmNodeCache) -> SlurmBurninAction:
    return SlurmBurninAction(lambda: cache, SlurmOptions())


def drain(slurm: SlurmCluster, cache: SlurmNodeCache, ctx: StepContext) -> None:
    drainer = SlurmDrainAction(lambda: cache, SlurmOptions())
    assert drainer.execute(drainer.validate({}), ctx)["outcome"] == "drained"


class StateWatch:
    """`scontrol show node` read over and over while a burn-in runs: every state the node went through."""

    def __init__(self, slurm: SlurmCluster, node: str) -> None:
        self.slurm, self.node, self.states = slurm, node, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.3):
            line = self.slurm.show_node(self.node)
            self.states.append(next(f for f in line.split() if f.startswith("State=")))

    def __enter__(self) -> StateWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def report(result: dict[str, Any]) -> None:
    """The measured figure against its baseline, in the test's output (`pytest -s`)."""
    print(f"\nslurm.burnin {result['node']}: {result['figure']} {result['unit']} on {result['model']!r}, baseline "
          f"{result['baseline']}, threshold {result['threshold']}: {result['verdict']} ({result['why']})")  # fmt: skip


def test_a_burnin_on_the_drained_node_passes_a_baseline_it_meets_and_fails_one_it_cannot(
    slurm: SlurmCluster, cache: SlurmNodeCache, burnin: SlurmBurninAction, breaker: CircuitBreaker
) -> None:
    ctx = step_context(slurm.host, breaker=breaker)
    drain(slurm, cache, ctx)
    met = burnin.validate({**SMALL, "baselines": {"cpu": 0.0001, "NVIDIA H100 80GB HBM3": 350}})
    plan = burnin.plan(met, ctx)
    assert "remediate.burnin" in plan["would"] and "can_act" not in plan
    with StateWatch(slurm, slurm.host) as watch:
        passed = burnin.execute(met, ctx)
        json.dumps(passed)
        report(passed)
        unmeetable = burnin.validate({**SMALL, "baselines": {"cpu": 1000000}, "tolerance": 0.9})
        with pytest.raises(BurninFailedStep) as failed:
            burnin.execute(unmeetable, ctx)
        report(failed.value.result)
    assert passed["outcome"] == "passed" and passed["verdict"] == "pass" and passed["model"] == "cpu"
    assert passed["unit"] == "GB/s" and passed["figure"] > 0.0001 and passed["baseline"] == 0.0001
    assert passed["measurement"]["correct"] is True and passed["measurement"]["ranks"] == 2
    assert passed["measurement"]["bytes"] == 4_000_000 and passed["still_drained"] is True
    result = failed.value.result
    assert result["verdict"] == "fail" and result["outcome"] == "fell_short" and result["baseline"] == 1000000
    assert result["threshold"] == pytest.approx(900000) and 0 < result["figure"] < 900000
    assert "< 9e+05" in result["why"] and "burn-in of" in str(failed.value)
    # Drained before, while each burn-in ran and after: never resumed, its reason still remediate's.
    assert watch.states and all("DRAIN" in state for state in watch.states), watch.states
    after = slurm.client().node(slurm.host)
    assert after.drained and after.drained_by_run == ctx.run_id


def test_a_node_in_service_is_refused_before_any_srun(
    slurm: SlurmCluster, burnin: SlurmBurninAction, commands: list[str]
) -> None:
    ctx = step_context(slurm.host)
    params = burnin.validate({**SMALL, "baselines": {"cpu": 0.0001}})
    assert burnin.plan(params, ctx)["can_act"] is False
    with pytest.raises(ActionError, match="not drained"):
        burnin.execute(params, ctx)
    assert "srun" not in commands and not slurm.client().node(slurm.host).drained


def test_a_node_still_draining_is_refused_until_its_jobs_end(
    slurm: SlurmCluster, burnin: SlurmBurninAction, commands: list[str]
) -> None:
    job = slurm.sbatch(slurm.host, requeue=False)
    wait_until(lambda: slurm.job_state(job) == "RUNNING", 20, message=f"job {job} running")
    slurm.drain_by_hand(slurm.host, "by hand")
    with pytest.raises(ActionError, match="draining"):
        burnin.execute(burnin.validate({**SMALL, "baselines": {"cpu": 0.0001}}), step_context(slurm.host))
    assert "srun" not in commands and slurm.job_state(job) == "RUNNING"


def test_a_burnin_that_cannot_run_fails_the_step_with_sruns_words_and_the_node_stays_drained(
    slurm: SlurmCluster, burnin: SlurmBurninAction
) -> None:
    slurm.drain_by_hand(slurm.host, "by hand")
    params = burnin.validate({**SMALL, "python": "/bin/false", "baselines": {"cpu": 0.0001}})
    with pytest.raises(SlurmError, match="srun --no-allocate"):
        burnin.execute(params, step_context(slurm.host))
    assert slurm.client().node(slurm.host).drained


@pytest.mark.parametrize("param", ["python", "workdir", "ranks", "megabytes", "baselines", "tolerance", "backend"])
def test_no_part_of_the_command_line_may_come_from_an_alert(burnin: SlurmBurninAction, param: str) -> None:
    written = {**SMALL, "baselines": {"cpu": 1}, param: "{{ labels.python }}"}
    errors = burnin.schema.check_static(written)
    assert any(f"parameter {param!r} must be written in the playbook" in error for error in errors), errors


@pytest.mark.parametrize("python", ["python3", "/usr/bin/python3 -c x", "/opt/../bin/python", "/bin/py;id"])
def test_an_interpreter_that_is_not_a_plain_absolute_path_is_refused_at_load(
    burnin: SlurmBurninAction, python: str
) -> None:
    errors = burnin.schema.check_static({**SMALL, "python": python, "baselines": {"cpu": 1}})
    assert any("parameter 'python'" in error for error in errors), errors


def test_a_label_that_is_not_one_node_name_never_reaches_srun(
    slurm: SlurmCluster, burnin: SlurmBurninAction, commands: list[str]
) -> None:
    slurm.drain_by_hand(slurm.host, "by hand")
    ctx = step_context(f"{slurm.host} --no-allocate", labels={"python": "/bin/sh"})
    with pytest.raises(ActionError, match="node name from label Hostname"):
        burnin.execute(burnin.validate({**SMALL, "baselines": {"cpu": 1}}), ctx)
    assert commands == []
