"""The NVML half of the `health_scan` capability: every GPU's health reads, getters only.

No setter is ever called here (a health check must not change the node it judges). Each read
that a GPU or driver does not support (NOT_SUPPORTED, FUNCTION_NOT_FOUND) is None in the reading;
NVML_ERROR_GPU_IS_LOST on any call of one GPU makes that GPU's entry `lost` and the scan goes on
with the next GPU. Any other error fails the scan, with NVML's code (remediate.gpu.errors).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from remediate.gpu.errors import NVML_ERROR_INVALID_ARGUMENT, GpuLost, from_nvml_error
from remediate.gpu.health import NVLINK_COUNTERS, GpuHealth, HealthReading, PcieLink
from remediate.gpu.model import MemoryHealth
from remediate.gpu.nvml_calls import ABSENT_CODES, optional, text
from remediate.gpu.pci import normalize_pci_bus_id


def _call(nvml: ModuleType, doing: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        raise from_nvml_error(exc, doing=doing) from exc


def scan(nvml: ModuleType) -> list[GpuHealth]:
    """Every GPU of the node, by index, each read now (`nvml`: pynvml, initialised)."""
    count = _call(nvml, "count GPUs", nvml.nvmlDeviceGetCount)
    found = []
    for index in range(count):
        who: dict[str, Any] = {"index": index, "uuid": ""}
        try:
            handle = _call(nvml, f"open GPU {index}", nvml.nvmlDeviceGetHandleByIndex, index)
            who["uuid"] = text(_call(nvml, f"read the UUID of GPU {index}", nvml.nvmlDeviceGetUUID, handle))
            bus = text(_call(nvml, f"read the PCI info of GPU {index}", nvml.nvmlDeviceGetPciInfo, handle).busId)
            try:
                who["pci_bus_id"] = normalize_pci_bus_id(bus)
            except ValueError:
                who["pci_bus_id"] = bus.upper()
            who["name"] = text(_call(nvml, f"read the name of GPU {index}", nvml.nvmlDeviceGetName, handle))
            found.append(GpuHealth(**who, reading=read(nvml, handle, who["uuid"])))
        except GpuLost as exc:
            found.append(GpuHealth(**who, lost=str(exc)))
    return found


def read(nvml: ModuleType, handle: Any, uuid: str) -> HealthReading:
    """One GPU's reading; GpuLost when it falls off the bus during it."""

    def getter(what: str, fn: Callable[..., Any], *args: Any) -> Any | None:
        return optional(nvml, f"read the {what} of {uuid}", fn, handle, *args)

    pending = getter("pending page retirements", nvml.nvmlDeviceGetRetiredPagesPendingStatus)
    rows = getter("remapped rows", nvml.nvmlDeviceGetRemappedRows)
    memory = MemoryHealth(
        retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
        remapped_rows_correctable=None if rows is None else int(rows[0]),
        remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
        remapped_rows_pending=None if rows is None else bool(rows[2]),
        remapped_rows_failure=None if rows is None else bool(rows[3]),
    )
    ecc = getter(
        "volatile uncorrected ECC count",
        nvml.nvmlDeviceGetTotalEccErrors,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nvml.NVML_VOLATILE_ECC,
    )
    pcie = PcieLink(
        gen=getter("PCIe link generation", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
        max_gen=getter("maximum PCIe link generation", nvml.nvmlDeviceGetMaxPcieLinkGeneration),
        width=getter("PCIe link width", nvml.nvmlDeviceGetCurrPcieLinkWidth),
        max_width=getter("maximum PCIe link width", nvml.nvmlDeviceGetMaxPcieLinkWidth),
    )
    utilization = getter("utilization", nvml.nvmlDeviceGetUtilizationRates)
    # The "event" name is the current one (NVML 12.x); drivers before it have only the "throttle" name.
    reasons = getter("clock event reasons", nvml.nvmlDeviceGetCurrentClocksEventReasons)
    if reasons is None:
        reasons = getter("clock throttle reasons", nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    return HealthReading(
        memory=memory,
        ecc_dbe_volatile=None if ecc is None else int(ecc),
        pcie=pcie,
        utilization_percent=None if utilization is None else int(utilization.gpu),
        clock_event_reasons=None if reasons is None else int(reasons),
        nvlink_errors=_nvlink_errors(nvml, handle, uuid),
    )


def active_nvlinks(nvml: ModuleType, handle: Any, uuid: str) -> list[int] | None:
    """The GPU's NVLinks that are up; None on a GPU without NVLink (also what remediate.gpu.nvml's topology reads)."""
    active: list[int] | None = None
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            up = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as exc:
            # NOT_SUPPORTED: no NVLink on this GPU; INVALID_ARGUMENT: past this GPU's last link.
            if exc.value in (*ABSENT_CODES, NVML_ERROR_INVALID_ARGUMENT):
                break
            raise from_nvml_error(exc, doing=f"read NVLink {link} of {uuid}") from exc
        active = active if active is not None else []
        if up == nvml.NVML_FEATURE_ENABLED:
            active.append(link)
    return active


def _nvlink_errors(nvml: ModuleType, handle: Any, uuid: str) -> dict[int, dict[str, int]] | None:
    """Active link -> its error counters (those the link supports); None on a GPU without NVLink."""
    active = active_nvlinks(nvml, handle, uuid)
    if active is None:
        return None
    links: dict[int, dict[str, int]] = {}
    for link in active:
        counts = {}
        for name, counter in NVLINK_COUNTERS.items():
            doing = f"read the NVLink {link} {name} error counter of {uuid}"
            value = optional(nvml, doing, nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, counter)
            if value is not None:
                counts[name] = int(value)
        links[link] = counts
    return links
