"""A ladder's `start_at`: an alert of a named kind starts on a higher rung. The shipped loss-spike ladder skips the
bad batch window on a gradient norm spike and rolls back when the loss spikes anyway, or at once on a loss spike
alone; judged by the engine on both databases (@EVERY_DATABASE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions.base import ActionRegistry
from remediate.errors import PlaybookError
from remediate.judging.engine import IngestResult
from remediate.playbooks.loading import parse_playbook
from remediate.runs import Decision
from tests.conftest import alert_payload, ingest_alerts
from tests.support.stores import EVERY_DATABASE, rows
from tests.unit.test_ladder import MakeEngine, ladder

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MIN = 60.0
SHIPPED = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks" / "loss-spike.yaml").read_text())
NOT_A_LADDER = {
    "start_at": {"GPUTemperatureHigh": "lock-clocks"},
    "escalate": None,
    "reset_after": None,
    "steps": [{"action": "log", "with": {"message": "x"}}],
}
LABELS = {"training_job": "llm-7b", "node": "gpu-node-1", "severity": "warning"}


def spike(alertname: str, minute: int, **labels: str) -> dict[str, Any]:
    return alert_payload(alertname, labels={**LABELS, **labels}, starts_at=f"2026-01-01T00:{minute:02d}:00Z")


def decision(result: IngestResult) -> Any:
    (only,) = result.decisions
    return only


def actions(store: Any, run_id: int) -> list[str]:
    return [s.action for s in rows(store, "steps", run_id=run_id)]


@EVERY_DATABASE
def test_a_norm_spike_skips_the_bad_batches_and_the_loss_spike_that_follows_rolls_back_at_once(
    store: Any, make_engine: MakeEngine
) -> None:
    engine = make_engine(SHIPPED)
    norm = decision(ingest_alerts(engine, spike("TrainingGradNormSpike", 0), at=T0))
    loss = decision(ingest_alerts(engine, spike("TrainingLossSpike", 3), at=T0 + 3 * MIN))

    assert (norm.decision, loss.decision) == (Decision.ACCEPTED, Decision.ACCEPTED)
    assert norm.reason.endswith("rung 1 of 2 (skip-bad-batches): first rung")
    assert actions(store, norm.run_id) == ["training.command"]
    # Within the playbook's 30m cooldown, past the rollback rung's own 1m: the rollback does not wait.
    assert "rung 2 of 2 (rollback): re-fired 3m after rung 1 ran (holds_for 1h)" in loss.reason
    assert actions(store, loss.run_id) == ["training.rollback", "training.scale_lr"]


@EVERY_DATABASE
def test_a_loss_spike_alone_rolls_back_at_once_as_without_the_norm(store: Any, make_engine: MakeEngine) -> None:
    engine = make_engine(SHIPPED)
    loss = decision(ingest_alerts(engine, spike("TrainingLossSpike", 0), at=T0))
    other_job = decision(ingest_alerts(engine, spike("TrainingGradNormSpike", 1, training_job="b"), at=T0 + MIN))
    again = decision(ingest_alerts(engine, spike("TrainingLossSpike", 2), at=T0 + 2 * MIN))

    assert loss.decision is Decision.ACCEPTED
    assert loss.reason.endswith(
        "rung 2 of 2 (rollback): TrainingLossSpike starts on rung rollback (start_at; the ladder alone said rung 1: "
        "first rung)"
    )
    assert actions(store, loss.run_id) == ["training.rollback", "training.scale_lr"]
    assert other_job.reason.endswith("rung 1 of 2 (skip-bad-batches): first rung")  # a ladder per job
    # The same job on the top rung again: the last rung, its 1m cooldown long over, the job's attempt cap counts.
    assert again.decision is Decision.ACCEPTED
    assert "already on the last rung" in again.reason
    rungs = {s.guard_key.split("/")[1]: s.rung for s in store.ladders.read()}
    assert rungs == {"llm-7b": 2, "b": 1}


@EVERY_DATABASE
def test_a_loss_spike_within_a_minute_of_the_skip_waits_for_the_rollback_rung_s_cooldown(
    store: Any, make_engine: MakeEngine
) -> None:
    engine = make_engine(SHIPPED)
    ingest_alerts(engine, spike("TrainingGradNormSpike", 0), at=T0)
    early = decision(ingest_alerts(engine, spike("TrainingLossSpike", 0), at=T0 + 30))

    assert early.decision is Decision.COOLDOWN
    assert "cooldown 1m" in early.reason and "rung 2 of 2 (rollback)" in early.reason


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (NOT_A_LADDER, "start_at", "only a ladder"),
        ({"start_at": {"GPUTemperatureLow": "lock-clocks"}}, "start_at.GPUTemperatureLow", "not an alert this"),
        ({"start_at": {"GPUTemperatureHigh": "cap-power"}}, "start_at.GPUTemperatureHigh", "is the first rung"),
        ({"start_at": {"GPUTemperatureHigh": "reboot"}}, "start_at.GPUTemperatureHigh", "one of cap-power, "),
        ({"start_at": ["lock-clocks"]}, "start_at", "must be a mapping"),
    ],
)
def test_a_start_at_that_names_no_alert_or_no_higher_rung_is_refused(
    registry: ActionRegistry, changes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(ladder(**changes), registry)

    assert caught.value.field == field
    assert message in str(caught.value)
