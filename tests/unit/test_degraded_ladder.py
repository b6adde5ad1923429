"""The shipped playbooks/gpu-degraded.yaml through the engine: an agent's GPUPcieDowntrained alert notifies
(rung 1); still firing an hour later (AlertManager's re-send) it climbs to the drain rung, cordon/taint and
slurm.drain side by side; the resolve undoes that rung (untaint, uncordon, resume) and tells on-call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from remediate.judging.engine import Engine
from remediate.runs import Decision
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import rows

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the alert's startsAt
MIN = 60.0
LABELS = {"severity": "warning", "source": "nvml", "node": "gpu-node-05", "UUID": "GPU-1111", "gpu": "1"}
EVIDENCE = "pcie width x8 < max x16"
NOTES = {"summary": f"GPU 1 (GPU-1111) on gpu-node-05: PCIe link downtrained: {EVIDENCE}", "evidence": EVIDENCE}


def downtrained(status: str = "firing") -> dict[str, Any]:
    return alert_payload(
        "GPUPcieDowntrained", status=status, labels=LABELS, annotations=NOTES, starts_at="2026-01-01T00:00:00Z"
    )


def steps_of(store: Store, run_id: int) -> list[tuple[str, str]]:
    return [(s.name, s.action) for s in rows(store, "steps", run_id=run_id)]


def test_the_shipped_degradation_ladder_notifies_then_drains_if_it_persists_and_undoes_the_drain(
    store: Store, make_engine: Callable[..., Engine]
) -> None:
    engine = make_engine(yaml.safe_load((ROOT / "playbooks" / "gpu-degraded.yaml").read_text()))

    (notify,) = ingest_alerts(engine, downtrained(), at=T0 + MIN).decisions
    (resent,) = ingest_alerts(engine, downtrained(), at=T0 + 31 * MIN).decisions  # repeat_interval 30m
    (drain,) = ingest_alerts(engine, downtrained(), at=T0 + 62 * MIN).decisions

    assert notify.decision is Decision.ACCEPTED and "rung 1 of 2 (notify): first rung" in notify.reason
    assert steps_of(store, notify.run_id) == [("notify", "notify")]
    assert resent.decision is Decision.DUPLICATE  # within holds_for 1h: the same occurrence, one run
    assert drain.decision is Decision.ACCEPTED
    assert "rung 2 of 2 (drain): still firing 1h1m after rung 1 ran (holds_for 1h)" in drain.reason
    assert steps_of(store, drain.run_id) == [
        ("cordon", "k8s.cordon"),
        ("taint", "k8s.taint"),
        ("slurm-drain", "slurm.drain"),
        ("notify", "notify"),
    ]
    (taint,) = [json.loads(s.params) for s in rows(store, "steps", run_id=drain.run_id, name="taint")]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "remediate.io/gpu-degraded",
        "gpupciedowntrained",
        "NoSchedule",
    )

    (undo,) = ingest_alerts(engine, downtrained("resolved"), at=T0 + 90 * MIN).decisions
    # Rung 1 (notify) has no undo steps: only rung 2's are run, then the playbook's on_resolved.
    assert undo.decision is Decision.ACCEPTED and undo.reason.endswith("; undoes rungs 2, 1")
    assert steps_of(store, undo.run_id) == [
        ("untaint", "k8s.untaint"),
        ("uncordon", "k8s.uncordon"),
        ("resume", "slurm.resume"),
        ("notify-resolved", "notify"),
    ]


def _message(rung: int, name: str, **context: Any) -> str:
    from remediate.actions.templating import render_text

    playbook = yaml.safe_load((ROOT / "playbooks" / "gpu-degraded.yaml").read_text())
    steps = playbook["escalate"][rung]["steps"] if rung >= 0 else playbook["on_resolved"]
    (source,) = [s["with"]["message"] for s in steps if s["name"] == name]
    alert = {"alertname": "GPUPcieDowntrained", "labels": LABELS, "annotations": NOTES}
    return " ".join(render_text(source, {**alert, **context}).split())


def test_the_ladders_messages_carry_the_evidence_and_say_what_the_drain_did() -> None:
    run = {"outcome": "4 of 4 steps succeeded", "link": "run 7", "ok": True}
    told = _message(0, "notify", run=run)
    assert told.startswith("GPU 1 (GPU-1111) on gpu-node-05: PCIe link downtrained: pcie width x8 < max x16 (the")
    assert "if this still fires in an hour it is cordoned" in told and told.endswith("run 7")

    done = {"status": "succeeded"}
    both = _message(1, "notify", step={"cordon": done, "taint": done, "slurm-drain": done}, run=run)
    assert "cordoned and tainted remediate.io/gpu-degraded. Drained in Slurm (running jobs finish)." in both
    slurm_only = _message(1, "notify", step={"slurm-drain": done}, run=run)
    assert "Drained in Slurm" in slurm_only and "cordoned" not in slurm_only
    failed = _message(1, "notify", step={"cordon": {"status": "failed"}, "taint": done}, run=run)
    assert "taking it out of service FAILED: it still takes work." in failed

    resolved = _message(-1, "notify-resolved", run=run)
    assert "GPUPcieDowntrained resolved on gpu-node-05: the agent reads GPU 1 clear." in resolved
