"""`gpu.unlock_clocks`: give back the graphics-clock lock that gpu.lock_clocks replaced.

What comes back is what was there before remediate locked the clocks: no lock (the driver
picks the clocks again, nvmlDeviceResetGpuLockedClocks) or the person's own lock
(nvmlDeviceSetGpuLockedClocks with their range). Only while the GPU still has the lock
remediate set: a lock someone changed since is theirs and stays, and the result says why —
as gpu.restore_power_limit does for power limits. NVML cannot read a clock lock, so on real
GPUs that check cannot be made and the lock before remediate's is unknown: the clocks are
given back to the driver (the plan says so). Idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.gpu import _GpuAction, fallback_param, gpu_schema
from remediate.actions.gpu_lock_clocks import CLOCKS, LOCK, MEMORY_PREFIX, read_clocks
from remediate.actions.gpu_state import describe_gpu
from remediate.actions.schema import ParamSchema
from remediate.gpu import ClockState, GpuError, GpuInfo, capability, supports

UNLOCK = "unlock_gpu_clocks"


def decide(clocks: ClockState, record: Mapping[str, Any] | None, fallback: str) -> tuple[str, Any, str]:
    """(what to do: "unlock" | "lock" | "nothing", the range for "lock", why) for one GPU. Pure."""
    locked = clocks.locked_graphics_mhz
    if record is None:
        if fallback == "unlock":
            if clocks.lock_known and locked is None:
                return "nothing", None, "no record of a lock by remediate; the clocks are not locked"
            return "unlock", None, "no record of a lock by remediate: unlocking anyway (fallback: unlock)"
        return "nothing", None, "nothing to unlock: remediate has no record of locking this GPU's clocks"
    set_mhz = tuple(record["set_mhz"])
    run = record.get("run_id")
    if clocks.lock_known and locked != set_mhz:
        now = "unlocked" if locked is None else f"locked to {locked[0]}..{locked[1]} MHz"
        return (
            "nothing",
            None,
            (
                f"left alone: the clocks are {now}, not the {set_mhz[0]}..{set_mhz[1]} MHz remediate locked "
                f"in run {run} — someone changed them since"
            ),
        )
    previous = record.get("previous") or {"state": "unknown"}
    if previous["state"] == "locked":
        low, high = previous["mhz"]
        return "lock", (int(low), int(high)), f"restoring the lock {low}..{high} MHz replaced by run {run}"
    if previous["state"] == "unlocked":
        return "unlock", None, f"unlocking: the clocks were not locked before run {run}"
    return (
        "unlock",
        None,
        (
            f"unlocking the lock of run {run}: NVML cannot read a clock lock, so the one before it (if any) is "
            "unknown and the driver picks the clocks again"
        ),
    )


class UnlockClocksAction(_GpuAction):
    name: ClassVar[str] = "gpu.unlock_clocks"
    undoes: ClassVar[bool] = True
    description: ClassVar[str] = (
        "Give back the graphics-clock lock gpu.lock_clocks replaced (unlocked, or the person's own lock), "
        "if nobody changed it since."
    )
    schema: ClassVar[ParamSchema] = gpu_schema(
        fallback=fallback_param(
            "unlock", "with no record of a lock by remediate: 'unlock' unlocks the clocks, 'none' does nothing"
        )
    )

    def _notes(self) -> list[str]:
        if not all(supports(self.backend, m) for m in (CLOCKS, LOCK, UNLOCK)):
            return [f"the {self.backend.name} GPU backend cannot lock or unlock clocks: the step would fail"]
        return []

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        gpus = [describe_gpu(self.backend, gpu) | self._plan_one(gpu, params, ctx) for gpu in self._gpus(params)]
        return self._report(gpus, notes=self._notes())

    def _plan_one(self, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if not supports(self.backend, CLOCKS):
            return {}
        clocks = read_clocks(self.backend, gpu.uuid)
        what, target, why = decide(clocks, ctx.memory.recall(MEMORY_PREFIX + gpu.uuid), params["fallback"])
        return {"would": what, "target_mhz": list(target) if target else None, "reason": why}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        results = self._each(self._gpus(params), lambda gpu: self._unlock_one(gpu, params, ctx))
        return self._report(results, restored=sum(1 for r in results if r["outcome"] in ("unlocked", "relocked")))

    def _unlock_one(self, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        key = MEMORY_PREFIX + gpu.uuid
        clocks = read_clocks(self.backend, gpu.uuid)
        record = ctx.memory.recall(key)
        what, target, why = decide(clocks, record, params["fallback"])
        entry: dict[str, Any] = {"gpu": gpu.uuid, "index": gpu.index, "reason": why}
        if what == "nothing":
            if record is not None:
                ctx.memory.forget(key)  # someone else owns the clocks now
            entry["outcome"] = "left_alone"
            return entry
        if what == "lock":
            capability(self.backend, LOCK, doing="restore a GPU clock lock")(gpu.uuid, *target)
        else:
            capability(self.backend, UNLOCK, doing="unlock GPU clocks")(gpu.uuid)
        after = read_clocks(self.backend, gpu.uuid)
        expected = target if what == "lock" else None
        if after.lock_known and after.locked_graphics_mhz != expected:
            raise GpuError(
                f"GPU {gpu.uuid}: {'restored the lock ' + str(target) if target else 'unlocked'} but read back "
                f"{after.locked_graphics_mhz}"
            )
        ctx.memory.forget(key)
        entry.update(
            outcome="relocked" if what == "lock" else "unlocked",
            locked_graphics_mhz=list(target) if target else None,
            graphics_mhz_after=after.graphics_mhz,
        )
        return entry
