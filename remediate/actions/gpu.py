"""`gpu.set_power_limit` and `gpu.restore_power_limit`: lower a hot GPU's power limit, put it back later.

The new limit is computed per GPU from the params (watts, percent of the default,
or a cut of the current limit), raised to a floor, clamped to the device's
constraints, and never above the current limit unless `allow_increase` says so
(someone may have set a stricter limit on purpose). It is set with NVML's
unversioned call and read back: a mismatch is a failure.

Before changing a GPU, the action remembers the limit it replaces (ActionMemory,
kept in the store, so it survives restarts). Restore puts that limit back only
while the GPU still has the limit remediate set: if someone changed it since,
their value stays and the result says why. Both actions are idempotent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ParamsError
from remediate.gpu import GpuBackend, GpuError, GpuInfo, parse_gpu_ref, resolve
from remediate.gpu.errors import GpuSelectionError

BackendProvider = Callable[[], GpuBackend]
MEMORY_PREFIX = "gpu.power_limit/"


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000, 3)


def _check_gpu_ref(text: str) -> str | None:
    try:
        parse_gpu_ref(text)
    except GpuSelectionError as exc:
        return str(exc)
    return None


def _check_one_gpu(text: str) -> str | None:
    """A GPU reference rendered from a label must name one GPU: `UUID="all"` once lowered every GPU
    of a node (issue 15). `all` stays available, written literally in the playbook."""
    if parse_gpu_ref(text).kind == "all":
        return (
            f"rendered from the alert to {text!r}, which names every GPU of the node; a templated GPU reference "
            "must name exactly one GPU (an index, UUID, PCI bus id or MIG UUID). Write gpu: all literally "
            "in the playbook to mean every GPU"
        )
    return None


def _percent(low: float, high: float) -> Callable[[float], str | None]:
    return lambda value: None if low <= value <= high else f"must be between {low:g} and {high:g}"


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be greater than 0"


GPU_PARAM = Param(
    str,
    required=True,
    check=_check_gpu_ref,
    templated_check=_check_one_gpu,
    doc="GPU index, UUID, PCI bus id, MIG UUID, or 'all' (written literally: a template must name one GPU)",
)


def _with_done(exc: GpuError, done: list[dict[str, Any]]) -> GpuError:
    """`exc`, its message extended by what this step already did to other GPUs (`gpu: all`).

    The audit history keeps only a failed step's error, so without this a GPU lowered
    before another one failed would not show there. Same class and NVML code as `exc`.
    """
    if not done:
        return exc
    parts = []
    for r in done:
        what = r["outcome"]
        if what in ("set", "restored"):
            what = f"{what} {r['previous_w']:g} W -> {r['new_w']:g} W"
            if r["outcome"] == "set":
                what += " (original remembered for restore)"
        parts.append(f"GPU {r['index']} {r['gpu']} {what}")
    return type(exc)(f"{exc}; already done in this step: {'; '.join(parts)}", code=exc.code)


@dataclass(frozen=True)
class LimitPlan:
    """What set_power_limit would do to one GPU, and why."""

    gpu: GpuInfo
    target_mw: int
    reasons: tuple[str, ...]

    @property
    def changes(self) -> bool:
        return self.target_mw != self.gpu.power_limit_mw

    def to_dict(self) -> dict[str, Any]:
        g = self.gpu
        return {
            "gpu": g.uuid,
            "index": g.index,
            "name": g.name,
            "pci_bus_id": g.pci_bus_id,
            "current_w": _watts(g.power_limit_mw),
            "default_w": _watts(g.default_limit_mw),
            "min_w": _watts(g.min_limit_mw),
            "max_w": _watts(g.max_limit_mw),
            "power_usage_w": _watts(g.power_usage_mw),
            "temperature_c": g.temperature_c,
            "target_w": _watts(self.target_mw),
            "change": (
                f"{_watts(g.power_limit_mw):g} W -> {_watts(self.target_mw):g} W" if self.changes else "unchanged"
            ),
            "reasons": list(self.reasons),
        }


def compute_limit(gpu: GpuInfo, params: Mapping[str, Any]) -> LimitPlan:
    """The limit to set on one GPU. Pure: the numbers come from `gpu` as read just before."""
    reasons: list[str] = []
    if params.get("watts") is not None:
        target = params["watts"] * 1000
        reasons.append(f"asked for {params['watts']:g} W")
    elif params.get("percent_of_default") is not None:
        target = gpu.default_limit_mw * params["percent_of_default"] / 100
        reasons.append(f"{params['percent_of_default']:g}% of the default {_watts(gpu.default_limit_mw):g} W")
    else:
        target = gpu.power_limit_mw * (1 - params["reduce_by_percent"] / 100)
        reasons.append(f"current {_watts(gpu.power_limit_mw):g} W reduced by {params['reduce_by_percent']:g}%")
    floor = 0.0
    if params.get("min_watts") is not None:
        floor = max(floor, params["min_watts"] * 1000)
    if params.get("min_percent_of_default") is not None:
        floor = max(floor, gpu.default_limit_mw * params["min_percent_of_default"] / 100)
    if target < floor:
        target = floor
        reasons.append(f"raised to the floor {_watts(int(floor)):g} W")
    if target < gpu.min_limit_mw:
        target = gpu.min_limit_mw
        reasons.append(f"clamped to the device minimum {_watts(gpu.min_limit_mw):g} W")
    if target > gpu.max_limit_mw:
        target = gpu.max_limit_mw
        reasons.append(f"clamped to the device maximum {_watts(gpu.max_limit_mw):g} W")
    target_mw = round(target)
    if target_mw > gpu.power_limit_mw and not params.get("allow_increase"):
        reasons.append(
            f"kept at the current {_watts(gpu.power_limit_mw):g} W: it is already lower (allow_increase is false)"
        )
        target_mw = gpu.power_limit_mw
    if target_mw == gpu.power_limit_mw and len(reasons) == 1:
        reasons.append("already at that limit")
    return LimitPlan(gpu, target_mw, tuple(reasons))


class _GpuAction(Action):
    where: ClassVar[Where] = Where.NODE
    idempotent: ClassVar[bool] = True

    def __init__(self, backend: BackendProvider) -> None:
        self._backend_provider = backend

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        return cls(deps.gpu_backend)

    @property
    def backend(self) -> GpuBackend:
        return self._backend_provider()

    def _gpus(self, params: Mapping[str, Any]) -> list[GpuInfo]:
        return resolve(parse_gpu_ref(params["gpu"]), self.backend)

    def _mig_note(self, params: Mapping[str, Any]) -> list[str]:
        if parse_gpu_ref(params["gpu"]).kind == "mig":
            return ["the alert names a MIG device: the limit applies to its parent GPU and every MIG instance on it"]
        return []


class SetPowerLimitAction(_GpuAction):
    name: ClassVar[str] = "gpu.set_power_limit"
    description: ClassVar[str] = "Lower a GPU's power limit through NVML (clamped, floored, read back)."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "gpu": GPU_PARAM,
            "watts": Param(float, check=_positive, doc="new limit in watts"),
            "percent_of_default": Param(float, check=_percent(1, 100), doc="new limit as % of the default limit"),
            "reduce_by_percent": Param(float, check=_percent(1, 90), doc="cut the current limit by this %"),
            "min_watts": Param(float, check=_positive, doc="never set below this"),
            "min_percent_of_default": Param(float, check=_percent(1, 100), doc="never set below this % of default"),
            "allow_increase": Param(bool, default=False, doc="may the new limit be above the current one"),
        }
    )

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        result = super().validate(params)
        given = [key for key in ("watts", "percent_of_default", "reduce_by_percent") if key in result]
        if len(given) != 1:
            raise ParamsError("give exactly one of watts, percent_of_default, reduce_by_percent")
        return result

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plans = [compute_limit(gpu, params) for gpu in self._gpus(params)]
        return {
            "backend": self.backend.name,
            "gpus": [p.to_dict() for p in plans],
            "would_change": sum(p.changes for p in plans),
            "notes": self._mig_note(params),
        }

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        results = []
        for gpu in self._gpus(params):
            plan = compute_limit(gpu, params)
            entry = plan.to_dict()
            if not plan.changes:
                entry["outcome"] = "unchanged"
                results.append(entry)
                continue
            key = MEMORY_PREFIX + gpu.uuid
            before = ctx.memory.recall(key)
            original = before["original_mw"] if before and before.get("set_mw") == gpu.power_limit_mw else None
            ctx.memory.remember(
                key,
                {
                    "original_mw": original if original is not None else gpu.power_limit_mw,
                    "set_mw": plan.target_mw,
                    "run_id": ctx.run_id,
                    "at": time.time(),
                },
                run_id=ctx.run_id,
            )
            applied = False
            try:
                self.backend.set_power_limit(gpu.uuid, plan.target_mw)
                applied = True
                read_back = self.backend.device(gpu.uuid).power_limit_mw
            except Exception as exc:
                # Only a failed set leaves the GPU as it was. If just the read-back failed, the GPU has
                # the new limit: keep the record, or a retry (finding it already there) and the restore
                # would never know the original.
                if not applied:
                    put_memory_back(ctx, key, before)
                if isinstance(exc, GpuError) and results:
                    raise _with_done(exc, results) from exc
                raise
            if read_back != plan.target_mw:
                put_memory_back(ctx, key, before)
                raise _with_done(
                    GpuError(
                        f"GPU {gpu.uuid}: set {_watts(plan.target_mw):g} W but read back {_watts(read_back):g} W "
                        "(another agent or the driver changed it)"
                    ),
                    results,
                )
            entry.update(
                outcome="set",
                previous_w=_watts(gpu.power_limit_mw),
                new_w=_watts(read_back),
                remembered_original_w=_watts(original if original is not None else gpu.power_limit_mw),
            )
            results.append(entry)
        return {
            "backend": self.backend.name,
            "gpus": results,
            "changed": sum(1 for r in results if r["outcome"] == "set"),
            "notes": self._mig_note(params),
        }


def put_memory_back(ctx: StepContext, key: str, before: dict[str, Any] | None) -> None:
    """Put an action's memory of a GPU back as it was before this step (its change did not happen)."""
    if before is None:
        ctx.memory.forget(key)
    else:
        ctx.memory.remember(key, before, run_id=int(before.get("run_id", ctx.run_id)))


class RestorePowerLimitAction(_GpuAction):
    name: ClassVar[str] = "gpu.restore_power_limit"
    description: ClassVar[str] = "Put back the power limit remediate replaced, if nobody changed it since."
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "gpu": GPU_PARAM,
            "fallback": Param(
                str,
                default="none",
                choices=("none", "default"),
                doc="with no record of a change by remediate: 'default' sets the default limit, 'none' does nothing",
            ),
        }
    )

    def _decide(self, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> tuple[int | None, str]:
        """(limit to set or None, why) for one GPU."""
        record = ctx.memory.recall(MEMORY_PREFIX + gpu.uuid)
        if record is None:
            if params["fallback"] == "default":
                if gpu.power_limit_mw == gpu.default_limit_mw:
                    return None, "no record of a change by remediate; already at the default limit"
                return gpu.default_limit_mw, "no record of a change by remediate: falling back to the default limit"
            return None, "nothing to restore: remediate has no record of changing this GPU's limit"
        if gpu.power_limit_mw != record["set_mw"]:
            return None, (
                f"left alone: the limit is {_watts(gpu.power_limit_mw):g} W, not the {_watts(record['set_mw']):g} W "
                f"remediate set in run {record.get('run_id')} — someone changed it since"
            )
        return int(record["original_mw"]), (
            f"restoring {_watts(record['original_mw']):g} W replaced by run {record.get('run_id')}"
        )

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        gpus = []
        for gpu in self._gpus(params):
            target, why = self._decide(gpu, params, ctx)
            gpus.append(
                {
                    "gpu": gpu.uuid,
                    "index": gpu.index,
                    "current_w": _watts(gpu.power_limit_mw),
                    "default_w": _watts(gpu.default_limit_mw),
                    "target_w": _watts(target),
                    "reason": why,
                }
            )
        return {"backend": self.backend.name, "gpus": gpus, "notes": self._mig_note(params)}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        results = []
        for gpu in self._gpus(params):
            key = MEMORY_PREFIX + gpu.uuid
            target, why = self._decide(gpu, params, ctx)
            entry: dict[str, Any] = {"gpu": gpu.uuid, "index": gpu.index, "previous_w": _watts(gpu.power_limit_mw)}
            if target is None:
                if ctx.memory.recall(key) is not None:
                    ctx.memory.forget(key)  # someone else owns the limit now
                entry.update(outcome="left_alone", reason=why)
                results.append(entry)
                continue
            target = min(max(target, gpu.min_limit_mw), gpu.max_limit_mw)
            try:
                self.backend.set_power_limit(gpu.uuid, target)
                read_back = self.backend.device(gpu.uuid).power_limit_mw
            except GpuError as exc:
                if not results:
                    raise
                raise _with_done(exc, results) from exc
            if read_back != target:
                raise _with_done(
                    GpuError(f"GPU {gpu.uuid}: restored {_watts(target):g} W but read back {_watts(read_back):g} W"),
                    results,
                )
            ctx.memory.forget(key)
            entry.update(outcome="restored", new_w=_watts(read_back), reason=why)
            results.append(entry)
        return {
            "backend": self.backend.name,
            "gpus": results,
            "restored": sum(1 for r in results if r["outcome"] == "restored"),
        }
