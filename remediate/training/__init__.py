"""The library a training job imports to receive remediate's commands (docs/training-protocol.md).

    from remediate.training import TrainingControl, TorchCheckpoints

Plain PyTorch loops use `TrainingControl` directly; PyTorch Lightning and Hugging Face
Trainer users add `remediate.training.lightning.RemediateCallback` or
`remediate.training.hf.RemediateTrainerCallback`. Importing this package imports neither
torch nor any of remediate's server code.
"""

from __future__ import annotations

from remediate.training.checkpoints import CallableCheckpoints, CheckpointIndex, TorchCheckpoints
from remediate.training.client import JobNameInUse, TrainingControl
from remediate.training.handlers import CheckpointStore, CommandContext, CommandRejected, Handler
from remediate.training.protocol import (
    PROTOCOL_VERSION,
    Ack,
    CheckpointInfo,
    Command,
    JobPaths,
    ProtocolError,
    Registration,
    select_checkpoint,
)

__all__ = [
    "PROTOCOL_VERSION",
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
    "TorchCheckpoints",
    "TrainingControl",
    "select_checkpoint",
]
