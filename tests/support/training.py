"""Helpers for the training-control tests: the agent's side of the protocol, and torch-free optimizer stand-ins.

`deliver` writes a command into a job's inbox exactly as remediate's agent does (atomic,
through the job's tmp/); `wait_for_ack` reads the job's answer. `FakeOptimizer` and
`FakeScheduler` have just what the built-in handlers touch (``param_groups``,
``base_lrs``), so the client's logic is tested without torch; the torch, Lightning and
Hugging Face tests use the real libraries.

`require(module)` skips a test when an optional extra is missing — except under
``scripts/test`` (REMEDIATE_TRAINING_EXTRAS_REQUIRED=1), where a missing extra fails.
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from remediate.training.protocol import Ack, Command, JobPaths, atomic_write_json, new_command_id

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
        id=command_id or new_command_id(),
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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ack = paths.read_ack(command_id)
        if ack is not None:
            return ack
        time.sleep(0.01)
    raise AssertionError(f"no acknowledgement of {command_id} within {timeout} s")


class FakeOptimizer:
    def __init__(self, *lrs: float) -> None:
        self.param_groups: list[dict[str, Any]] = [{"lr": lr, "params": []} for lr in lrs]


class FakeScheduler:
    def __init__(self, optimizer: FakeOptimizer) -> None:
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self._last_lr = list(self.base_lrs)
