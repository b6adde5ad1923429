"""remediate.burnin.verdict and .command: a measurement line parsed, judged against its model's baseline, and the
command line built only from checked values."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remediate.burnin.command import BurninCommand
from remediate.burnin.verdict import BadMeasurement, Measurement, check_baselines, judge
from tests.support.waiting import scaled

LINE = ('{"backend": "nccl", "bytes": 16000000, "correct": true, "figure": 300.0, "iters": 20, '
        '"model": "NVIDIA H100 80GB HBM3", "ranks": 8, "seconds_per_iter": 0.0001, "unit": "GB/s"}')  # fmt: skip
H100 = {"NVIDIA H100 80GB HBM3": 350.0, "cpu": 0.5}


def test_the_last_json_line_is_the_measurement_whatever_torch_printed_before() -> None:
    measured = Measurement.parse(f"[W socket.cpp] some warning\n{LINE}\n")
    assert measured.figure == 300.0 and measured.model == "NVIDIA H100 80GB HBM3" and measured.correct


@pytest.mark.parametrize("output", ["", "no json here", '{"figure": 1}', LINE.replace("300.0", "NaN")])
def test_output_that_is_not_a_measurement_is_refused(output: str) -> None:
    with pytest.raises(BadMeasurement):
        Measurement.parse(output)


def test_a_figure_within_tolerance_passes_and_one_below_fails_naming_both() -> None:
    measured = Measurement.parse(LINE)
    assert judge(measured, H100, 0.8).passed  # 300 >= 280
    failed = judge(measured, H100, 0.9)  # 300 < 315
    assert not failed.passed and failed.baseline == 350.0 and failed.threshold == pytest.approx(315.0)
    assert "300 GB/s" in failed.why and "< 315" in failed.why
    assert failed.summary()["verdict"] == "fail"


def test_a_model_without_a_baseline_fails() -> None:
    verdict = judge(Measurement.parse(LINE), {"cpu": 0.5}, 0.8)
    assert not verdict.passed and verdict.baseline is None and "no baseline for this model" in verdict.why


def test_a_wrong_sum_fails_however_fast() -> None:
    verdict = judge(Measurement.parse(LINE.replace('"correct": true', '"correct": false')), H100, 0.1)
    assert not verdict.passed and "wrong sum" in verdict.why


@pytest.mark.parametrize("table", [{}, {"": 1}, {"cpu": 0}, {"cpu": True}, {"cpu": "fast"}])
def test_a_baseline_table_must_name_models_and_positive_figures(table: dict[str, object]) -> None:
    assert check_baselines(table) is not None


def test_the_command_line_refuses_values_no_param_check_would_let_through() -> None:
    good = BurninCommand("/usr/bin/python3", "gloo", 2, 16, 20, 300)
    assert good.argv()[:3] == ["/usr/bin/python3", "-m", "remediate.burnin"]
    for bad in (BurninCommand("python3", "gloo", 2, 16, 20, 300),
                BurninCommand("/usr/bin/python3", "mpi", 2, 16, 20, 300),
                BurninCommand("/usr/bin/python3", "gloo", 1, 16, 20, 300),
                BurninCommand("/usr/bin/python3", "gloo", 2, 16, 20, 5)):  # fmt: skip
        with pytest.raises(ValueError, match="refused"):
            bad.argv()


def test_a_benchmark_past_its_time_limit_ends_its_ranks_and_fails() -> None:
    """Its own limit, since nothing else may end it: a killed `srun --no-allocate` leaves its task running."""
    root = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "remediate.burnin", "--megabytes", "64", "--iters", "1000",
                           "--seconds", "10"], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=scaled(120), check=False)  # fmt: skip
    assert done.returncode == 1 and "still running after 10 s: ended" in done.stderr, done.stderr
    assert done.stdout == "" and time.monotonic() - started < scaled(60)
