"""`dcgmi diag -j` parsed and judged (remediate.gpu.dcgm_diag), and run through a fake `dcgmi` on PATH.

The outputs in tests/fixtures/dcgm/ have the shape NVIDIA documents: DCGM 4's from NVIDIA/DCGM's
testing/python3/dcgm_diag_schema.json and the `dcgmi diag` output shown in NVIDIA/DCGM#215 on GitHub,
with DCGM 4's persistence-mode warning (error_id 29); DCGM 3's with the keys NVIDIA's DCGM test code
reads (see tests/fixtures/dcgm/README.md).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from remediate.gpu import dcgm_diag
from remediate.gpu.dcgm_diag import DiagOutputError
from tests.support.waiting import scaled

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def fake_dcgmi(bin_dir: Path, *, output: str = "", exit_code: int = 0, sleep_s: float = 0) -> Path:
    """An executable `dcgmi` that records its argv and prints `output` (a real diag JSON) like dcgmi."""
    bin_dir.mkdir(exist_ok=True)
    # Absolute paths: a test may leave only this directory on PATH.
    cat, sleep = shutil.which("cat", path=os.defpath), shutil.which("sleep", path=os.defpath)
    (bin_dir / "out.json").write_text(output, encoding="utf-8")
    script = bin_dir / "dcgmi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{bin_dir}/argv"\n'
        + (f"{sleep} {sleep_s}\n" if sleep_s else "")
        + f'{cat} "{bin_dir}/out.json"\nexit {exit_code}\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_a_passing_dcgm4_level_1_is_ok_with_its_tests_and_version() -> None:
    result = dcgm_diag.parse(fixture("dcgm4_r1_pass.json"), 1)
    assert (result.verdict, result.version, result.reason) == ("ok", "4.1.1", "")
    assert [t.to_dict() for t in result.tests] == [
        {"category": "Deployment", "test": "software", "status": "Pass", "problems": []}
    ]


def test_a_failing_dcgm4_test_names_the_gpu_and_dcgm_s_own_words() -> None:
    result = dcgm_diag.parse(fixture("dcgm4_r1_persistence_fail.json"), 1)
    assert result.verdict == "fail"
    (test,) = result.tests
    assert test.problems == (
        "GPU 1: Fail (Persistence Mode: Persistence mode for GPU 1 is disabled. Enable persistence mode by running "
        '"nvidia-smi -i <gpuId> -pm 1 " as root.)',
    )
    assert result.to_dict()["failed"] == [f"software: {test.problems[0]}"]


def test_dcgm3_output_is_judged_by_its_worst_per_gpu_result() -> None:
    result = dcgm_diag.parse(fixture("dcgm3_r2_memory_fail.json"), 2)
    assert (result.verdict, result.version) == ("fail", "3.3.5")
    verdicts = {t.name: (t.status, t.verdict) for t in result.tests}
    assert verdicts == {
        "Denylist": ("Pass", "ok"),
        "Persistence Mode": ("Pass", "ok"),
        "PCIe": ("Pass", "ok"),
        "GPU Memory": ("Fail", "fail"),
        "Targeted Stress": ("Skip", "ok"),
    }
    memory = next(t for t in result.tests if t.name == "GPU Memory")
    assert memory.problems == ("GPU 1: Fail (Error using CUDA API cuMemAlloc Out of memory (2) for GPU 1)",)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Error: unable to establish a connection to the specified host: localhost", "no JSON"),
        ('{"DCGM Diagnostic": {', "no JSON"),
        ("{not json}", "does not parse"),
        ('{"something": {}}', "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "reports no tests"),
    ],
)
def test_output_that_is_not_the_diagnostic_s_json_is_refused(text: str, why: str) -> None:
    with pytest.raises(DiagOutputError, match=why):
        dcgm_diag.parse(text, 1)


def test_a_runtime_error_fails() -> None:
    result = dcgm_diag.parse('{"DCGM Diagnostic": {"runtime_error": "No GPUs found"}}', 1)
    assert (result.verdict, result.reason) == ("fail", "DCGM runtime error: No GPUs found")


def test_the_level_is_checked_before_anything_runs() -> None:
    assert dcgm_diag.argv("/usr/bin/dcgmi", 2) == ["/usr/bin/dcgmi", "diag", "-r", "2", "-j"]
    for bad in (0, 4, True, "1"):
        with pytest.raises(ValueError, match="level must be one of"):
            dcgm_diag.argv("/usr/bin/dcgmi", bad)  # type: ignore[arg-type]


def test_without_dcgmi_on_path_the_diagnostic_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = dcgm_diag.run(1, timeout_s=5)
    assert (result.verdict, result.reason) == ("skipped", "DCGM not installed (no dcgmi on this node's PATH)")


def test_a_fake_dcgmi_on_path_is_run_with_the_level_and_json_and_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dcgmi exits non-zero when a test fails, and still prints its JSON: the JSON decides.
    bin_dir = fake_dcgmi(tmp_path / "bin", output=fixture("dcgm4_r1_persistence_fail.json"), exit_code=226)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = dcgm_diag.run(1, timeout_s=scaled(30))
    assert (bin_dir / "argv").read_text().split() == ["diag", "-r", "1", "-j"]
    assert result.verdict == "fail" and result.tests[0].name == "software"


def test_no_host_engine_or_a_hung_dcgmi_fails_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = "Error: unable to establish a connection to the specified host: localhost\n"
    bin_dir = fake_dcgmi(tmp_path / "bin", output=said, exit_code=255)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = dcgm_diag.run(1, timeout_s=scaled(30))
    assert (result.verdict, result.timed_out) == ("fail", False)
    assert result.reason.startswith("dcgmi diag exited 255: no JSON in its output: Error: unable to establish")

    slow = fake_dcgmi(tmp_path / "slow", output=fixture("dcgm4_r1_pass.json"), sleep_s=5)
    monkeypatch.setenv("PATH", f"{slow}{os.pathsep}{os.environ['PATH']}")
    result = dcgm_diag.run(3, timeout_s=0.5)
    assert (result.verdict, result.reason) == ("fail", "dcgmi diag -r 3 gave no answer in 0.5 s")
    assert result.timed_out and result.to_dict()["timed_out"] is True  # no verdict on the GPUs: too little time
