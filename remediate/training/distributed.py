"""How the ranks of one job agree on commands: rank 0 reads the inbox and broadcasts; every rank applies.

`LocalChannel` is the single-process case (nothing to send). `TorchChannel` talks over a gloo process group
of its own (`dist.new_group(backend="gloo")`, CPU tensors whatever the training backend: no GPU sync, and none
of DDP's traffic on the default group waits behind it). A poll with no command costs no rank a wait: at each
exchange rank 0 *announces*, with a non-blocking broadcast (``async_op=True``) of two int64, how many commands
it holds and how many polls until the exchange after the next; every rank reads that announcement at the next
exchange, when the broadcast has long completed. Only when it announced commands do the ranks enter the
blocking part: the JSON payload of each command as bytes, applied by every rank at that same poll, and the
outcomes back to rank 0 with ``all_gather_object``. Only this module imports torch.

Every rank must call `poll` (and `skip_batch`) at the same steps until every rank is done: each exchange is
a collective. A rank that never polls (only rank 0 does), or that stops early, leaves the others in a
broadcast that the backend ends with an error of its own (gloo: "Connection reset by peer") or not at all;
an error is re-raised as `RanksOutOfStep`, which says so.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
from typing import Any

from remediate.training.placement import from_environment

log = logging.getLogger("remediate.training")
_ANNOUNCEMENT = struct.Struct("=qq")
"""Rank 0's announcement: commands it holds, polls from the next exchange to the one after."""


class RanksOutOfStep(RuntimeError):
    """A collective that `poll` runs on every rank failed: the ranks do not poll together."""


def _out_of_step(what: str, rank: int, world_size: int, exc: BaseException) -> RanksOutOfStep:
    return RanksOutOfStep(
        f"remediate.training: the {what} that poll() runs on every rank failed on rank {rank} of {world_size}: "
        "every rank must call poll() (and skip_batch()) at the same steps until every rank is done; a rank "
        f"that does not poll, or that stopped early, leaves the others in this collective ({type(exc).__name__}: "
        f"{exc})"
    )


SETTLE_TIMEOUT_S = 30.0
"""Seconds a stopping rank waits for the exchange in flight (its peers posted it with it)."""


class LocalChannel:
    rank = 0
    world_size = 1

    def broadcast(self, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        return payload

    def gather(self, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        return [outcome]

    def settle(self) -> None:
        """Nothing is ever in flight on one rank."""


class TorchChannel:
    """Collectives on a gloo group of the job's ranks; every rank must call them in the same order."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        # A CPU group of its own: NCCL would need device tensors (a GPU sync to read them) and would queue the
        # exchange behind the job's own collectives. Without gloo (rare builds) the default group serves.
        self.group = dist.new_group(backend="gloo") if dist.is_gloo_available() else None
        on_gpu = self.group is None and dist.get_backend() == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        self._length = torch.zeros(1, dtype=torch.int64, device=self.device)
        # The announcement's two int64 live in a bytearray the CPU tensor shares: written and read with struct,
        # cheaper than building a tensor per exchange (only the rare GPU fallback copies).
        self._announcement = bytearray(_ANNOUNCEMENT.size)
        self._announcement_tensor = torch.frombuffer(self._announcement, dtype=torch.int64)
        self._announcement_on_device: Any = None
        self._in_flight: Any = None

    def announce(self, commands: int, gap: int) -> None:
        """Start rank 0's announcement — `commands` held, the exchange after the next in `gap` polls — without
        waiting for it (the other ranks' values are ignored); `announced` reads it at the next exchange."""
        _ANNOUNCEMENT.pack_into(self._announcement, 0, commands, gap)
        values = self._announcement_tensor
        if self.device.type != "cpu":
            values = self._announcement_on_device = values.to(self.device)
        try:
            self._in_flight = self._dist.broadcast(values, src=0, group=self.group, async_op=True)
        except RuntimeError as exc:
            raise _out_of_step("broadcast", self.rank, self.world_size, exc) from exc

    def announced(self) -> tuple[int, int] | None:
        """The last announcement (commands, gap) as rank 0 sent it; None before the first."""
        if self._in_flight is None:
            return None
        work, self._in_flight = self._in_flight, None
        try:
            work.wait()
        except RuntimeError as exc:
            raise _out_of_step("broadcast", self.rank, self.world_size, exc) from exc
        if self.device.type != "cpu":
            self._announcement_tensor.copy_(self._announcement_on_device)
        commands, gap = _ANNOUNCEMENT.unpack_from(self._announcement)
        return commands, gap

    def settle(self) -> None:
        """The job stops: wait for the announcement in flight. Every rank posted it at the same poll, so the wait
        ends at once; a rank that exits with a collective still pending is aborted by gloo ("terminate called
        without an active exception", SIGABRT), which fails the whole job. A peer gone already ends the wait
        with an error, ignored here: the job is stopping either way."""
        work, self._in_flight = self._in_flight, None
        if work is None:
            return
        from datetime import timedelta

        try:
            work.wait(timeout=timedelta(seconds=SETTLE_TIMEOUT_S))
        except RuntimeError as exc:
            log.debug("the last exchange did not complete as the job stopped: %s", exc)

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
        dist.broadcast(self._length, src=0, group=self.group)
        size = int(self._length.item())
        if size == 0:
            return None
        if self.rank == 0:
            buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        else:
            buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        dist.broadcast(buffer, src=0, group=self.group)
        received: dict[str, Any] = json.loads(bytes(buffer.cpu().tolist()).decode())
        return received

    def gather(self, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's outcome, in rank order (on every rank)."""
        outcomes: list[Any] = [None] * self.world_size
        try:
            self._dist.all_gather_object(outcomes, outcome, group=self.group)
        except RuntimeError as exc:
            raise _out_of_step("gather of the outcomes", self.rank, self.world_size, exc) from exc
        return outcomes


def detect_channel() -> tuple[LocalChannel | TorchChannel, int, int]:
    """(channel, rank, world size) of this process: torch.distributed's group when it is initialized with more
    than one rank, else a local channel (the rank from the launcher's environment, torchrun's or srun's:
    remediate.training.placement; a rank other than 0 then applies no command)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        channel = TorchChannel()
        return channel, channel.rank, channel.world_size
    placed = from_environment()
    if placed.world_size > 1:
        log.warning(
            "remediate: a world of %s ranks but torch.distributed is not initialized: only rank 0 applies commands "
            "(register after init_process_group)",
            placed.world_size,
        )
    return LocalChannel(), placed.rank, 1
