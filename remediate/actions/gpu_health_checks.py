"""gpu.health's verdicts: each check of one GPU's reading, judged against thresholds, with its evidence. Pure.

A verdict is ok, fail, warn (reported, does not fail the step) or skipped (the GPU or driver cannot
answer: NVML's NOT_SUPPORTED, which says nothing about the GPU's health). The evidence is the values and
the threshold, written so a person reading the history or on-call's message sees why
(`ecc_dbe_volatile: 2 > 0`, `pcie width x8 < max x16`).

Why PCIe width and generation are judged differently: the GPU lowers its link *generation* at idle
to save power (an idle Gen5 GPU commonly shows Gen1 in `nvidia-smi -q`'s "Link gen: Current") and
trains it back up under load, so a low generation at idle says nothing; the *width* is not lowered with
load, so x8 on an x16 link is a downtrained (or badly seated) link whatever the load. A generation
below the maximum therefore fails only while the GPU is busy (utilisation at or above
`pcie_gen_load_percent`), and is a warning otherwise. "Maximum" is NVML's GetMaxPcieLink*: what the
GPU *and* the slot allow (its docs: a Gen2 device on a Gen1 bus reports Gen1), so a Gen5 GPU in a Gen4
slot is not downtrained.

Throttle reasons are a reading of one moment: a power brake a second long shows too. The re-admission
gate repeats the checks over its soak, which tells a passing event from a persistent one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from remediate.gpu.health import GpuHealth, HealthReading, reason_names

CHECKS = (
    "on_bus",
    "retired_pages",
    "row_remap",
    "ecc_dbe_volatile",
    "pcie_width",
    "pcie_gen",
    "clock_throttle",
    "nvlink_errors",
)
CHECK_SKIPPED = "skipped"
"""The verdict of a check (or of dcgmi's diagnostic) that could not be read or was not run."""
VERDICTS = ("ok", "warn", "fail", CHECK_SKIPPED)
DEFAULT_THROTTLE_FAIL_ON = ("hw_slowdown", "hw_power_brake", "hw_thermal", "sw_thermal")


@dataclass(frozen=True)
class Thresholds:
    """What counts as a failure (the action's params; defaults argued in docs/gpu.md)."""

    max_ecc_dbe_volatile: int = 0
    pcie_gen_load_percent: int = 50
    throttle_fail_on: tuple[str, ...] = DEFAULT_THROTTLE_FAIL_ON
    max_nvlink_recovery_errors: int = 0
    max_nvlink_crc_errors: int = 100

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_ecc_dbe_volatile": self.max_ecc_dbe_volatile,
            "pcie_gen_load_percent": self.pcie_gen_load_percent,
            "throttle_fail_on": list(self.throttle_fail_on),
            "max_nvlink_recovery_errors": self.max_nvlink_recovery_errors,
            "max_nvlink_crc_errors": self.max_nvlink_crc_errors,
        }


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str
    evidence: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.name, "verdict": self.verdict, "evidence": self.evidence}


def overall(verdicts: Iterable[str]) -> str:
    """fail if any failed, else warn if any warned, else ok (skipped checks do not count)."""
    seen = set(verdicts)
    return "fail" if "fail" in seen else ("warn" if "warn" in seen else "ok")


def judge(gpu: GpuHealth, limits: Thresholds) -> list[Check]:
    """Every check of CHECKS for one GPU of a scan, in that order."""
    if gpu.reading is None:
        lost = [Check("on_bus", "fail", f"GPU fell off the bus: {gpu.lost}")]
        return lost + [Check(name, "skipped", "GPU is lost: nothing can be read") for name in CHECKS[1:]]
    r = gpu.reading
    return [
        Check("on_bus", "ok", "answers NVML"),
        _retired_pages(r),
        _row_remap(r),
        _ecc(r, limits),
        _pcie_width(r),
        _pcie_gen(r, limits),
        _throttle(r, limits),
        _nvlink(r, limits),
    ]


def _skipped(name: str, what: str) -> Check:
    return Check(name, "skipped", f"not supported: this GPU or driver does not report {what}")


def _retired_pages(r: HealthReading) -> Check:
    pending = r.memory.retired_pages_pending
    if pending is None:
        return _skipped("retired_pages", "page retirement (Ampere and later remap rows instead)")
    if pending:
        return Check("retired_pages", "fail", "retired pages pending: true (a GPU reset applies them)")
    return Check("retired_pages", "ok", "retired pages pending: false")


def _row_remap(r: HealthReading) -> Check:
    m = r.memory
    if m.remapped_rows_pending is None:
        return _skipped("row_remap", "row remapping (GPUs before Ampere retire pages instead)")
    counts = (
        f"(remapped rows: {m.remapped_rows_correctable} correctable, {m.remapped_rows_uncorrectable} uncorrectable)"
    )
    if m.remapped_rows_failure:
        return Check(
            "row_remap", "fail", f"row remap failure: true: no spare rows left, the GPU needs service {counts}"
        )
    if m.remapped_rows_pending:
        return Check("row_remap", "fail", f"row remap pending: true (a GPU reset applies it) {counts}")
    return Check("row_remap", "ok", f"row remap pending: false, failure: false {counts}")


def _ecc(r: HealthReading, limits: Thresholds) -> Check:
    count, most = r.ecc_dbe_volatile, limits.max_ecc_dbe_volatile
    if count is None:
        return _skipped("ecc_dbe_volatile", "ECC counts (ECC off, or a GPU without ECC)")
    if count > most:
        return Check("ecc_dbe_volatile", "fail", f"ecc_dbe_volatile: {count} > {most}")
    return Check("ecc_dbe_volatile", "ok", f"ecc_dbe_volatile: {count} <= {most}")


def _pcie_width(r: HealthReading) -> Check:
    now, best = r.pcie.width, r.pcie.max_width
    if now is None or best is None:
        return _skipped("pcie_width", "its PCIe link width")
    if now < best:
        return Check("pcie_width", "fail", f"pcie width x{now} < max x{best}")
    return Check("pcie_width", "ok", f"pcie width x{now} = max x{best}")


def _pcie_gen(r: HealthReading, limits: Thresholds) -> Check:
    now, best, busy = r.pcie.gen, r.pcie.max_gen, r.utilization_percent
    if now is None or best is None:
        return _skipped("pcie_gen", "its PCIe link generation")
    if now >= best:
        return Check("pcie_gen", "ok", f"pcie gen {now} = max gen {best}")
    below = f"pcie gen {now} < max gen {best}"
    if busy is not None and busy >= limits.pcie_gen_load_percent:
        return Check("pcie_gen", "fail", f"{below} at {busy}% GPU utilization >= {limits.pcie_gen_load_percent}%")
    load = "utilization unknown" if busy is None else f"{busy}% GPU utilization < {limits.pcie_gen_load_percent}%"
    return Check("pcie_gen", "warn", f"{below} at {load}: the driver lowers the generation at idle")


def _throttle(r: HealthReading, limits: Thresholds) -> Check:
    if r.clock_event_reasons is None:
        return _skipped("clock_throttle", "its clock event (throttle) reasons")
    active = reason_names(r.clock_event_reasons)
    bad = [name for name in active if name in limits.throttle_fail_on]
    if bad:
        return Check(
            "clock_throttle", "fail", f"clock event reasons {bad} active (fail on {list(limits.throttle_fail_on)})"
        )
    return Check(
        "clock_throttle", "ok", f"clock event reasons {active or ['none']}: none of {list(limits.throttle_fail_on)}"
    )


def _nvlink(r: HealthReading, limits: Thresholds) -> Check:
    links = r.nvlink_errors
    if links is None:
        return _skipped("nvlink_errors", "NVLink (no NVLink on this GPU)")
    if not links:
        return Check("nvlink_errors", "ok", "no active NVLink")
    if not any(links.values()):
        return _skipped("nvlink_errors", "NVLink error counters (nvmlDeviceGetNvLinkErrorCounter)")
    problems = []
    for link, counts in sorted(links.items()):
        recovery = counts.get("recovery", 0)
        crc = sum(counts.get(name, 0) for name in ("replay", "crc_flit", "crc_data"))
        if recovery > limits.max_nvlink_recovery_errors:
            problems.append(f"link {link} recovery errors: {recovery} > {limits.max_nvlink_recovery_errors}")
        if crc > limits.max_nvlink_crc_errors:
            problems.append(f"link {link} replay+CRC errors: {crc} > {limits.max_nvlink_crc_errors}")
    if problems:
        return Check("nvlink_errors", "fail", "; ".join(problems))
    return Check("nvlink_errors", "ok", f"{len(links)} active link(s) within the error thresholds")
