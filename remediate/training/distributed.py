"""How the ranks of one job agree on commands: rank 0 reads the inbox and broadcasts; every rank applies.

`LocalChannel` is the single-process case (nothing to send). `TorchChannel` uses the
default torch.distributed process group: one broadcast of a single int64 per poll when
there is no command (the payload length, 0), then the JSON payload as bytes when there is
one; the outcomes come back to rank 0 with ``all_gather_object``. With NCCL the tensors live
on the current CUDA device. Only this module imports torch.

Every rank must call `poll` (and `skip_batch`) at the same steps until every rank is done: each poll
is a collective. A rank that never polls (only rank 0 does), or that stops early, leaves the others in
a broadcast that the backend ends with an error of its own (gloo: "Connection reset by peer") or not
at all; an error is re-raised as `RanksOutOfStep`, which says so.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

log = logging.getLogger("remediate.training")


class RanksOutOfStep(RuntimeError):
    """A collective that `poll` runs on every rank failed: the ranks do not poll together."""


def _out_of_step(what: str, rank: int, world_size: int, exc: BaseException) -> RanksOutOfStep:
    return RanksOutOfStep(
        f"remediate.training: the {what} that poll() runs on every rank failed on rank {rank} of {world_size}: "
        "every rank must call poll() (and skip_batch()) at the same steps until every rank is done; a rank "
        f"that does not poll, or that stopped early, leaves the others in this collective ({type(exc).__name__}: "
        f"{exc})"
    )


class LocalChannel:
    rank = 0
    world_size = 1

    def broadcast(self, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        return payload

    def gather(self, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        return [outcome]


class TorchChannel:
    """Collectives on the default process group; every rank must call them in the same order."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        if dist.get_backend() == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self._length = torch.zeros(1, dtype=torch.int64, device=self.device)

    def broadcast(self, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        """Rank 0's `payload` on every rank (None: nothing to do)."""
        try:
            return self._broadcast(payload)
        except RuntimeError as exc:  # torch's DistBackendError and gloo's errors are RuntimeErrors
            raise _out_of_step("broadcast", self.rank, self.world_size, exc) from exc

    def _broadcast(self, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        torch, dist = self._torch, self._dist
        data = b""
        if self.rank == 0 and payload is not None:
            data = json.dumps(payload, allow_nan=False).encode()
        self._length.fill_(len(data))
        dist.broadcast(self._length, src=0)
        size = int(self._length.item())
        if size == 0:
            return None
        if self.rank == 0:
            buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        else:
            buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        dist.broadcast(buffer, src=0)
        received: dict[str, Any] = json.loads(bytes(buffer.cpu().tolist()).decode())
        return received

    def gather(self, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's outcome, in rank order (on every rank)."""
        outcomes: list[Any] = [None] * self.world_size
        try:
            self._dist.all_gather_object(outcomes, outcome)
        except RuntimeError as exc:
            raise _out_of_step("gather of the outcomes", self.rank, self.world_size, exc) from exc
        return outcomes


def detect_channel() -> tuple[LocalChannel | TorchChannel, int, int]:
    """(channel, rank, world size) of this process: torch.distributed's group when it is initialized with more
    than one rank, else a local channel (the rank from $RANK: a rank other than 0 then applies no command)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        channel = TorchChannel()
        return channel, channel.rank, channel.world_size
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1:
        log.warning(
            "remediate: WORLD_SIZE=%s but torch.distributed is not initialized: only rank 0 applies commands "
            "(register after init_process_group)",
            world,
        )
    return LocalChannel(), int(os.environ.get("RANK", "0") or 0), 1
