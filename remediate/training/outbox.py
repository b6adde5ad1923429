"""The job's acknowledgements: one ``outbox/<id>.json`` per command, written last (after the change)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.procfs import this_host
from remediate.training.protocol import APPLIED, FAILED, Ack, Command

log = logging.getLogger("remediate.training")

OUTBOX_MAX_AGE_S = 7 * 24 * 3600
"""Acknowledgements older than this are removed when a job registers."""


@dataclass(eq=False)
class Outbox:
    """Writes a job's acknowledgements (rank 0); `identity()` says who answers (job, pid, host, rank, ...)."""

    paths: JobPaths
    identity: Callable[[], dict[str, Any]]
    on_ack: Callable[[Ack], None] | None
    acks: list[Ack] = field(default_factory=list, init=False)
    """The acknowledgements this job wrote, oldest first (the last 100)."""

    def answer(
        self,
        command_id: str,
        kind: str,
        status: str,
        detail: str,
        received: float,
        step: int | None,
        *,
        step_after: int | None = None,
        result: dict[str, Any] | None = None,
    ) -> None:
        """Acknowledge one command; without `step_after` the step did not move."""
        self.write(
            Ack(
                id=command_id,
                kind=kind,
                status=status,
                detail=detail,
                received_at=received,
                acked_at=time.time(),
                step_before=step,
                step_after=step if step_after is None else step_after,
                result=result or {},
                job=self.identity(),
                pid=os.getpid(),
                host=this_host(),
            )
        )

    def answer_ranks(self, command: Command, received: float, outcomes: list[dict[str, Any]]) -> None:
        """Acknowledge a command every rank applied: rank 0's outcome, failed when any rank disagrees."""
        mine = outcomes[0]
        status, detail = mine["status"], mine["detail"]
        others = [o for o in outcomes[1:] if o["status"] != status or o["step_after"] != mine["step_after"]]
        if others:
            status = FAILED
            detail += "; ranks disagree: " + "; ".join(
                f"rank {o['rank']} {o['status']} (step {o['step_after']}): {o['detail']}" for o in others
            )
        self.answer(
            command.id,
            command.kind,
            status,
            detail,
            received,
            mine["step_before"],
            step_after=mine["step_after"],
            result=mine["result"],
        )

    def write(self, ack: Ack) -> None:
        atomic_write_json(self.paths.ack(ack.id), ack.to_dict(), tmp_dir=self.paths.tmp)
        unlink(self.paths.taken_command(ack.id))
        level = logging.INFO if ack.status == APPLIED else logging.WARNING
        log.log(
            level,
            "remediate: %s command %s %s at step %s: %s",
            ack.kind,
            ack.id,
            ack.status,
            ack.step_before,
            ack.detail,
        )
        self.acks.append(ack)
        del self.acks[:-100]
        if self.on_ack is not None:
            self.on_ack(ack)

    def prune(self) -> None:
        """Remove acknowledgements older than OUTBOX_MAX_AGE_S."""
        cutoff = time.time() - OUTBOX_MAX_AGE_S
        with contextlib.suppress(OSError), os.scandir(self.paths.outbox) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
