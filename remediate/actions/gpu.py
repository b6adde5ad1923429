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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.gpu_state import identify
from remediate.actions.gpu_state import watts as _watts
from remediate.actions.schema import Param, ParamSchema, between, positive
from remediate.errors import ParamsError, parsed_by
from remediate.gpu import GpuBackend, GpuError, GpuInfo, parse_gpu_ref, resolve
from remediate.gpu.errors import GpuSelectionError

BackendProvider = Callable[[], GpuBackend]
MEMORY_PREFIX = "gpu.power_limit/"


def _check_one_gpu(text: str) -> str | None:
    """A GPU reference rendered from a label must name one GPU: `UUID="all"` once lowered every GPU
    of a node. `all` stays available, written literally in the playbook."""
    if parse_gpu_ref(text).kind == "all":
        return (
            f"rendered from the alert to {text!r}, which names every GPU of the node; a templated GPU reference "
            "must name exactly one GPU (an index, UUID, PCI bus id or MIG UUID). Write gpu: all literally "
            "in the playbook to mean every GPU"
        )
    return None


GPU_PARAM = Param(
    str,
    required=True,
    check=parsed_by(parse_gpu_ref, GpuSelectionError),
    templated_check=_check_one_gpu,
    doc="GPU index, UUID, PCI bus id, MIG UUID, or 'all' (written literally: a template must name one GPU)",
)


def gpu_schema(**params: Param) -> ParamSchema:
    """The params of a gpu action: `gpu`, then the action's own."""
    return ParamSchema({"gpu": GPU_PARAM, **params})


def fallback_param(other: str, doc: str) -> Param:
    """What a restoring action does to a GPU it has no record of changing: nothing, or `other`."""
    return Param(str, default="none", choices=("none", other), doc=doc)


def _with_done(exc: GpuError, done: list[dict[str, Any]]) -> GpuError:
    """`exc`, its message extended by what this step already did to other GPUs (`gpu: all`).

    The audit history keeps only a failed step's error, so without this a GPU lowered
    before another one failed would not show there. Same class and NVML code as `exc`.
    """
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
            **identify(g),
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


def _read_from_plan(entry: Mapping[str, Any]) -> GpuInfo:
    """The GPU as a recorded plan entry (LimitPlan.to_dict) read it: what `compute_limit` needs."""

    def mw(key: str) -> int:
        return round(float(entry[key]) * 1000)

    return GpuInfo(
        index=int(entry.get("index") or 0),
        uuid=str(entry["gpu"]),
        pci_bus_id=str(entry.get("pci_bus_id") or ""),
        name=str(entry.get("name") or ""),
        power_limit_mw=mw("current_w"),
        default_limit_mw=mw("default_w"),
        min_limit_mw=mw("min_w"),
        max_limit_mw=mw("max_w"),
        enforced_limit_mw=mw("current_w"),
        power_usage_mw=None,
        temperature_c=None,
    )


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

    def _report(self, gpus: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        """A plan's or a result's JSON: the backend, one entry per GPU, then counts and notes."""
        return {"backend": self.backend.name, "gpus": gpus, **more}

    def _each(self, gpus: Iterable[GpuInfo], one: Callable[[GpuInfo], dict[str, Any]]) -> list[dict[str, Any]]:
        """`one` on every GPU in turn; a GpuError after the first also names what this step already did."""
        results: list[dict[str, Any]] = []
        for gpu in gpus:
            try:
                results.append(one(gpu))
            except GpuError as exc:
                if not results:
                    raise
                raise _with_done(exc, results) from exc
        return results

    def _mig_note(self, params: Mapping[str, Any]) -> list[str]:
        if parse_gpu_ref(params["gpu"]).kind == "mig":
            return ["the alert names a MIG device: the limit applies to its parent GPU and every MIG instance on it"]
        return []


class SetPowerLimitAction(_GpuAction):
    name: ClassVar[str] = "gpu.set_power_limit"
    runs_if_owner_unknown: ClassVar[bool] = True  # the GPUs keep working, capped; restore_power_limit undoes it
    description: ClassVar[str] = "Lower a GPU's power limit through NVML (clamped, floored, read back)."
    schema: ClassVar[ParamSchema] = gpu_schema(
        watts=Param(float, check=positive, doc="new limit in watts"),
        percent_of_default=Param(float, check=between(1, 100), doc="new limit as % of the default limit"),
        reduce_by_percent=Param(float, check=between(1, 90), doc="cut the current limit by this %"),
        min_watts=Param(float, check=positive, doc="never set below this"),
        min_percent_of_default=Param(float, check=between(1, 100), doc="never set below this % of default"),
        allow_increase=Param(bool, default=False, doc="may the new limit be above the current one"),
    )

    def validate(self, params: Mapping[str, Any]) -> dict[str, Any]:
        result = super().validate(params)
        given = [key for key in ("watts", "percent_of_default", "reduce_by_percent") if key in result]
        if len(given) != 1:
            raise ParamsError("give exactly one of watts, percent_of_default, reduce_by_percent")
        return result

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plans = [compute_limit(gpu, params) for gpu in self._gpus(params)]
        gpus = [p.to_dict() for p in plans]
        return self._report(gpus, would_change=sum(p.changes for p in plans), notes=self._mig_note(params))

    def replan(self, recorded_plan: Any, params: Mapping[str, Any]) -> str | None:
        """`700 W -> 420 W instead of 560 W on 8 GPUs`: each GPU the recorded plan read, limited by `params`."""
        entries = recorded_plan.get("gpus") if isinstance(recorded_plan, Mapping) else None
        if not entries:
            return None
        counts: dict[str, int] = {}
        for entry in entries:
            try:
                gpu = _read_from_plan(entry)
            except (KeyError, TypeError, ValueError):
                return None  # a plan of another shape (an older release): the params alone say it
            again = compute_limit(gpu, params).to_dict()
            planned = "unchanged" if entry.get("change") == "unchanged" else f"{float(entry['target_w']):g} W"
            line = f"{again['change']} instead of {planned}"
            counts[line] = counts.get(line, 0) + 1
        return "; ".join(f"{line} on {n} GPU{'s' if n != 1 else ''}" for line, n in counts.items())

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        results = self._each(self._gpus(params), lambda gpu: self._set_one(gpu, params, ctx))
        changed = sum(1 for r in results if r["outcome"] == "set")
        return self._report(results, changed=changed, notes=self._mig_note(params))

    def _set_one(self, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        plan = compute_limit(gpu, params)
        entry = plan.to_dict()
        if not plan.changes:
            return {**entry, "outcome": "unchanged"}
        key = MEMORY_PREFIX + gpu.uuid
        before = ctx.memory.recall(key)
        original = before["original_mw"] if before and before.get("set_mw") == gpu.power_limit_mw else None
        original = original if original is not None else gpu.power_limit_mw
        record = {"original_mw": original, "set_mw": plan.target_mw, "run_id": ctx.run_id, "at": time.time()}
        ctx.memory.remember(key, record, run_id=ctx.run_id)
        applied = False
        try:
            self.backend.set_power_limit(gpu.uuid, plan.target_mw)
            applied = True
            read_back = self.backend.device(gpu.uuid).power_limit_mw
        except Exception:
            # Only a failed set leaves the GPU as it was. If just the read-back failed, the GPU has
            # the new limit: keep the record, or a retry (finding it already there) and the restore
            # would never know the original.
            if not applied:
                put_memory_back(ctx, key, before)
            raise
        if read_back != plan.target_mw:
            put_memory_back(ctx, key, before)
            raise GpuError(
                f"GPU {gpu.uuid}: set {_watts(plan.target_mw):g} W but read back {_watts(read_back):g} W "
                "(another agent or the driver changed it)"
            )
        entry.update(
            outcome="set",
            previous_w=_watts(gpu.power_limit_mw),
            new_w=_watts(read_back),
            remembered_original_w=_watts(original),
        )
        return entry


def put_memory_back(ctx: StepContext, key: str, before: dict[str, Any] | None) -> None:
    """Put an action's memory of a GPU back as it was before this step (its change did not happen)."""
    if before is None:
        ctx.memory.forget(key)
    else:
        ctx.memory.remember(key, before, run_id=int(before.get("run_id", ctx.run_id)))


class RestorePowerLimitAction(_GpuAction):
    name: ClassVar[str] = "gpu.restore_power_limit"
    undoes: ClassVar[bool] = True
    description: ClassVar[str] = "Put back the power limit remediate replaced, if nobody changed it since."
    schema: ClassVar[ParamSchema] = gpu_schema(
        fallback=fallback_param(
            "default", "with no record of a change by remediate: 'default' sets the default limit, 'none' does nothing"
        )
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
        return self._report(gpus, notes=self._mig_note(params))

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        results = self._each(self._gpus(params), lambda gpu: self._restore_one(gpu, params, ctx))
        return self._report(results, restored=sum(1 for r in results if r["outcome"] == "restored"))

    def _restore_one(self, gpu: GpuInfo, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        key = MEMORY_PREFIX + gpu.uuid
        target, why = self._decide(gpu, params, ctx)
        entry: dict[str, Any] = {"gpu": gpu.uuid, "index": gpu.index, "previous_w": _watts(gpu.power_limit_mw)}
        if target is None:
            if ctx.memory.recall(key) is not None:
                ctx.memory.forget(key)  # someone else owns the limit now
            return {**entry, "outcome": "left_alone", "reason": why}
        target = min(max(target, gpu.min_limit_mw), gpu.max_limit_mw)
        self.backend.set_power_limit(gpu.uuid, target)
        read_back = self.backend.device(gpu.uuid).power_limit_mw
        if read_back != target:
            raise GpuError(f"GPU {gpu.uuid}: restored {_watts(target):g} W but read back {_watts(read_back):g} W")
        ctx.memory.forget(key)
        return {**entry, "outcome": "restored", "new_w": _watts(read_back), "reason": why}
