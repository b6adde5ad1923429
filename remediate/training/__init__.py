"""The library a training job imports to receive remediate's commands (docs/training-protocol.md).

    from remediate.training import TrainingControl, TorchCheckpoints

Plain PyTorch loops use `TrainingControl` directly; PyTorch Lightning and Hugging Face
Trainer users add `remediate.training.lightning.RemediateCallback` or
`remediate.training.hf.RemediateTrainerCallback`. Importing this package imports neither
torch nor any of remediate's server code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from remediate.training.files import JobPaths
from remediate.training.protocol import (
    PROTOCOL_VERSION,
    RESTART_EXIT_CODE,
    Ack,
    CheckpointInfo,
    Command,
    ProtocolError,
    Registration,
    select_checkpoint,
)

__all__ = [
    "PROTOCOL_VERSION",
    "RESTART_EXIT_CODE",
    "Ack",
    "CallableCheckpoints",
    "CheckpointIndex",
    "CheckpointInfo",
    "CheckpointStore",
    "Command",
    "CommandContext",
    "CommandRejected",
    "Handler",
    "JobNameInUse",
    "JobPaths",
    "ProtocolError",
    "Registration",
    "RestartRequested",
    "TorchCheckpoints",
    "TrainingControl",
    "select_checkpoint",
]

# The job-side classes load when first named (PEP 562): the server's training actions import only
# `remediate.training.protocol` and `.commands`, and each package import runs this file, which would
# otherwise load the client, its handlers and checkpoints into every server process and node agent (the
# agent's idle RSS target, docs/benchmarks.md).
_LAZY = {
    "CallableCheckpoints": "remediate.training.checkpoints",
    "CheckpointIndex": "remediate.training.checkpoints",
    "TorchCheckpoints": "remediate.training.checkpoints",
    "JobNameInUse": "remediate.training.jobfile",
    "TrainingControl": "remediate.training.client",
    "CheckpointStore": "remediate.training.handlers",
    "CommandContext": "remediate.training.handlers",
    "CommandRejected": "remediate.training.handlers",
    "Handler": "remediate.training.handlers",
    "RestartRequested": "remediate.training.handlers",
}

if TYPE_CHECKING:
    from remediate.training.checkpoints import CallableCheckpoints, CheckpointIndex, TorchCheckpoints
    from remediate.training.client import TrainingControl
    from remediate.training.handlers import (
        CheckpointStore,
        CommandContext,
        CommandRejected,
        Handler,
        RestartRequested,
    )
    from remediate.training.jobfile import JobNameInUse


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
