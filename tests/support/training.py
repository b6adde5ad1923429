"""Helpers for the training-control tests: the agent's side of the protocol, and torch-free optimizer stand-ins.

`deliver` writes a command into a job's inbox exactly as remediate's agent does (atomic,
through the job's tmp/); `wait_for_ack` reads the job's answer. `FakeOptimizer` and
`FakeScheduler` have just what the built-in handlers touch (``param_groups``,
``base_lrs``), so the client's logic is tested without torch; the torch, Lightning and
Hugging Face tests use the real libraries.

`LiveJob` is a job polling in a thread of the test (torch-free stand-ins), `ctx_for` the step context
of a training alert, `Jobs` real job processes (tests/support/jobs/light_job.py) stopped at a test's end.

`require(module)` skips a test when an optional extra is missing — except under
``scripts/test`` (REMEDIATE_TRAINING_EXTRAS_REQUIRED=1), where a missing extra fails.
"""

from __future__ import annotations

import importlib
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from remediate.actions.base import StepContext
from remediate.intake.alerts import alert_ref
from remediate.training import CallableCheckpoints, ControlOptions, TrainingControl
from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.protocol import APPLIED, Ack, CheckpointInfo, Command
from tests.support.waiting import wait_until

JOB = "job-a"


def require(module: str) -> ModuleType:
    if os.environ.get("REMEDIATE_TRAINING_EXTRAS_REQUIRED") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"the training extras are not installed ({module})")


def deliver(
    root: Path,
    job: str,
    kind: str,
    params: dict[str, Any] | None = None,
    *,
    expires_in: float = 60.0,
    command_id: str | None = None,
    created_at: float | None = None,
) -> Command:
    """Write a command into the job's inbox the way remediate does."""
    paths = JobPaths(root, job)
    now = time.time() if created_at is None else created_at
    command = Command(
        id=command_id or secrets.token_hex(12),
        kind=kind,
        params=dict(params or {}),
        created_at=now,
        expires_at=now + expires_in,
        issued_by={"test": True},
    )
    atomic_write_json(paths.command(command.id), command.to_dict(), tmp_dir=paths.tmp)
    return command


def wait_for_ack(root: Path, job: str, command_id: str, timeout: float = 10.0) -> Ack:
    paths = JobPaths(root, job)
    return wait_until(
        lambda: paths.read_ack(command_id), timeout, interval=0.01, message=f"no acknowledgement of {command_id}"
    )


class FakeOptimizer:
    def __init__(self, *lrs: float) -> None:
        self.param_groups: list[dict[str, Any]] = [{"lr": lr, "params": []} for lr in lrs]


class FakeScheduler:
    def __init__(self, optimizer: FakeOptimizer) -> None:
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self._last_lr = list(self.base_lrs)


LABELS = ("training_job", "job", "job_name", "exported_job", "exported_pod", "pod")
STARTS_AT = "2026-11-21T05:40:14.652668659Z"
STARTS_AT_EPOCH = 1795239614.652668  # what the rollback sends as saved_before (microseconds: datetime's limit)
SAVED_AT = STARTS_AT_EPOCH - 3600.0
"""When LiveJob's checkpoints were saved: before the alert started, as a job's good checkpoints are."""


def halved_at_the_next_epoch(
    root: Path, job: str, sent: list[str], effective: int, *, applied_at: int = 2
) -> tuple[Ack, Ack]:
    """The acknowledgements of `sent` (reduce_batch_size factor 0.5, then set_dataloader_workers 0, both sent at
    step 2 of a framework job): taken at step `applied_at` (several ranks apply a command at the poll after the
    one that claimed it), applied at the next epoch, 16 x 1 -> 8 x 2 with the `effective` batch kept."""
    shrink, workers = (wait_for_ack(root, job, command_id) for command_id in sent)
    assert shrink.status == APPLIED and workers.status == APPLIED, (shrink.detail, workers.detail)
    assert shrink.step_before == applied_at and "applies at the next epoch" in shrink.detail
    assert (shrink.result["micro_batch_size_before"], shrink.result["micro_batch_size_after"]) == (16, 8)
    assert (shrink.result["accumulation_steps_before"], shrink.result["accumulation_steps_after"]) == (1, 2)
    assert shrink.result["effective_batch_size_before"] == shrink.result["effective_batch_size_after"] == effective
    return shrink, workers


def ctx_for(
    labels: dict[str, str],
    *,
    run_id: int = 1,
    step_index: int = 0,
    seconds: float = 30.0,
    starts_at: str = STARTS_AT,
) -> StepContext:
    alert = {
        "labels": {"alertname": "TrainingLossSpike", **labels},
        "fingerprint": "f00d",
        "startsAt": starts_at,
        "alertname": "TrainingLossSpike",
    }
    return StepContext(
        run_id=run_id,
        step_index=step_index,
        playbook="loss-spike",
        target="node-a",
        alert=alert_ref(alert),
        deadline=time.monotonic() + seconds,
    )


class LiveJob:
    """A job that polls every 10 ms in a background thread, one step per poll."""

    def __init__(self, root: Path, name: str, *, start_step: int = 500, load_delay: float = 0.0) -> None:
        self.optimizer = FakeOptimizer(3e-4)
        self.scheduler = FakeScheduler(self.optimizer)
        self.loaded: list[int] = []
        self.load_delay = load_delay
        self.checkpoints = CallableCheckpoints(
            root.parent / f"ckpt-{name}", save=lambda step: f"/ckpt/{step}", load=self._load, writer=True
        )
        for step, loss in ((100, 2.0), (200, 1.9), (300, 1.8), (400, 1.7), (450, float("nan"))):
            good = self.checkpoints.judge(step, loss)
            self.checkpoints.record(CheckpointInfo(step, loss, good, f"/ckpt/{step}", SAVED_AT + step))
        self.control = TrainingControl(
            name,
            root=root,
            checkpoints=self.checkpoints,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            options=ControlOptions(wake_signal=None, heartbeat_interval=0.2),
        )
        self.step = start_step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _load(self, info: Any) -> None:
        time.sleep(self.load_delay)
        self.loaded.append(info.step)

    def register(self) -> LiveJob:
        self.control.register()
        self.control.poll(self.step)
        return self

    def start(self) -> LiveJob:
        self.register()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step = self.control.poll(self.step + 1, 1.5)
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


LIGHT_JOB = Path(__file__).resolve().parent / "jobs" / "light_job.py"
REPO = Path(__file__).resolve().parents[2]


class Jobs:
    """Real job processes (and stand-in processes) started by a test, all stopped at its end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, name: str, *, env: dict[str, str] | None = None, **options: Any) -> subprocess.Popen[str]:
        args = [sys.executable, str(LIGHT_JOB), "--root", str(self.root), "--job", name]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=environment)
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), f"the job did not start: {line!r}"
        return proc

    def sleeper(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
