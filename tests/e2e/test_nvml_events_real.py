"""Real-GPU check of the fault path's NVML events (remediate.gpu.nvml_events): read-only, deselected by default.

Marker `nvml`, like test_nvml_real.py; on a machine with an NVIDIA GPU and driver:

    pytest -m nvml tests/e2e/test_nvml_events_real.py -s

Without a driver every test here is skipped with NVML's error as the reason. Registering for events and
waiting on the event set change no setting of a GPU; the tests check that the power limits read before and
after are the same. A healthy GPU sends no XID in a one-second wait: each wait must time out (None).
"""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from remediate.agent.gpu_faults import FaultAlerts, FaultWatcher
from remediate.gpu import GpuInfo, NvmlBackend, NvmlUnavailable
from remediate.gpu.events import DOUBLE_BIT_ECC, XID
from remediate.gpu.nvml import load_nvml
from remediate.gpu.nvml_events import NvmlEventWatch
from tests.support.realsystems import WebhookRecorder

pytestmark = pytest.mark.nvml


@pytest.fixture(scope="module")
def gpus() -> list[GpuInfo]:
    try:
        found = NvmlBackend().devices()
    except NvmlUnavailable as exc:
        pytest.skip(f"no usable NVML here: {exc}")
    assert found, "NVML initialised but reports no GPUs"
    return found


@pytest.fixture
def watch(gpus: list[GpuInfo]) -> Iterator[NvmlEventWatch]:
    opened = NvmlBackend().open_events()
    yield opened
    opened.close()


def _limits(gpus: list[GpuInfo]) -> dict[str, int]:
    return {g.uuid: NvmlBackend().device(g.uuid).power_limit_mw for g in gpus}


def test_every_gpu_is_registered_for_the_fault_events_it_supports(gpus: list[GpuInfo], watch: NvmlEventWatch) -> None:
    nvml = load_nvml()
    print()
    for gpu in gpus:
        handle = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
        supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
        print(
            f"GPU {gpu.index} {gpu.uuid}: supported event types 0x{supported:x}, "
            f"registered {watch.registered[gpu.uuid]}"
        )
        expected = tuple(
            kind
            for kind, bit in (
                (XID, pynvml.nvmlEventTypeXidCriticalError),
                (DOUBLE_BIT_ECC, pynvml.nvmlEventTypeDoubleBitEccError),
            )
            if supported & bit
        )
        assert watch.registered[gpu.uuid] == expected
    assert set(watch.registered) == {g.uuid for g in gpus}


def test_a_one_second_wait_on_healthy_gpus_times_out_and_changes_nothing(
    gpus: list[GpuInfo], watch: NvmlEventWatch
) -> None:
    before = _limits(gpus)
    assert watch.wait(1.0) is None  # nvmlEventSetWait_v2 answered NVML_ERROR_TIMEOUT: no fault
    assert watch.lost() == []
    assert _limits(gpus) == before


def test_the_watcher_on_real_gpus_posts_nothing_and_stops(gpus: list[GpuInfo]) -> None:
    with WebhookRecorder(path="/api/v2/alerts") as alertmanager:
        config = FaultAlerts(url=alertmanager.url.removesuffix("/api/v2/alerts"), node="real", resolve_after=60.0)
        watcher = FaultWatcher(NvmlBackend().open_events(), config, wait_seconds=0.5).start()
        try:
            watcher.stopping.wait(2.0)
        finally:
            watcher.stop()
        assert not watcher.alive
        assert alertmanager.requests == []
