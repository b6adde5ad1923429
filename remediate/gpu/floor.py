"""A node's own power floor: a GpuBackend wrapper that refuses to set a limit below it.

The floor is a setting of the process that owns the GPUs (the node agent, or the
server on a single host): `gpu_power_floor_watts` and/or `gpu_power_floor_percent`
(of each GPU's default limit). Whatever a playbook or a server asks, a limit below
the floor is refused with `BelowPowerFloor` (a permanent error) and the GPU keeps
its limit. Reads pass through unchanged, so plans still show what the playbook
would have set; the refusal is in the step's error.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

from remediate.gpu.backend import GpuBackend
from remediate.gpu.errors import GpuError
from remediate.gpu.model import GpuInfo


class BelowPowerFloor(GpuError):
    """The limit asked for is below this node's power floor."""


@dataclass(eq=False)
class FlooredBackend:
    """Delegates to `inner`; `set_power_limit` refuses values under the floor of that GPU."""

    inner: GpuBackend
    _: KW_ONLY
    floor_watts: float | None
    floor_percent: float | None

    @property
    def name(self) -> str:
        return self.inner.name

    def __getattr__(self, attribute: str) -> Any:
        # Only what the floor does not change gets here: every read and every other capability of the inner
        # backend (resetting clocks, ...) passes through, and one it lacks stays an AttributeError for `capability`.
        if attribute == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def floor_mw(self, gpu: GpuInfo) -> int:
        floor = 0.0
        if self.floor_watts is not None:
            floor = max(floor, self.floor_watts * 1000)
        if self.floor_percent is not None:
            floor = max(floor, gpu.default_limit_mw * self.floor_percent / 100)
        return round(floor)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        gpu = self.inner.device(uuid)
        floor = self.floor_mw(gpu)
        if milliwatts < floor:
            parts = []
            if self.floor_watts is not None:
                parts.append(f"gpu_power_floor_watts={self.floor_watts:g}")
            if self.floor_percent is not None:
                parts.append(f"gpu_power_floor_percent={self.floor_percent:g}")
            raise BelowPowerFloor(
                f"refused to set GPU {uuid} to {milliwatts / 1000:g} W: below this node's power floor "
                f"{floor / 1000:g} W ({', '.join(parts)}); the limit stays {gpu.power_limit_mw / 1000:g} W"
            )
        self.inner.set_power_limit(uuid, milliwatts)


def with_floor(backend: GpuBackend, *, floor_watts: float | None, floor_percent: float | None) -> GpuBackend:
    """`backend` itself when no floor is set, else wrapped in a FlooredBackend."""
    if floor_watts is None and floor_percent is None:
        return backend
    return FlooredBackend(backend, floor_watts=floor_watts, floor_percent=floor_percent)
