"""`gpu.lock_clocks`: cap a hot GPU's graphics clock (nvidia-smi -lgc), remembering the lock it replaces.

The second rung of a hot GPU's ladder, after the power cap: NVML's
nvmlDeviceSetGpuLockedClocks keeps the graphics clock within [min, max]. The maximum is
`max_mhz` or `percent_of_max` of the GPU's maximum graphics clock, snapped down to a
clock the GPU supports; the minimum is `min_mhz` (snapped up) or the lowest supported
clock. A value outside the supported clocks is refused before NVML is asked. A lock the
GPU already has with a lower maximum is kept unless `allow_increase` says otherwise.

Before changing a GPU the action remembers what it replaces (ActionMemory, like the power
limit): unlocked, the person's own lock, or "unknown" — NVML has no read of a clock lock,
so on real GPUs the lock before remediate's is not known and `gpu.unlock_clocks` gives
the clocks back to the driver. The simulator knows its lock, so there the previous lock is
restored and a lock changed by someone since is left alone. Idempotent: locking again to
the same range changes nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.gpu import _GpuAction, gpu_schema, put_memory_back
from remediate.actions.gpu_state import describe_gpu
from remediate.actions.schema import Param, ParamSchema, between, positive
from remediate.errors import ParamsError
from remediate.gpu import (
    ClockState,
    GpuBackend,
    GpuError,
    GpuInfo,
    GpuInvalidArgument,
    GpuNotSupported,
    capability,
    supports,
)

MEMORY_PREFIX = "gpu.locked_clocks/"
CLOCKS = "clocks"
LOCK = "lock_gpu_clocks"


def lock_state(clocks: ClockState) -> dict[str, Any]:
    """What a GPU's graphics-clock lock is now, as remembered: unlocked, locked [min, max], or unknown (NVML)."""
    if not clocks.lock_known:
        return {"state": "unknown"}
    if clocks.locked_graphics_mhz is None:
        return {"state": "unlocked"}
    return {"state": "locked", "mhz": list(clocks.locked_graphics_mhz)}


def read_clocks(backend: GpuBackend, uuid: str) -> ClockState:
    return capability(backend, CLOCKS, doing=f"read the clocks of {uuid}")(uuid)


@dataclass(frozen=True)
class LockPlan:
    """The lock to set on one GPU, and why."""

    gpu: GpuInfo
    clocks: ClockState
    target: tuple[int, int]
    reasons: tuple[str, ...]

    @property
    def changes(self) -> bool:
        # Without a read of the lock (NVML) the lock is set every time: setting it again is harmless.
        return not self.clocks.lock_known or self.clocks.locked_graphics_mhz != self.target

    def to_dict(self) -> dict[str, Any]:
        locked = self.clocks.locked_graphics_mhz
        now = f"{locked[0]}..{locked[1]} MHz" if locked else ("unlocked" if self.clocks.lock_known else "unknown")
        return {
            "target_mhz": list(self.target),
            "change": f"{now} -> {self.target[0]}..{self.target[1]} MHz" if self.changes else "unchanged",
            "reasons": list(self.reasons),
        }


def _snap_down(supported: tuple[int, ...], mhz: float) -> int:
    return max(v for v in supported if v <= mhz)


def _snap_up(supported: tuple[int, ...], mhz: float) -> int:
    return min(v for v in supported if v >= mhz)


def compute_lock(gpu: GpuInfo, clocks: ClockState, params: Mapping[str, Any]) -> LockPlan:
    """The graphics-clock range to lock on one GPU. Pure: the numbers come from `clocks` as read just before.

    GpuNotSupported where the GPU lists no supported clocks, GpuInvalidArgument for an explicit value
    outside them (both permanent: the plan says so and the step fails without asking NVML).
    """
    supported = clocks.supported_graphics_mhz
    if not supported:
        raise GpuNotSupported(
            f"GPU {gpu.index} {gpu.uuid} lists no supported graphics clocks: it cannot lock its clocks "
            "(NVML's clock locks need Volta or later and a data-center driver)"
        )
    low, high = supported[0], supported[-1]
    reasons: list[str] = []
    if params.get("max_mhz") is not None:
        wanted: float = params["max_mhz"]
        if not low <= wanted <= high:
            raise GpuInvalidArgument(
                f"max_mhz {wanted} is outside the supported graphics clocks of GPU {gpu.index} {gpu.uuid}: "
                f"{low}..{high} MHz"
            )
        reasons.append(f"asked for at most {wanted} MHz")
    else:
        base = clocks.max_graphics_mhz or high
        wanted = base * params["percent_of_max"] / 100
        reasons.append(f"{params['percent_of_max']:g}% of the maximum graphics clock {base} MHz")
        if wanted < low:
            wanted = low
            reasons.append(f"raised to the lowest supported clock {low} MHz")
        wanted = min(wanted, high)
    top = _snap_down(supported, math.floor(wanted))
    if top != wanted:
        reasons.append(f"{top} MHz: the highest supported clock not above {wanted:g} MHz")
    if params.get("min_mhz") is not None:
        if not low <= params["min_mhz"] <= high:
            raise GpuInvalidArgument(
                f"min_mhz {params['min_mhz']} is outside the supported graphics clocks of GPU {gpu.index} "
                f"{gpu.uuid}: {low}..{high} MHz"
            )
        bottom = _snap_up(supported, params["min_mhz"])
    else:
        bottom = low
    if bottom > top:
        raise GpuInvalidArgument(
            f"the lock's minimum {bottom} MHz is above its maximum {top} MHz on GPU {gpu.index} {gpu.uuid}"
        )
    target = (bottom, top)
    locked = clocks.locked_graphics_mhz
    if locked is not None and locked[1] < top and not params.get("allow_increase"):
        reasons.append(
            f"kept at the current lock {locked[0]}..{locked[1]} MHz: it is already lower (allow_increase is false)"
        )
        target = locked
    elif clocks.lock_known and locked == target:
        reasons.append("already locked to that range")
    return LockPlan(gpu, clocks, target, tuple(reasons))


class LockClocksAction(_GpuAction):
    name: ClassVar[str] = "gpu.lock_clocks"
    runs_if_owner_unknown: ClassVar[bool] = True  # the GPUs keep working, slower; unlock_clocks undoes it
    description: ClassVar[str] = (
        "Lock a GPU's graphics clock to a lower range (nvidia-smi -lgc) through NVML; the lock it replaces is "
        "remembered for gpu.unlock_clocks."
    )
    schema: ClassVar[ParamSchema] = gpu_schema(
        max_mhz=Param(int, check=positive, doc="highest graphics clock, MHz (within the supported clocks)"),
        percent_of_max=Param(
            float, check=between(10, 100), doc="highest graphics clock as % of the GPU's maximum (snapped down)"
        ),
        min_mhz=Param(int, check=positive, doc="lowest graphics clock, MHz (default: the lowest supported clock)"),
        allow_increase=Param(bool, default=False, doc="may the new lock be above a lower lock already set"),
    )

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        result = super().validate(params)
        given = [key for key in ("max_mhz", "percent_of_max") if key in result]
        if len(given) != 1:
            raise ParamsError("give exactly one of max_mhz, percent_of_max")
        if "max_mhz" in result and "min_mhz" in result and result["min_mhz"] > result["max_mhz"]:
            raise ParamsError(f"min_mhz {result['min_mhz']} is above max_mhz {result['max_mhz']}")
        return result

    def _notes(self, params: Mapping[str, Any]) -> list[str]:
        notes = []
        if self._mig_note(params):
            notes.append(
                "the alert names a MIG device: the clocks are locked on its parent GPU, for every MIG instance"
            )
        if not (supports(self.backend, CLOCKS) and supports(self.backend, LOCK)):
            notes.append(f"the {self.backend.name} GPU backend cannot lock clocks: the step would fail")
        return notes

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        gpus = [describe_gpu(self.backend, gpu) | self._plan_one(gpu, params) for gpu in self._gpus(params)]
        would_change = sum(1 for g in gpus if g.get("change") not in (None, "unchanged", "refused"))
        return self._report(gpus, would_change=would_change, notes=self._notes(params))

    def _plan_one(self, gpu: GpuInfo, params: Mapping[str, Any]) -> dict[str, Any]:
        if not supports(self.backend, CLOCKS):
            return {}
        try:
            return compute_lock(gpu, read_clocks(self.backend, gpu.uuid), params).to_dict()
        except GpuError as exc:
            return {"change": "refused", "reasons": [str(exc)]}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        lock = capability(self.backend, LOCK, doing="lock GPU clocks")
        results = self._each(self._gpus(params), lambda gpu: self._lock_one(lock, gpu, params, ctx))
        changed = sum(1 for r in results if r["outcome"] == "locked")
        return self._report(results, changed=changed, notes=self._notes(params))

    def _lock_one(self, lock: Any, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        clocks = read_clocks(self.backend, gpu.uuid)
        plan = compute_lock(gpu, clocks, params)
        entry = {"gpu": gpu.uuid, "index": gpu.index, **plan.to_dict()}
        if not plan.changes:
            entry["outcome"] = "unchanged"
            return entry
        key = MEMORY_PREFIX + gpu.uuid
        before = ctx.memory.recall(key)
        now = lock_state(clocks)
        # A second lock over remediate's own keeps the state from before the first: that is what unlock restores.
        ours = before is not None and (now["state"] == "unknown" or now.get("mhz") == before.get("set_mhz"))
        previous = before["previous"] if ours and before is not None else now
        ctx.memory.remember(
            key,
            {"previous": previous, "set_mhz": list(plan.target), "run_id": ctx.run_id, "at": time.time()},
            run_id=ctx.run_id,
        )
        try:
            lock(gpu.uuid, *plan.target)
        except Exception:
            put_memory_back(ctx, key, before)
            raise
        after = read_clocks(self.backend, gpu.uuid)
        if after.lock_known and after.locked_graphics_mhz != plan.target:
            # NVML said yes but the lock reads back otherwise: someone else holds the GPU's clocks, not us.
            put_memory_back(ctx, key, before)
            raise GpuError(
                f"GPU {gpu.uuid}: locked {plan.target[0]}..{plan.target[1]} MHz but read back "
                f"{after.locked_graphics_mhz} (another agent or the driver changed it)"
            )
        entry.update(
            outcome="locked",
            previous=now,
            remembered_previous=previous,
            graphics_mhz_after=after.graphics_mhz,
        )
        return entry
