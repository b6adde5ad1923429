"""PCI bus ids in NVML's canonical form ("00000000:3B:00.0").

NVML, nvidia-smi and dcgm-exporter's `pci_bus_id` label spell the same address
in different ways (4- or 8-digit domain, upper or lower case, with or without the
function). Selection, both backends and the simulator's file loader all compare
addresses in one canonical form, so they share this function. Kept apart from
selection.py so the backends can use it without importing the selection layer.
"""

from __future__ import annotations

import re

# domain (1-8 hex digits, optional) : bus (1-2) : device (1-2) [. function (0-7)], ASCII only, nothing around it.
_PCI_RE = re.compile(
    r"(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})(?:\.(?P<function>[0-7]))?",
    re.ASCII,
)
_MAX_DEVICE = 0x1F  # a PCI device number has 5 bits


def normalize_pci_bus_id(text: str) -> str:
    """Return `text` as "DDDDDDDD:BB:DD.F" (upper-case hex, 8-digit domain); raise ValueError if it is not a PCI id.

    Accepts NVML's forms "domain:bus:device.function", "domain:bus:device" and
    "bus:device.function", plus "bus:device"; a missing domain is 0 and a missing
    function is 0 (GPUs are function 0).
    """
    if not isinstance(text, str):
        raise ValueError(f"not a PCI bus id: {text!r}")
    match = _PCI_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a PCI bus id: {text!r} (expected e.g. 00000000:3B:00.0, 0000:3b:00.0 or 3b:00.0)")
    domain = int(match["domain"] or "0", 16)
    bus = int(match["bus"], 16)
    device = int(match["device"], 16)
    function = int(match["function"] or "0")
    if device > _MAX_DEVICE:
        raise ValueError(f"not a PCI bus id: {text!r} (device number {device:#x} is above {_MAX_DEVICE:#x})")
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}"
