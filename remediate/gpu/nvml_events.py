"""NVML's GPU fault events (the `open_events` capability of remediate.gpu.nvml.NvmlBackend).

One event set (nvmlEventSetCreate) with every GPU registered (nvmlDeviceRegisterEvents) for the XID
critical error and double-bit ECC events it supports (nvmlDeviceGetSupportedEventTypes: a type a GPU does
not support would fail the whole registration with NOT_SUPPORTED). `wait` is nvmlEventSetWait_v2 with a
timeout: NVML_ERROR_TIMEOUT is "no event". Read-only: nothing here changes a GPU's setting.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

from remediate.gpu.errors import NVML_ERROR_GPU_IS_LOST, NVML_ERROR_NOT_SUPPORTED, from_nvml_error
from remediate.gpu.events import DOUBLE_BIT_ECC, DOUBLE_BIT_ECC_XID, XID, GpuEvent

log = logging.getLogger(__name__)

NVML_ERROR_TIMEOUT = 10


def _wanted(nvml: ModuleType) -> dict[str, int]:
    return {XID: nvml.nvmlEventTypeXidCriticalError, DOUBLE_BIT_ECC: nvml.nvmlEventTypeDoubleBitEccError}


class NvmlEventWatch:
    """EventWatch on NVML's event set; built by NvmlBackend.open_events."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self.registered: dict[str, tuple[str, ...]] = {}
        self._handles: list[tuple[str, int, Any]] = []
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            raise from_nvml_error(exc, doing="create an NVML event set") from exc
        try:
            self._register_all()
        except BaseException:
            self.close()
            raise

    def _register_all(self) -> None:
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise from_nvml_error(exc, doing="count GPUs") from exc
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
            except nvml.NVMLError as exc:
                raise from_nvml_error(exc, doing=f"read the event types of GPU {index}") from exc
            kinds = tuple(kind for kind, bit in _wanted(nvml).items() if supported & bit)
            mask = 0
            for kind in kinds:
                mask |= _wanted(nvml)[kind]
            self._handles.append((uuid, index, handle))
            self.registered[uuid] = kinds
            if not mask:
                log.warning(
                    "GPU %s (%s) supports no XID or double-bit ECC event: only its loss is watched", index, uuid
                )
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, mask, self._set)
            except nvml.NVMLError as exc:
                raise from_nvml_error(exc, doing=f"register GPU {index} ({uuid}) for XID events") from exc

    def wait(self, timeout: float) -> GpuEvent | None:
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self._set, max(1, int(timeout * 1000)))
        except nvml.NVMLError as exc:
            if exc.value == NVML_ERROR_TIMEOUT:
                return None
            if exc.value == NVML_ERROR_GPU_IS_LOST:
                # The watcher's lost() names the GPU. NVML answers this at once, again and again: keep the
                # loop's cadence rather than spin.
                time.sleep(timeout)
                return None
            raise from_nvml_error(exc, doing="wait for NVML events") from exc
        at = time.time()
        uuid, index = self._which(data.device)
        if data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            return GpuEvent(kind=DOUBLE_BIT_ECC, uuid=uuid, index=index, xid=DOUBLE_BIT_ECC_XID, at=at)
        return GpuEvent(kind=XID, uuid=uuid, index=index, xid=int(data.eventData), at=at)

    def _which(self, device: Any) -> tuple[str, int | None]:
        nvml = self._nvml
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(device))
        except nvml.NVMLError:
            return "", None  # its GPU may be gone already; the event still counts
        for known, index, _handle in self._handles:
            if known == uuid:
                return uuid, index
        return uuid, None

    def lost(self) -> list[tuple[str, int]]:
        nvml = self._nvml
        gone = []
        for uuid, index, handle in self._handles:
            try:
                # A cheap query that reaches the GPU: a GPU off the bus answers GPU_IS_LOST.
                nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            except nvml.NVMLError as exc:
                if exc.value == NVML_ERROR_GPU_IS_LOST:
                    gone.append((uuid, index))
                elif exc.value != NVML_ERROR_NOT_SUPPORTED:
                    log.debug("GPU %s (%s): %s", index, uuid, exc)
        return gone

    def close(self) -> None:
        event_set, self._set = getattr(self, "_set", None), None
        if event_set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            log.warning("freeing the NVML event set: %s", exc)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
