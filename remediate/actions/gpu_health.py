"""`gpu.health`: read-only node health checks through NVML, and DCGM's diagnostic where it is installed.

Per GPU, each check of remediate.actions.gpu_health_checks (pending page retirements, row remaps and
row-remap failure, volatile double-bit ECC, PCIe width and generation against the maximum, clock
throttle reasons, NVLink error counters, a GPU off the bus) gets a verdict — ok, warn, fail or skipped —
with its evidence (values and thresholds). `diag: 1|2|3` also runs `dcgmi diag -r N -j` (remediate.gpu.
dcgm_diag); 0 skips it, and a node without DCGM reports it skipped, not failed. `soak: 30m` repeats the
NVML checks over a window (`every: 5m`; remediate.actions.gpu_health_soak), every round's verdict kept in the
result; the first failing round fails the step. dcgmi runs once, after the first round; one that gives no
answer in the time left fails the step as DiagTimedOut (the node could not be judged), never as unhealthy.

The step fails when any check fails (`fail_on: fail`, the default): what a gate needs, since a failed
step stops the run and its result — every check's evidence — stays with the step in the history
(a PartialFailure carries it, through the agent too). `fail_on: never` reports without failing, for a
playbook that only wants to look. Nothing here changes the node: only NVML getters and dcgmi's read-only
diagnostic run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from remediate.actions.base import StepContext
from remediate.actions.gpu import _GpuAction
from remediate.actions.gpu_health_checks import (
    CHECKS,
    DEFAULT_THROTTLE_FAIL_ON,
    Check,
    Thresholds,
    judge,
    overall,
)
from remediate.actions.gpu_health_soak import UNLISTED, Listed, Round, Soak, listed_in, run_soak
from remediate.actions.schema import Param, ParamSchema, between, duration_within
from remediate.config.durations import parse_duration
from remediate.errors import PartialFailure, parsed_by
from remediate.gpu import GpuNotFound, capability, dcgm_diag, parse_gpu_ref, supports
from remediate.gpu.errors import GpuSelectionError
from remediate.gpu.health import CLOCK_EVENT_REASONS, GpuHealth

CAPABILITY = "health_scan"
READS = (
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    "nvmlDeviceGetCurrPcieLinkGeneration / GetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth / GetMaxPcieLinkWidth",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetNvLinkState / GetNvLinkErrorCounter per active link",
)
DIAG_MARGIN_S = 5.0
"""Time kept back from the step's deadline for judging and reporting after dcgmi returns."""


_DIAG_NOT_RUN = {"level": 0, "verdict": "skipped", "reason": "not run: the NVML checks failed first", "failed": []}


class NodeUnhealthy(PartialFailure):
    """A health check failed; `result` holds every check's verdict and evidence (kept with the failed step)."""


class DiagTimedOut(PartialFailure):
    """dcgmi gave no answer in the time the step had left: the node could not be judged, which is no verdict on its
    GPUs (still not a pass: the step fails, whatever `fail_on`); `result` holds the NVML round read before it."""


def _count(value: int) -> str | None:
    return None if value >= 0 else "must be 0 or more"


def _reasons(value: list[Any]) -> str | None:
    unknown = [v for v in value if v not in CLOCK_EVENT_REASONS]
    return f"unknown reasons {unknown}: expected names of {', '.join(CLOCK_EVENT_REASONS)}" if unknown else None


class HealthAction(_GpuAction):
    name: ClassVar[str] = "gpu.health"
    runs_if_owner_unknown: ClassVar[bool] = True  # reads only: nothing to refuse on a node someone else owns
    description: ClassVar[str] = (
        "Read-only GPU health checks through NVML (ECC, row remap, PCIe, throttle, NVLink, lost GPU), "
        "optionally dcgmi diag; fails the step when unhealthy."
    )
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "gpu": Param(
                str,
                default="all",
                check=parsed_by(parse_gpu_ref, GpuSelectionError),
                doc="GPU index, UUID, PCI bus id, MIG UUID (its GPU), or 'all' (the default: the whole node)",
            ),
            "fail_on": Param(
                str, default="fail", choices=("fail", "never"), doc="'fail': a failed check fails the step; 'never'"
            ),
            "max_ecc_dbe_volatile": Param(
                int, default=0, check=_count, doc="most volatile double-bit ECC errors that pass"
            ),
            "pcie_gen_load_percent": Param(
                int,
                default=50,
                check=between(0, 100),
                doc="GPU utilization from which a PCIe generation below the maximum fails (below it: warn)",
            ),
            "throttle_fail_on": Param(
                list,
                default=list(DEFAULT_THROTTLE_FAIL_ON),
                check=_reasons,
                doc="clock event reasons that fail the check",
            ),
            "max_nvlink_recovery_errors": Param(
                int, default=0, check=_count, doc="most NVLink recovery errors per active link that pass"
            ),
            "max_nvlink_crc_errors": Param(
                int, default=100, check=_count, doc="most NVLink replay + CRC errors per active link that pass"
            ),
            "diag": Param(int, default=0, choices=(0, 1, 2, 3), doc="dcgmi diag level to run (0: none)"),
            "soak": Param(
                str,
                default="0s",
                static=True,
                check=duration_within(0, 24 * 3600),
                doc="repeat the NVML checks over this window (0s: once); the step's timeout must cover it",
            ),
            "every": Param(
                str,
                default="5m",
                static=True,
                check=duration_within(1, 3600),
                doc="the time between two rounds of the soak",
            ),
        }
    )

    def _limits(self, params: Mapping[str, Any]) -> Thresholds:
        return Thresholds(
            max_ecc_dbe_volatile=params["max_ecc_dbe_volatile"],
            pcie_gen_load_percent=params["pcie_gen_load_percent"],
            throttle_fail_on=tuple(params["throttle_fail_on"]),
            max_nvlink_recovery_errors=params["max_nvlink_recovery_errors"],
            max_nvlink_crc_errors=params["max_nvlink_crc_errors"],
        )

    def _scan(self, params: Mapping[str, Any]) -> list[GpuHealth]:
        found = capability(self.backend, CAPABILITY, doing="read GPU health")()
        ref = parse_gpu_ref(params["gpu"])
        if ref.kind == "all":
            chosen = found
        elif ref.kind == "index":
            chosen = [g for g in found if g.index == int(ref.value)]
        elif ref.kind == "pci":
            chosen = [g for g in found if g.pci_bus_id == ref.value]  # the scan's ids are canonical already
        else:
            uuid = ref.value if ref.kind == "uuid" else self.backend.parent_of_mig(ref.value)
            chosen = [g for g in found if g.uuid.lower() == uuid.lower()]
        if not chosen:
            listed = ", ".join(f"{g.index} {g.uuid or '(lost)'}" for g in found) or "none"
            raise GpuNotFound(f"no GPU {ref.value} on this node (GPUs here: {listed})")
        return chosen

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        notes = []
        gpus: list[dict[str, Any]] = []
        if supports(self.backend, CAPABILITY):
            gpus = [g.ident() | ({"lost": g.lost} if g.lost else {}) for g in self._scan(params)]
        else:
            notes.append(f"the {self.backend.name} GPU backend cannot read GPU health: the step would fail")
        level = params["diag"]
        diag: dict[str, Any] = {"level": level}
        if level:
            found = dcgm_diag.find_dcgmi()
            diag["command"] = dcgm_diag.argv(found, level) if found else "skipped: DCGM not installed"
        return self._report(
            gpus,
            reads=list(READS),
            checks=list(CHECKS),
            thresholds=self._limits(params).to_dict(),
            diag=diag,
            soak=self._soak(params).to_dict(),
            fail_on=params["fail_on"],
            notes=notes,
        )

    def _soak(self, params: Mapping[str, Any]) -> Soak:
        window, every = (parse_duration(params[k]).total_seconds() for k in ("soak", "every"))
        return Soak(window_s=window, every_s=every)

    def _round(self, params: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Round]:
        """Every chosen GPU read and judged once: their entries, and the round's verdict and lines."""
        limits = self._limits(params)
        gpus, failed, warned = [], [], []
        for gpu in self._scan(params):
            checks = judge(gpu, limits)
            verdict = overall(c.verdict for c in checks)
            failed += _lines(gpu, checks, "fail")
            warned += _lines(gpu, checks, "warn")
            reading = gpu.reading.to_dict() if gpu.reading is not None else {"lost": gpu.lost}
            gpus.append(gpu.ident() | {"verdict": verdict, "checks": [c.to_dict() for c in checks], "read": reading})
        verdict = overall(g["verdict"] for g in gpus)
        return gpus, Round(0.0, verdict, tuple(failed), tuple(warned), gpus=listed_in(gpus))

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        latest: list[list[dict[str, Any]]] = []
        diag: dict[str, Any] = {}

        def one_round() -> Round:
            gpus, done = self._round(params)
            latest[:] = [gpus]
            if not diag:  # after the first round: a fault NVML sees already fails before dcgmi's minutes
                diag.update(self._diag(params["diag"], ctx, soak.window_s) if done.verdict != "fail" else _DIAG_NOT_RUN)
                if diag.get("timed_out"):
                    raise DiagTimedOut(
                        f"gate could not judge the node: {diag['reason']} (not a hardware verdict: give the step a "
                        f"timeout of its soak + {dcgm_diag.ALLOWED_S[diag['level']]:g}s for diag {diag['level']})",
                        self._report(gpus, verdict="fail", failed=[], warnings=list(done.warnings), diag=dict(diag)),
                    )
                if diag["verdict"] == "fail":
                    why = "; ".join(diag["failed"]) or diag["reason"]
                    return replace(done, verdict="fail", failed=(*done.failed, f"dcgmi diag -r {diag['level']}: {why}"))
                if diag["verdict"] == "warn":
                    warned = (*done.warnings, f"dcgmi diag -r {diag['level']}: warnings (see diag.tests)")
                    return replace(done, verdict=overall([done.verdict, "warn"]), warnings=warned)
            return done

        soak = self._soak(params)
        log = run_soak(soak, one_round, remaining=ctx.remaining, stopping=ctx.stopping, margin_s=DIAG_MARGIN_S)
        last = log.rounds[-1]
        verdict = overall([*(r.verdict for r in log.rounds)])
        result = self._report(
            latest[0] + [_unlisted_entry(g) for g in last.unlisted],
            verdict=verdict,
            failed=list(last.failed),
            warnings=sorted({w for r in log.rounds for w in r.warnings}),
            diag=diag,
            thresholds=self._limits(params).to_dict(),
            fail_on=params["fail_on"],
            soak=log.to_dict(),
        )
        if verdict == "fail" and params["fail_on"] == "fail":
            when = f" (soak round {len(log.rounds)} of {len(soak.offsets())}, at +{last.at_s:.0f}s)"
            when = when if soak.window_s else ""
            raise NodeUnhealthy(f"node unhealthy{when}: {'; '.join(last.failed)}", result)
        return result

    def _diag(self, level: int, ctx: StepContext, soak_s: float = 0.0) -> dict[str, Any]:
        """dcgmi, given the step's time left but the soak's window (it runs after the soak's first round)."""
        if not level:
            return {"level": 0, "verdict": "skipped", "reason": "diag: 0 (not asked for)", "failed": []}
        timeout = max(1.0, min(ctx.remaining() - soak_s, 24 * 3600.0) - DIAG_MARGIN_S)
        return dcgm_diag.run(level, timeout_s=timeout).to_dict()


def _lines(gpu: GpuHealth, checks: list[Check], verdict: str) -> list[str]:
    """`GPU 0 (GPU-…): ecc_dbe_volatile: 2 > 0` for each check of this verdict: what on-call reads first."""
    who = f"GPU {gpu.index} ({gpu.uuid or 'uuid unknown'})"
    return [
        f"{who}: {c.evidence}" if c.evidence.startswith(c.name) else f"{who}: {c.name}: {c.evidence}"
        for c in checks
        if c.verdict == verdict
    ]


def _unlisted_entry(gpu: Listed) -> dict[str, Any]:
    """The result's entry of a GPU the soak's first round listed and its last did not: its `on_bus` check failed."""
    check = Check("on_bus", "fail", UNLISTED).to_dict()
    return {"gpu": gpu.uuid, "index": gpu.index, "verdict": "fail", "checks": [check], "read": {"lost": UNLISTED}}
