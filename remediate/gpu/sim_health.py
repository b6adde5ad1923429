"""The simulator's half of the `health_scan` capability: a device's `health` section of the file.

    health:                       # optional; every key absent = NVML answers NOT_SUPPORTED for it
      ecc_dbe_volatile: 0         # volatile uncorrected ECC errors (absent: ECC off)
      pcie: {gen: 5, max_gen: 5, width: 16, max_width: 16}
      utilization_percent: 0      # GPU utilisation now: whether the PCIe link is under load
      clock_event_reasons: [hw_slowdown]   # names of remediate.gpu.health.CLOCK_EVENT_REASONS
      nvlink_errors: {0: {replay: 0, recovery: 0, crc_flit: 0, crc_data: 0}}   # active link -> counters

Pending page retirements and row remaps come from the device's `retired_pages` / `remapped_rows`,
a GPU off the bus from `lost: true` (remediate.gpu.simfile), as every other read of the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediate.errors import ConfigError
from remediate.gpu.health import CLOCK_EVENT_REASONS, NVLINK_COUNTERS, HealthReading, PcieLink
from remediate.gpu.model import MemoryHealth

_KEYS = frozenset({"ecc_dbe_volatile", "pcie", "utilization_percent", "clock_event_reasons", "nvlink_errors"})
_PCIE_KEYS = ("gen", "max_gen", "width", "max_width")


def example(pcie_gen: int) -> dict[str, Any]:
    """A healthy idle GPU's section, for the example files (an x16 link at `pcie_gen`, no NVLink)."""
    pcie = {"gen": pcie_gen, "max_gen": pcie_gen, "width": 16, "max_width": 16}
    return {"ecc_dbe_volatile": 0, "pcie": pcie, "utilization_percent": 0, "clock_event_reasons": ["gpu_idle"]}


def _count(value: Any, where: str, bad: Callable[[str], ConfigError]) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise bad(f"health.{where} must be a non-negative integer, got {value!r}")
    return value


def parse(section: Any, memory: MemoryHealth, bad: Callable[[str], ConfigError]) -> HealthReading:
    """The reading a device's `health` section (None: absent) describes; `bad` builds the file's ConfigError."""
    if section is None:
        return HealthReading(memory=memory)
    if not isinstance(section, dict) or set(section) - _KEYS:
        raise bad(f"health must be a mapping of {', '.join(sorted(_KEYS))}; got {section!r}")
    pcie = section.get("pcie") or {}
    if not isinstance(pcie, dict) or set(pcie) - set(_PCIE_KEYS):
        raise bad(f"health.pcie must be a mapping of {', '.join(_PCIE_KEYS)}; got {pcie!r}")
    reasons = section.get("clock_event_reasons")
    mask = None
    if reasons is not None:
        if not isinstance(reasons, list) or any(r not in CLOCK_EVENT_REASONS for r in reasons):
            raise bad(f"health.clock_event_reasons must list names of {', '.join(CLOCK_EVENT_REASONS)}")
        mask = sum({CLOCK_EVENT_REASONS[r] for r in reasons})
    return HealthReading(
        memory=memory,
        ecc_dbe_volatile=_count(section.get("ecc_dbe_volatile"), "ecc_dbe_volatile", bad),
        pcie=PcieLink(**{k: _count(pcie.get(k), f"pcie.{k}", bad) for k in _PCIE_KEYS}),
        utilization_percent=_count(section.get("utilization_percent"), "utilization_percent", bad),
        clock_event_reasons=mask,
        nvlink_errors=_links(section.get("nvlink_errors"), bad),
    )


def _links(links: Any, bad: Callable[[str], ConfigError]) -> dict[int, dict[str, int]] | None:
    if links is None:
        return None
    if not isinstance(links, dict):
        raise bad(f"health.nvlink_errors must map a link number to its counters, got {links!r}")
    parsed = {}
    for link, counts in links.items():
        try:
            number = int(link)  # a JSON file's keys are strings
        except (TypeError, ValueError):
            raise bad(f"health.nvlink_errors: {link!r} is not a link number") from None
        if not isinstance(counts, dict) or set(counts) - set(NVLINK_COUNTERS):
            raise bad(f"health.nvlink_errors.{link} must map {', '.join(NVLINK_COUNTERS)} to counts")
        parsed[number] = {name: _count(v, f"nvlink_errors.{link}.{name}", bad) or 0 for name, v in counts.items()}
    return parsed
