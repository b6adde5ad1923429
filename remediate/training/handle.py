"""What the job's parts see of the `TrainingControl` that owns them: two narrow Protocols, no client import.

The handlers (`handlers`, a `Batching`'s, the job's own), the dispatch loop, job.json (`jobfile`) and the
multi-rank exchange (`exchange`) are given the control object itself, but typed by what they use of it:
`ControlHandle` (the training state a command changes) and `JobHandle` (that plus who the job is, what
job.json publishes). So these modules depend on this one, the client on all of them, and nothing imports
in a circle. `CheckpointStore` is here too: the handle names it, and `handlers` would otherwise close a cycle.
"""

from __future__ import annotations

from typing import Any, Protocol

from remediate.training.files import JobPaths
from remediate.training.protocol import CheckpointInfo


class CheckpointStore(Protocol):
    """Where a job's checkpoints are: `TorchCheckpoints`, `CallableCheckpoints`, or your own."""

    def list(self) -> list[CheckpointInfo]: ...

    def get(self, step: int) -> CheckpointInfo | None: ...

    def save(self, step: int, loss: float | None = None, *, good: bool | None = None) -> CheckpointInfo: ...

    def load(self, info: CheckpointInfo) -> Any: ...

    def discard_after(self, step: int) -> list[CheckpointInfo]: ...


class ControlHandle(Protocol):
    """The training state a command's handler reads and changes (``ctx.control``), on one rank."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def checkpoints(self) -> CheckpointStore | None: ...

    @property
    def optimizers(self) -> list[Any]: ...

    @property
    def schedulers(self) -> list[Any]: ...

    @property
    def rewinds_step(self) -> bool:
        """Whether the loop moves its step counter back after a rollback (a plain loop does)."""
        ...

    @property
    def batches_to_skip(self) -> int: ...

    def request_skip(self, batches: int) -> None: ...

    def current_loss(self) -> float | None: ...


class JobHandle(ControlHandle, Protocol):
    """A `ControlHandle` and who the job is: what job.json publishes and the exchange counts polls by."""

    last_step: int | None
    """The step of the latest poll; the exchange sets it after applying commands (a rollback moves it)."""

    @property
    def paths(self) -> JobPaths: ...

    @property
    def job(self) -> str: ...

    @property
    def framework(self) -> str: ...

    @property
    def heartbeat_interval(self) -> float: ...

    @property
    def commands(self) -> dict[str, dict[str, Any]]: ...

    @property
    def refused(self) -> dict[str, str]: ...
