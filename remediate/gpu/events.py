"""GPU fault events: what the node agent's fault watcher (remediate.agent.gpu_faults) waits for, from either backend.

Both backends offer the optional capability `open_events()` (see remediate.gpu.backend), which returns an
`EventWatch`: NVML's event set (remediate.gpu.nvml_events: nvmlDeviceRegisterEvents for XID critical errors
and double-bit ECC errors, nvmlEventSetWait_v2) or the simulator's (remediate.gpu.sim_events: events a test
or a demo appends to a file beside the device file). The watcher runs the same code on both. Watching is
read-only: registering for events changes no setting of a GPU.

A GPU that fell off the bus sends no event (NVML cannot reach it): `lost()` asks each GPU a cheap question
and names the GPUs that answer NVML_ERROR_GPU_IS_LOST.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

XID = "xid"
DOUBLE_BIT_ECC = "double_bit_ecc"
GPU_LOST = "gpu_lost"
KINDS = (XID, DOUBLE_BIT_ECC, GPU_LOST)

SERIOUS_XIDS = frozenset({48, 64, 74, 79, 92, 95, 119, 120, 140})
"""The XIDs that quarantine a node: the same list as GPUXidCritical in alertmanager/rules/xid.rules.yml.
NVML's XID event also carries application XIDs (13, 31, 43, 45, ...), which kill a process, not the node."""
DOUBLE_BIT_ECC_XID = 48
"""NVIDIA's XID for a double-bit ECC error: what a double-bit ECC event is reported as."""
FELL_OFF_THE_BUS_XID = 79
"""NVIDIA's XID for "GPU has fallen off the bus": what a lost GPU is reported as."""


@dataclass(frozen=True)
class GpuEvent:
    """One fault of one GPU, as the watcher got it."""

    kind: str
    """xid, double_bit_ecc or gpu_lost."""
    uuid: str
    """The GPU's UUID ("GPU-..."), or "" where NVML could not say which GPU sent it."""
    index: int | None
    xid: int
    """The XID number (XID events), 48 for double-bit ECC, 79 for a lost GPU."""
    at: float
    """When the watcher got it (time.time())."""

    @property
    def serious(self) -> bool:
        """Whether it quarantines the node (an application XID does not)."""
        return self.kind != XID or self.xid in SERIOUS_XIDS


class EventWatch(Protocol):
    """GPU fault events of every GPU of this node, from one backend. Used by one thread."""

    registered: dict[str, tuple[str, ...]]
    """The event kinds registered per GPU UUID (a GPU may support fewer than asked for)."""

    def wait(self, timeout: float) -> GpuEvent | None:
        """The next event, or None when none came within `timeout` seconds."""
        ...

    def lost(self) -> list[tuple[str, int]]:
        """(uuid, index) of each GPU that answers GPU_IS_LOST now."""
        ...

    def close(self) -> None:
        """Free the event set."""
        ...
