"""Silent degradations as alerts: the node agent's periodic health read -> GPUPcieDowntrained and
GPUHwSlowdownPersistent in AlertManager, resolved once the GPU is clear.

A downtrained PCIe link or a GPU that keeps braking its clocks raises no XID and no NVML event: jobs run,
only slower, and a gang job runs at its slowest GPU's pace. So the fault watcher (remediate.agent.gpu_faults)
also reads `health_scan()` every `gpu_health_poll_interval` and judges each GPU with gpu.health's own checks
(remediate.actions.gpu_health_checks: the PCIe rule with its idle exception and the throttle-reason check),
never a second copy of their rules:

- GPUPcieDowntrained: the pcie_width check fails (x8 on an x16 link, at any load) or the pcie_gen check fails
  (a generation below the maximum while the GPU is busy). A generation below the maximum at idle is only a
  warning there (the driver lowers it to save power): it raises nothing, and it keeps an alert that already
  fires firing, since an idle GPU cannot show whether its link would train back up.
- GPUHwSlowdownPersistent: HW slowdown, HW power brake or HW thermal slowdown set on `slowdown_polls`
  consecutive reads. One read is one moment (a power brake a second long shows too); K reads in a row, a
  poll interval apart, is a GPU that stays slow. It clears after as many clean reads in a row, so a GPU
  that brakes on and off does not resolve and re-fire (which would restart its playbook's ladder).

These are levels, not edges (unlike an XID): a firing alert is re-sent every poll with `endsAt` a few polls
ahead (AlertManager keeps it firing; if the agent stops, it resolves by itself after that), and posted once
with `endsAt` = now when it clears, which resolves it at once. A lost GPU's degradation alerts are left to
expire: the fault path raises the loss itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from remediate.actions.gpu_health_checks import Check, Thresholds, judge
from remediate.gpu.health import GpuHealth, reason_names

PCIE_ALERT = "GPUPcieDowntrained"
SLOWDOWN_ALERT = "GPUHwSlowdownPersistent"
HW_SLOWDOWN_REASONS = ("hw_slowdown", "hw_power_brake", "hw_thermal")
"""The hardware's own slowdowns: sw_thermal and sw_power_cap are the driver keeping to a limit someone set."""
SEVERITY = "warning"
"""A slow GPU, not a broken one: its playbook notifies first and drains only if it persists."""
FIRING_POLLS_AHEAD = 3
"""A firing alert's endsAt is this many polls ahead: a post lost or late does not resolve it."""

Scan = Callable[[], Sequence[GpuHealth]]


@dataclass(frozen=True)
class DegradationPolicy:
    """How often the GPUs are read, and how long a slowdown must last to be an alert (the gpu_health_* settings)."""

    poll_seconds: float = 60.0
    slowdown_polls: int = 3
    thresholds: Thresholds = field(default_factory=lambda: Thresholds(throttle_fail_on=HW_SLOWDOWN_REASONS))


@dataclass
class _Firing:
    starts_at: float
    alert: dict[str, Any]


@dataclass
class DegradationTracker:
    """Turns successive health scans into the alerts to post. Pure but for its memory of earlier scans."""

    node: str
    policy: DegradationPolicy = field(default_factory=DegradationPolicy)
    _slow: dict[str, int] = field(default_factory=dict, init=False)
    """UUID -> consecutive reads with a HW slowdown reason set (negative: consecutive clean reads while firing)."""
    _firing: dict[tuple[str, str], _Firing] = field(default_factory=dict, init=False)

    def observe(self, scan: Sequence[GpuHealth], now: float) -> list[dict[str, Any]]:
        """The alerts to post after this scan: every one still firing (re-sent), every one that cleared."""
        out: list[dict[str, Any]] = []
        for gpu in scan:
            if gpu.reading is None or not gpu.uuid:
                continue  # lost: the fault path raises that; its alerts here expire at their endsAt
            checks = {c.name: c for c in judge(gpu, self.policy.thresholds)}
            out += self._pcie(gpu, checks, now)
            out += self._slowdown(gpu, checks["clock_throttle"], now)
        return out

    def firing(self) -> list[tuple[str, str]]:
        """(alertname, UUID) of the alerts firing now."""
        return sorted(self._firing)

    def _pcie(self, gpu: GpuHealth, checks: dict[str, Check], now: float) -> list[dict[str, Any]]:
        width, gen = checks["pcie_width"], checks["pcie_gen"]
        failed = [c for c in (width, gen) if c.verdict == "fail"]
        key = (PCIE_ALERT, gpu.uuid)
        if failed or (key in self._firing and gen.verdict == "warn"):
            evidence = "; ".join(c.evidence for c in failed or [gen])
            return [self._fire(gpu, PCIE_ALERT, evidence, _pcie_annotations(gpu), now)]
        return self._clear(key, now)

    def _slowdown(self, gpu: GpuHealth, check: Check, now: float) -> list[dict[str, Any]]:
        key, k = (SLOWDOWN_ALERT, gpu.uuid), self.policy.slowdown_polls
        reasons = gpu.reading.clock_event_reasons if gpu.reading else None
        slow = check.verdict == "fail"
        seen = self._slow.get(gpu.uuid, 0)
        if key in self._firing:
            # Firing: count clean reads in a row (negative); one slow read puts it back.
            self._slow[gpu.uuid] = 0 if slow else min(seen, 0) - 1
            if -self._slow[gpu.uuid] >= k:
                self._slow.pop(gpu.uuid)
                return self._clear(key, now)
        else:
            self._slow[gpu.uuid] = seen + 1 if slow else 0
            if self._slow[gpu.uuid] < k:
                return []
        if not slow:  # clearing, not clear yet: the last slow read's evidence stands
            firing = self._firing[key]
            firing.alert = {**firing.alert, "endsAt": self._ends_at(now)}
            return [firing.alert]
        extra = {
            "clock_event_reasons": ",".join(reason_names(reasons or 0)) or "none",
            "persistence": f"set on {k} consecutive reads {self.policy.poll_seconds:g} s apart",
        }
        return [self._fire(gpu, SLOWDOWN_ALERT, check.evidence, extra, now)]

    def _fire(self, gpu: GpuHealth, alertname: str, evidence: str, extra: dict[str, str], now: float) -> dict[str, Any]:
        key = (alertname, gpu.uuid)
        starts_at = self._firing[key].starts_at if key in self._firing else now
        what = "PCIe link downtrained" if alertname == PCIE_ALERT else "persistent hardware clock slowdown"
        alert = {
            "labels": {
                "alertname": alertname,
                "severity": SEVERITY,
                "source": "nvml",
                "node": self.node,
                "UUID": gpu.uuid,
                "gpu": str(gpu.index),
            },
            "annotations": {
                "summary": f"GPU {gpu.index} ({gpu.uuid}) on {self.node}: {what}: {evidence}",
                "evidence": evidence,
                **extra,
                "description": "The node agent's health read (gpu_health_poll_interval "
                f"{self.policy.poll_seconds:g} s) found this through NVML; it resolves once the GPU reads clear.",
            },
            "startsAt": _rfc3339(starts_at),
            "endsAt": self._ends_at(now),
        }
        self._firing[key] = _Firing(starts_at, alert)
        return alert

    def _ends_at(self, now: float) -> str:
        return _rfc3339(now + FIRING_POLLS_AHEAD * self.policy.poll_seconds)

    def _clear(self, key: tuple[str, str], now: float) -> list[dict[str, Any]]:
        firing = self._firing.pop(key, None)
        if firing is None:
            return []
        return [{**firing.alert, "endsAt": _rfc3339(now)}]  # endsAt now: AlertManager resolves it at once


def _pcie_annotations(gpu: GpuHealth) -> dict[str, str]:
    reading = gpu.reading
    assert reading is not None  # lost GPUs never get here
    p = reading.pcie
    busy = "unknown" if reading.utilization_percent is None else f"{reading.utilization_percent}%"
    return {
        "pcie_width": f"x{p.width} of x{p.max_width}",
        "pcie_gen": f"{p.gen} of {p.max_gen}",
        "utilization": busy,
    }


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
