"""End to end: a loss spike in a real CPU PyTorch job -> AlertManager -> ``remediate serve`` -> the job rolls back.

The job (tests/support/jobs/trainer_script.py, a subprocess) trains a tiny model, checkpoints every
25 steps, exports ``training_loss`` over HTTP and polls remediate's inbox with TrainingControl.
From step ~150 its data is corrupted and the loss jumps. The test watches the exported loss the
way the shipped TrainingLossSpike rule does (above 3x its earlier average) and fires the alert
into a real AlertManager 0.25, which sends it to the real server (gunicorn) running the shipped
``playbooks/loss-spike.yaml`` with REMEDIATE_TRAINING_CONTROL_ROOT pointing at the job's control
root. The job acknowledges a rollback (good checkpoint >= 100 steps back, 200 batches skipped)
and an lr cut (x0.5). Asserted from three independent sources: the job's own output, the
checkpoints it wrote afterwards, and ``GET /runs/<id>``. Timings are printed (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import JobProcess
from tests.support.realsystems import AlertManager, free_port
from tests.support.server import RemediateServer
from tests.support.training import require
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

torch = require("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[1] / "support" / "jobs" / "trainer_script.py"
JOB = "e2e-job"


class Trainer(JobProcess):
    """The training subprocess and its output."""

    def __init__(self, workdir: Path, root: Path) -> None:
        self.port = free_port()
        self.checkpoints = workdir / "checkpoints"
        super().__init__(workdir / "trainer.log", sys.executable, str(SCRIPT), "--root", str(root), "--job", JOB,
                         "--checkpoints", str(self.checkpoints), "--metrics-port", str(self.port))  # fmt: skip

    def loss(self) -> float | None:
        try:
            text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=1).text
        except requests.RequestException:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "training_loss":
                    return float(sample.value)
        return None


def _step(run: dict[str, Any], name: str) -> dict[str, Any]:
    steps = {s["name"]: s for s in run["steps"]}
    assert name in steps, f"run {run['id']} has steps {sorted(steps)}"
    step: dict[str, Any] = steps[name]
    return step


def _spike_and_remediation(
    server: RemediateServer, am: AlertManager, trainer: Trainer
) -> tuple[dict[str, Any], dict[str, Any], float, float]:
    """Wait for the spike in the exported loss, fire the alert, wait for the run and the job to finish."""
    history: list[float] = []

    def spiked() -> float | None:
        assert trainer.proc.poll() is None, "the trainer exited early"
        loss = trainer.loss()
        if loss is None:
            return None
        if len(history) >= 20 and loss > 3 * (sum(history[-60:]) / len(history[-60:])):  # as TrainingLossSpike
            return loss
        history.append(loss)
        return None

    spike = wait_until(spiked, 60, interval=0.05, message="no loss spike seen")
    spike_seen = time.time()
    labels = {
        "alertname": "TrainingLossSpike",
        "severity": "warning",
        "job": "trainer-metrics",  # the scrape job: not a registered training job, skipped
        "training_job": JOB,
        "instance": f"127.0.0.1:{trainer.port}",
    }
    # Prometheus sends the alert once the rule has been true for its `for` (1m), with startsAt then: the
    # shipped playbook's before_alert_s (the same 1m) moves the bar back to the spike. This test does not wait
    # the minute: it sends at once what Prometheus would send a minute later.
    pending_s = 60.0
    starts = datetime.fromtimestamp(spike_seen + pending_s, UTC)
    am.fire(labels, {"summary": f"Training loss of {JOB} spiked to {spike:.3g}"}, starts_at=starts)
    fired = time.time()
    entry = server.wait_for_run(lambda e: e["status"] in ("succeeded", "failed"), playbook="loss-spike", timeout=30)
    run = server.run(entry["run_id"])
    assert run["status"] == "succeeded", f"run {run['id']} failed: {run.get('error')}"
    assert trainer.proc.wait(scaled(60)) == 0, "the trainer did not finish cleanly"
    return entry, run, fired, spike_seen


@contextlib.contextmanager
def _logs_on_failure(**sources: Any) -> Iterator[None]:
    """Print the log tails of the processes (shown in the report of a failing test)."""
    try:
        yield
    except BaseException:
        for name, source in sources.items():
            print(f"--- log tail: {name}\n{source.log_tail(60)}")
        raise


def test_a_loss_spike_rolls_the_job_back_to_a_good_checkpoint_with_a_lower_lr(tmp_path: Path) -> None:
    control_root = tmp_path / "control"
    control_root.mkdir()
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    shutil.copy(ROOT / "playbooks" / "loss-spike.yaml", playbooks)
    env = {"REMEDIATE_TRAINING_CONTROL_ROOT": str(control_root)}
    with (
        RemediateServer(tmp_path / "remediate", playbooks, env=env) as server,
        AlertManager(
            tmp_path / "alertmanager", server.webhook_url, token=server.token, group_wait="1s", group_interval="1s"
        ) as am,
    ):
        trainer = Trainer(tmp_path, control_root)
        try:
            with _logs_on_failure(trainer=trainer, remediate=server, alertmanager=am):
                entry, run, fired, spike_seen = _spike_and_remediation(server, am, trainer)
        finally:
            trainer.stop()

    # --- what the server recorded: both steps, with the job's own account
    assert entry["decision"] == "accepted" and entry["target"] == "127.0.0.1"
    assert [(s["name"], s["action"], s["status"]) for s in run["steps"]] == [
        ("rollback", "training.rollback", "succeeded"),
        ("lower-lr", "training.scale_lr", "succeeded"),
    ]
    rollback, lower = _step(run, "rollback"), _step(run, "lower-lr")
    assert rollback["plan"]["job"] == JOB and rollback["plan"]["found_by"] == "label training_job"
    assert rollback["plan"]["alive"] is True
    result = rollback["result"]
    assert result["status"] == "applied" and result["job"] == JOB
    assert result["checkpoint"]["good"] is True
    assert result["step_after"] == result["checkpoint"]["step"] <= result["step_before"] - 100
    assert result["batches_skipped"] == 200
    scaled = lower["result"]
    assert scaled["status"] == "applied"
    assert scaled["lr_after"] == [pytest.approx(scaled["lr_before"][0] * 0.5)]

    # --- what the job itself says it did
    events = trainer.events()
    (rolled,) = trainer.events("rolled_back")
    assert (rolled["from_step"], rolled["to_step"]) == (result["step_before"], result["step_after"])
    (resumed,) = trainer.events("resumed")
    assert resumed["step"] == result["step_after"] + 1  # training went on from the checkpoint's step
    assert resumed["data"] == rolled["data"] + 200 + 1  # ... after dropping the next 200 batches
    (both,) = trainer.events("both_applied")
    assert both["lr"] == pytest.approx(scaled["lr_after"][0], rel=0.02)
    assert both["base_lrs"] == [pytest.approx(0.025)]  # the schedule keeps the cut
    (final,) = trainer.events("final")
    assert final["finite"] and final["loss"] < 1.0 and final["batches_skipped"] == 200
    assert final["base_lrs"] == [pytest.approx(0.025)]
    acks = {e["ack"]["kind"]: e["ack"] for e in events if e["event"] == "ack"}
    assert acks["rollback"]["id"] == result["command_id"] and acks["scale_lr"]["id"] == scaled["command_id"]

    # --- the checkpoints written since: later steps, saved after the rollback, with the lower lr
    after = [e for e in trainer.events("checkpoint") if e["t"] > rolled["t"]]
    assert after and after[0]["step"] > result["step_after"]
    newest = torch.load(trainer.checkpoints / f"ckpt-{final['checkpoints'][-1]:09d}.pt", weights_only=True)
    assert newest["step"] > result["step_after"]
    assert newest["schedulers"][0]["base_lrs"] == [pytest.approx(0.025)]
    epoch = newest["schedulers"][0]["last_epoch"]
    assert newest["optimizers"][0]["param_groups"][0]["lr"] == pytest.approx(0.025 / (1 + 0.002 * epoch))

    acked = acks["rollback"]["acked_at"]
    print(
        f"\nloss spike seen in the job's metrics -> alert fired: {fired - spike_seen:.2f} s; "
        f"alert fired -> rollback acknowledged: {acked - fired:.2f} s; "
        f"-> lr cut acknowledged: {acks['scale_lr']['acked_at'] - fired:.2f} s; "
        f"command written -> acknowledged by the job: {result['job_latency_s'] * 1000:.0f} ms (rollback), "
        f"{scaled['job_latency_s'] * 1000:.0f} ms (scale_lr); "
        f"rolled back from step {result['step_before']} to {result['step_after']}, "
        f"lr {scaled['lr_before'][0]:.4g} -> {scaled['lr_after'][0]:.4g}"
    )
