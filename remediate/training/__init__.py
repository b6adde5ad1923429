"""The library a training job imports to receive remediate's commands (docs/training-protocol.md).

    from remediate.training import TorchCheckpoints, TrainingControl

    ckpts = TorchCheckpoints("/scratch/ckpt", model=model, optimizer=opt, scheduler=sched)
    control = TrainingControl("llm-7b", checkpoints=ckpts, optimizer=opt, scheduler=sched)
    for batch in loader:
        if control.skip_batch():
            continue
        loss = train_step(batch)
        step = control.poll(step + 1, loss)      # applies a pending command; a rollback returns an older step

What a job uses, and nothing else:

- what you construct: `TrainingControl` (the job's side of the protocol), with `ControlOptions` for the
  rarely changed settings, and a checkpoint store: `TorchCheckpoints` (torch.save of model, optimizer,
  scheduler) or `CallableCheckpoints` (your own save/load functions);
- what you call each step: ``control.skip_batch()`` and ``control.poll(step, loss)``;
- what you get back: the step to continue from, `CheckpointInfo` (``ckpts.resume()``, what your save/load
  functions see), the `CommandContext` your own handlers (``control.add_handler``, ``@control.handler``) are
  given, `CommandRejected` for them to raise, and what the library raises in the loop: `RestartRequested`
  (a ``restart`` command: let it exit the process) and `JobNameInUse` (another live job holds the name).

PyTorch Lightning and Hugging Face Trainer users add `remediate.training.lightning.RemediateCallback`
(and `StepMetricsCallback` for the fail-slow rules' step metrics) or
`remediate.training.hf.RemediateTrainerCallback` instead of calling `TrainingControl` themselves.

Importing this package imports neither torch nor any of remediate's server code, nor even the job-side
classes until one is named. The protocol's messages (`Ack`, `Command`, `Registration`, ...), which remediate's
server side uses too, are in `remediate.training.protocol`; the names this package exported before and no
longer does still resolve for one release, with a DeprecationWarning (`_MOVED` below).

May import: nothing else of remediate (pyproject.toml's `training` contract: it runs inside users' jobs).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

__all__ = [
    "CallableCheckpoints",
    "CheckpointInfo",
    "CommandContext",
    "CommandRejected",
    "ControlOptions",
    "JobNameInUse",
    "RestartRequested",
    "TorchCheckpoints",
    "TrainingControl",
]

# The job-side classes load when first named (PEP 562): the server's training actions import only
# `remediate.training.protocol` and `.commands`, and each package import runs this file, which would
# otherwise load the client, its handlers and checkpoints into every server process and node agent (the
# agent's idle RSS target, docs/benchmarks.md).
_LAZY = {
    "CallableCheckpoints": "remediate.training.checkpoints",
    "TorchCheckpoints": "remediate.training.checkpoints",
    "CheckpointInfo": "remediate.training.protocol",
    "CommandContext": "remediate.training.handlers",
    "CommandRejected": "remediate.training.handlers",
    "RestartRequested": "remediate.training.handlers",
    "ControlOptions": "remediate.training.options",
    "JobNameInUse": "remediate.training.jobfile",
    "TrainingControl": "remediate.training.client",
}

# What this package exported before and no longer does -> the module it comes from; still resolved, with a
# DeprecationWarning, for one release (the server's protocol types among them: this namespace is the job's).
_MOVED = {
    "PROTOCOL_VERSION": "remediate.training.protocol",
    "RESTART_EXIT_CODE": "remediate.training.protocol",
    "Ack": "remediate.training.protocol",
    "Command": "remediate.training.protocol",
    "ProtocolError": "remediate.training.protocol",
    "Registration": "remediate.training.protocol",
    "select_checkpoint": "remediate.training.protocol",
    "JobPaths": "remediate.training.files",
    "CheckpointIndex": "remediate.training.checkpoints",
    "CheckpointStore": "remediate.training.handle",
    "Handler": "remediate.training.handlers",
}

if TYPE_CHECKING:
    from remediate.training.checkpoints import CallableCheckpoints, TorchCheckpoints
    from remediate.training.client import TrainingControl
    from remediate.training.handlers import CommandContext, CommandRejected, RestartRequested
    from remediate.training.jobfile import JobNameInUse
    from remediate.training.options import ControlOptions
    from remediate.training.protocol import CheckpointInfo


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    moved = _MOVED.get(name)
    if moved is not None:
        # Not cached in globals(): every old-style import warns, not only the first one in the process.
        warnings.warn(
            f"importing {name} from remediate.training is deprecated and stops working in the next release: "
            f"import it from {moved}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
