"""`gpu.reset`: reset a GPU through the driver, after a drain, when an XID says it needs one.

A GPU reset (`nvidia-smi --gpu-reset -i BUS`, see remediate.gpu.nvml.NvmlBackend.reset_gpu)
re-initialises the GPU: pending page retirements and row remaps take effect, locked
clocks and the power limit go back to their defaults. It kills whatever runs on the
GPU, so the action refuses — before asking the driver, with the reason — while:

- any compute process is on the GPU (NVML's compute processes, named with their pids);
- MIG instances exist on it (they must be destroyed first; MIG mode alone is fine);
- an active NVLink connects it directly to another GPU (no NVSwitch between): the driver
  resets such GPUs only together. NVSwitch systems (HGX) let the fabric manager retrain
  one GPU's links, so links to a switch do not block. `allow_nvlink_peers: true` lifts
  the peer refusal where the operator knows the peers are drained too.

The plan lists the GPU's state and every blocker. Not idempotent: a step interrupted after
the reset started is not run again (the executor's rule for such actions). It is a node
action, run by the node's agent, and not breaker-gated itself: it can only run on a GPU
with nothing on it, i.e. after the ladder's drain, which the breaker already caps.
Records remediate kept of the GPU's power limit and clock lock are dropped: the reset put
the defaults back, so there is nothing left to restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.gpu import MEMORY_PREFIX as POWER_PREFIX
from remediate.actions.gpu import _GpuAction, gpu_schema
from remediate.actions.gpu_lock_clocks import MEMORY_PREFIX as CLOCK_PREFIX
from remediate.actions.gpu_state import describe_gpu
from remediate.actions.schema import Param, ParamSchema
from remediate.gpu import GpuBackend, GpuInfo, GpuResetRefused, capability, supports

RESET = "reset_gpu"
STATE = "reset_state"


def blockers(gpu: GpuInfo, backend: GpuBackend, *, allow_nvlink_peers: bool) -> tuple[list[str], dict[str, Any]]:
    """(why this GPU must not be reset now — empty when it may, its MIG/NVLink state as NVML reports it)."""
    found = []
    if gpu.processes:
        listed = ", ".join(f"{p.pid} ({p.name})" if p.name else str(p.pid) for p in gpu.processes)
        found.append(f"{len(gpu.processes)} compute process(es) on the GPU: pid {listed}")
    if not supports(backend, STATE):
        return found, {"state": f"not supported by the {backend.name} GPU backend"}
    state = capability(backend, STATE, doing=f"read the MIG and NVLink state of {gpu.uuid}")(gpu.uuid)
    if state.mig_devices:
        found.append(
            f"MIG mode is enabled with {len(state.mig_devices)} MIG instance(s) ({', '.join(state.mig_devices)}): "
            "destroy them first"
        )
    if state.nvlink_gpu_peers and not allow_nvlink_peers:
        found.append(
            f"active NVLinks {list(state.active_nvlinks or ())} connect it directly to GPU(s) "
            f"{', '.join(state.nvlink_gpu_peers)}: the driver resets directly linked GPUs only together "
            "(set allow_nvlink_peers when they are drained too)"
        )
    return found, state.to_dict()


class ResetGpuAction(_GpuAction):
    name: ClassVar[str] = "gpu.reset"
    description: ClassVar[str] = (
        "Reset a GPU through the driver (nvidia-smi --gpu-reset); refused while compute processes, MIG instances "
        "or directly linked NVLink GPU peers are on it."
    )
    idempotent: ClassVar[bool] = False
    schema: ClassVar[ParamSchema] = gpu_schema(
        allow_nvlink_peers=Param(
            bool,
            default=False,
            doc="reset even when active NVLinks connect the GPU directly to other GPUs (they must be idle too)",
        )
    )

    def _notes(self, params: Mapping[str, Any]) -> list[str]:
        notes = []
        if self._mig_note(params):
            notes.append("the alert names a MIG device: the reset is of its parent GPU, every MIG instance with it")
        if not supports(self.backend, RESET):
            notes.append(f"the {self.backend.name} GPU backend cannot reset GPUs: the step would fail")
        return notes

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        gpus = []
        for gpu in self._gpus(params):
            found, state = blockers(gpu, self.backend, allow_nvlink_peers=params["allow_nvlink_peers"])
            would = "refuse" if found else "reset"
            gpus.append(describe_gpu(self.backend, gpu) | {"reset_state": state, "blocked_by": found, "would": would})
        would_reset = sum(1 for g in gpus if g["would"] == "reset")
        return self._report(gpus, would_reset=would_reset, notes=self._notes(params))

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        reset = capability(self.backend, RESET, doing="reset a GPU")
        gpus = self._gpus(params)
        # Every GPU is checked before any is reset: `gpu: all` resets all of them or none.
        refusals = []
        for gpu in gpus:
            found, _ = blockers(gpu, self.backend, allow_nvlink_peers=params["allow_nvlink_peers"])
            refusals.extend(f"GPU {gpu.index} {gpu.uuid}: {why}" for why in found)
        if refusals:
            raise GpuResetRefused(
                f"GPU reset refused, nothing was reset: {'; '.join(refusals)}; {GpuResetRefused.advice}"
            )

        def reset_one(gpu: GpuInfo) -> dict[str, Any]:
            reset(gpu.uuid)
            dropped = [prefix for prefix in (POWER_PREFIX, CLOCK_PREFIX) if ctx.memory.recall(prefix + gpu.uuid)]
            for prefix in dropped:
                ctx.memory.forget(prefix + gpu.uuid)
            entry = describe_gpu(self.backend, self.backend.device(gpu.uuid))
            return entry | {"outcome": "reset", "dropped_records": [prefix.rstrip("/") for prefix in dropped]}

        results = self._each(gpus, reset_one)
        return self._report(results, reset=len(results), notes=self._notes(params))
