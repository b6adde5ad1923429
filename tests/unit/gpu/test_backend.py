"""Optional backend capabilities: found on a backend, through the floor, or a clear NotSupported."""

from __future__ import annotations

import copy

import pytest

from remediate.gpu import (
    BackendNotSupported,
    GpuInfo,
    GpuNotSupported,
    SimulatedBackend,
    capability,
    supports,
)
from remediate.gpu.errors import NVML_ERROR_NOT_SUPPORTED
from remediate.gpu.floor import BelowPowerFloor, FlooredBackend, with_floor


class ProtocolOnlyBackend:
    """A backend with the protocol's methods and nothing more (as a third-party backend may be)."""

    name = "minimal"

    def __init__(self, inner: SimulatedBackend) -> None:
        self._inner = inner

    def devices(self) -> list[GpuInfo]:
        return self._inner.devices()

    def device(self, uuid: str) -> GpuInfo:
        return self._inner.device(uuid)

    def set_power_limit(self, uuid: str, milliwatts: int) -> None:
        self._inner.set_power_limit(uuid, milliwatts)

    def parent_of_mig(self, mig_uuid: str) -> str:
        return self._inner.parent_of_mig(mig_uuid)


class CountingBackend(ProtocolOnlyBackend):
    """Has one capability beyond the protocol, and counts its calls."""

    def __init__(self, inner: SimulatedBackend) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    def count_processes(self, uuid: str) -> int:
        self.calls.append(uuid)
        return len(self.device(uuid).processes)


def test_a_missing_capability_is_a_clear_not_supported_naming_the_backend(sim: SimulatedBackend) -> None:
    backend = ProtocolOnlyBackend(sim)
    assert not supports(backend, "count_processes")
    with pytest.raises(BackendNotSupported) as caught:
        capability(backend, "count_processes", doing="count the processes of GPU 0")
    assert isinstance(caught.value, GpuNotSupported)  # classified like NVML's own NOT_SUPPORTED: permanent
    assert caught.value.code == NVML_ERROR_NOT_SUPPORTED
    assert str(caught.value) == (
        "count the processes of GPU 0 failed: the minimal GPU backend does not support it (no count_processes)"
    )


def test_the_floor_wrapper_passes_a_capability_through_and_still_guards_the_power_limit(
    sim: SimulatedBackend, gpu3: GpuInfo
) -> None:
    inner = CountingBackend(sim)
    floored = with_floor(inner, floor_watts=400, floor_percent=None)
    assert isinstance(floored, FlooredBackend)
    # Once the wrapper had only the protocol's methods: this was an AttributeError.
    assert supports(floored, "count_processes")
    assert capability(floored, "count_processes", doing="count")(gpu3.uuid) == 1
    assert inner.calls == [gpu3.uuid]
    with pytest.raises(BelowPowerFloor):
        floored.set_power_limit(gpu3.uuid, 300_000)
    assert sim.device(gpu3.uuid).power_limit_mw == gpu3.power_limit_mw


def test_the_floor_wrapper_lacks_what_its_inner_backend_lacks(sim: SimulatedBackend) -> None:
    floored = with_floor(ProtocolOnlyBackend(sim), floor_watts=None, floor_percent=50)
    assert not hasattr(floored, "count_processes")
    with pytest.raises(BackendNotSupported, match="the minimal GPU backend does not support it"):
        capability(floored, "count_processes", doing="count")


def test_a_copied_floor_wrapper_does_not_recurse(sim: SimulatedBackend) -> None:
    # copy builds the object without __init__: a lookup then must not chase a missing `inner` forever.
    floored = FlooredBackend(ProtocolOnlyBackend(sim), floor_watts=300, floor_percent=None)
    clone = copy.copy(floored)
    assert clone.name == "minimal"
    assert clone.devices() == sim.devices()
