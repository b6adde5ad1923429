"""Real-GPU check of gpu.health: every GPU's health reads through the real driver, judged and printed. Read-only.

Marker `nvml`, like test_nvml_real.py, deselected by default. On a machine with an NVIDIA GPU and driver:

    pytest -m nvml tests/e2e/test_nvml_health_real.py -s

Without a driver every test here is skipped with NVML's error as the reason. Every setter and reset of
pynvml (nvmlDeviceSet*, nvmlDeviceReset*, nvmlDeviceClear*) is replaced by a test failure while these
tests run: the health reads must be getters only. The action runs with `fail_on: never`, so an unhealthy
machine prints its verdicts rather than failing here; the test asserts the shape and what NVML must answer
on a data-centre GPU (a PCIe link, a clock-reasons mask). `dcgmi diag -r 1` runs where DCGM is installed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pynvml
import pytest

from remediate.actions.gpu_health import HealthAction
from remediate.actions.gpu_health_checks import CHECKS, VERDICTS
from remediate.gpu import NvmlBackend, NvmlUnavailable
from remediate.gpu.dcgm_diag import find_dcgmi
from tests.support.gpu import step_context

pytestmark = pytest.mark.nvml

WRITES = ("nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear")


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[NvmlBackend]:
    real = NvmlBackend()
    try:
        real.devices()
    except NvmlUnavailable as exc:
        pytest.skip(f"no usable NVML here: {exc}")
    for name in dir(pynvml):
        if name.startswith(WRITES):
            monkeypatch.setattr(pynvml, name, _refuse(name))
    yield real


def _refuse(name: str) -> object:
    def refused(*_: object) -> None:
        pytest.fail(f"gpu.health must only read: it called {name}")

    return refused


def test_the_scan_reads_every_gpu_and_nvml_answers_the_link_and_clock_reads(backend: NvmlBackend) -> None:
    started = time.monotonic()
    scanned = backend.health_scan()
    took = time.monotonic() - started
    print(f"\nhealth_scan of {len(scanned)} GPU(s) in {took * 1000:.0f} ms")
    assert [g.index for g in scanned] == [g.index for g in backend.devices()]
    for gpu in scanned:
        print(json.dumps({"gpu": gpu.ident(), "lost": gpu.lost, "read": gpu.reading and gpu.reading.to_dict()}))
        assert gpu.lost is None, gpu.lost
        assert gpu.reading is not None
        link = gpu.reading.pcie
        assert link.width is not None and link.max_width is not None and 0 < link.width <= link.max_width
        assert link.gen is not None and link.max_gen is not None and 0 < link.gen <= link.max_gen
        assert gpu.reading.clock_event_reasons is not None


def test_the_action_judges_every_check_of_every_gpu_with_evidence(backend: NvmlBackend) -> None:
    action = HealthAction(lambda: backend)
    params = action.validate({"fail_on": "never", "diag": 1 if find_dcgmi() else 0})
    plan = action.plan(params, step_context())
    assert [g["index"] for g in plan["gpus"]] == [g.index for g in backend.devices()]
    result = action.execute(params, step_context())
    print(f"\nverdict {result['verdict']}; failed {result['failed']}; warnings {result['warnings']}")
    print(json.dumps(result["diag"], indent=2))
    for gpu in result["gpus"]:
        print(f"GPU {gpu['index']} {gpu['gpu']}: {gpu['verdict']}")
        for check in gpu["checks"]:
            print(f"    {check['check']:<18} {check['verdict']:<8} {check['evidence']}")
        assert [c["check"] for c in gpu["checks"]] == list(CHECKS)
        assert {c["verdict"] for c in gpu["checks"]} <= set(VERDICTS)
        assert all(c["evidence"] for c in gpu["checks"])
    assert result["verdict"] in ("ok", "warn", "fail")
