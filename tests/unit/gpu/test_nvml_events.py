"""NVML's event watch (remediate.gpu.nvml_events) against a stand-in for pynvml's C-call wrappers (pynvml's own
exception classes and constants): it registers each GPU only for the event types it supports, a wait that
times out is "no event", an XID event names its GPU and XID, a GPU that answers GPU_IS_LOST is lost, and the
event set is freed. test_nvml_events_real.py runs the same against a real GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from remediate.gpu import GpuError
from remediate.gpu.events import DOUBLE_BIT_ECC, XID
from remediate.gpu.nvml_events import NvmlEventWatch

XID_BIT = pynvml.nvmlEventTypeXidCriticalError
DBE_BIT = pynvml.nvmlEventTypeDoubleBitEccError


@dataclass
class Driver:
    supported: list[int]
    queued: list[tuple[int, int, int]] = field(default_factory=list)  # (gpu index, type, data)
    lost: set[int] = field(default_factory=set)
    registered: dict[int, int] = field(default_factory=dict)
    freed: bool = False
    waits: list[int] = field(default_factory=list)

    def module(self) -> Any:
        def register(handle: int, mask: int, _set: object) -> None:
            if mask & ~self.supported[handle]:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            self.registered[handle] = mask

        def wait(_set: object, timeout_ms: int) -> Any:
            self.waits.append(timeout_ms)
            if not self.queued:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            index, kind, data = self.queued.pop(0)
            return SimpleNamespace(device=index, eventType=kind, eventData=data)

        def temperature(handle: int, _sensor: int) -> int:
            if handle in self.lost:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            return 40

        def free(_set: object) -> None:
            self.freed = True

        return SimpleNamespace(
            NVMLError=pynvml.NVMLError,
            NVML_TEMPERATURE_GPU=pynvml.NVML_TEMPERATURE_GPU,
            nvmlEventTypeXidCriticalError=XID_BIT,
            nvmlEventTypeDoubleBitEccError=DBE_BIT,
            nvmlEventSetCreate=lambda: "set",
            nvmlDeviceGetCount=lambda: len(self.supported),
            nvmlDeviceGetHandleByIndex=lambda index: index,
            nvmlDeviceGetUUID=lambda handle: f"GPU-{handle}".encode(),
            nvmlDeviceGetSupportedEventTypes=lambda handle: self.supported[handle],
            nvmlDeviceRegisterEvents=register,
            nvmlEventSetWait_v2=wait,
            nvmlDeviceGetTemperature=temperature,
            nvmlEventSetFree=free,
        )


def test_each_gpu_is_registered_for_the_fault_events_it_supports() -> None:
    driver = Driver(supported=[XID_BIT | DBE_BIT | pynvml.nvmlEventTypePState, XID_BIT, 0])
    watch = NvmlEventWatch(driver.module())
    assert driver.registered == {0: XID_BIT | DBE_BIT, 1: XID_BIT}  # GPU 2 supports neither: only its loss
    assert watch.registered == {"GPU-0": (XID, DOUBLE_BIT_ECC), "GPU-1": (XID,), "GPU-2": ()}


def test_a_wait_that_times_out_is_no_event_and_events_name_their_gpu() -> None:
    driver = Driver(supported=[XID_BIT | DBE_BIT, XID_BIT | DBE_BIT])
    watch = NvmlEventWatch(driver.module())
    assert watch.wait(0.5) is None and driver.waits == [500]
    driver.queued += [(1, XID_BIT, 79), (0, DBE_BIT, 0)]
    xid, ecc = watch.wait(1), watch.wait(1)
    assert xid is not None and (xid.kind, xid.uuid, xid.index, xid.xid) == (XID, "GPU-1", 1, 79)
    assert ecc is not None and (ecc.kind, ecc.uuid, ecc.index, ecc.xid) == (DOUBLE_BIT_ECC, "GPU-0", 0, 48)


def test_a_gpu_answering_gpu_is_lost_is_lost_and_close_frees_the_set() -> None:
    driver = Driver(supported=[XID_BIT, XID_BIT], lost={1})
    watch = NvmlEventWatch(driver.module())
    assert watch.lost() == [("GPU-1", 1)]
    watch.close()
    watch.close()
    assert driver.freed


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_UNKNOWN])
def test_other_wait_errors_are_gpu_errors(code: int) -> None:
    driver = Driver(supported=[XID_BIT])
    module = driver.module()

    def broken(_set: object, _timeout: int) -> Any:
        raise pynvml.NVMLError(code)

    module.nvmlEventSetWait_v2 = broken
    with pytest.raises(GpuError):
        NvmlEventWatch(module).wait(0.1)


def test_a_wait_answering_gpu_is_lost_is_no_event_and_takes_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(supported=[XID_BIT])
    module = driver.module()

    def lost(_set: object, _timeout: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    module.nvmlEventSetWait_v2 = lost
    slept: list[float] = []
    monkeypatch.setattr("remediate.gpu.nvml_events.time.sleep", slept.append)
    assert NvmlEventWatch(module).wait(0.7) is None
    assert slept == [0.7]  # the watcher's loop does not spin while NVML answers GPU_IS_LOST at once
