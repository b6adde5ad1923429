"""`gpu.reset_clocks`: unlock a GPU's locked GPU and memory clocks, so the driver picks its clocks again.

Clocks locked with `nvidia-smi -lgc` / `-lmc` (benchmarks, tuning, a stuck profiler) keep
a GPU at a fixed frequency whatever its temperature or power; the escalation ladder's
first rung for a slow or hot GPU puts them back to the driver's own choice before
touching power limits. This is what `nvidia-smi -rgc` and `-rmc` do (NVML's
nvmlDeviceResetGpuLockedClocks and nvmlDeviceResetMemoryLockedClocks). Resetting is
idempotent: an unlocked GPU stays unlocked. There is nothing to remember and nothing
to restore: a lock someone set on purpose is theirs to set again.

The reset is an optional backend capability (`reset_locked_clocks`, see
remediate.gpu.backend): on a backend without it the plan says so and the step fails
with BackendNotSupported, a permanent GPU error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.gpu import _GpuAction, gpu_schema
from remediate.actions.schema import ParamSchema
from remediate.gpu import GpuInfo, capability, parse_gpu_ref, supports

CAPABILITY = "reset_locked_clocks"


class ResetClocksAction(_GpuAction):
    name: ClassVar[str] = "gpu.reset_clocks"
    runs_if_owner_unknown: ClassVar[bool] = True  # back to the default clocks: the GPUs keep working
    description: ClassVar[str] = "Unlock a GPU's locked GPU and memory clocks (nvidia-smi -rgc -rmc) through NVML."
    schema: ClassVar[ParamSchema] = gpu_schema()

    def _notes(self, params: Mapping[str, Any]) -> list[str]:
        notes = []
        if parse_gpu_ref(params["gpu"]).kind == "mig":
            notes.append("the alert names a MIG device: the clocks are reset on its parent GPU, for every MIG instance")
        if not supports(self.backend, CAPABILITY):
            notes.append(f"the {self.backend.name} GPU backend cannot reset clocks: the step would fail")
        return notes

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        change = "unlock GPU and memory clocks"
        gpus = [{"gpu": g.uuid, "index": g.index, "name": g.name, "change": change} for g in self._gpus(params)]
        return self._report(gpus, notes=self._notes(params))

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        reset = capability(self.backend, CAPABILITY, doing="reset locked clocks")

        def reset_one(gpu: GpuInfo) -> dict[str, Any]:
            reset(gpu.uuid)
            return {"gpu": gpu.uuid, "index": gpu.index, "outcome": "reset"}

        results = self._each(self._gpus(params), reset_one)
        return self._report(results, reset=len(results), notes=self._notes(params))
