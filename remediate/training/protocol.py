"""The training command protocol, version 1: its messages and their validation (docs/training-protocol.md).

Shared by both sides: the training job (`remediate.training.client`) and remediate's
`training.*` actions. Standard library only: no torch, no server code.

The messages (command, acknowledgement, registration, checkpoint index entry), the names and
ids they carry, and how they are checked; how they lie on disk is `remediate.training.files`.
Times are Unix epoch seconds (floats) on the node's clock: the job and remediate's agent run on
the same node.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
ENV_CONTROL_ROOT = "REMEDIATE_TRAINING_CONTROL_ROOT"
ENV_JOB = "REMEDIATE_TRAINING_JOB"
DEFAULT_CONTROL_ROOT = Path("/run/remediate/training")

# Built-in command kinds.
ROLLBACK = "rollback"
SCALE_LR = "scale_lr"
CHECKPOINT = "checkpoint"
BUILTIN_KINDS = (ROLLBACK, SCALE_LR, CHECKPOINT)
"""The kinds every library version handles (an older one, without ``commands`` in job.json, too)."""
RESTART = "restart"
RESTART_EXIT_CODE = 75
"""The exit status of every rank after a ``restart`` command (EX_TEMPFAIL: try again). Not 0, so that
``torchrun --max-restarts N`` / an elastic launcher / a Kubernetes restart policy starts the job again."""

# Acknowledgement statuses.
APPLIED = "applied"
EXPIRED = "expired"
REJECTED = "rejected"
FAILED = "failed"
ACK_STATUSES = (APPLIED, EXPIRED, REJECTED, FAILED)

# Which checkpoint a rollback restores.
LATEST = "latest"
LATEST_GOOD = "latest_good"
CHECKPOINT_CHOICES = (LATEST, LATEST_GOOD)

WAKE_SIGNALS = ("SIGUSR2", "SIGUSR1")
"""The only signals remediate ever sends to a job (SIGUSR1 belongs to SLURM/Lightning: prefer SIGUSR2)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


class ProtocolError(ValueError):
    """A message or a control directory does not follow the protocol."""


# ---------------------------------------------------------------------------------------------- names


def job_name_problem(name: object) -> str | None:
    """Why `name` cannot be a job name (None when it can): one path component of letters, digits, '.', '_', '-'."""
    if not isinstance(name, str):
        return f"a job name must be a string, got {type(name).__name__}"
    if not _NAME.fullmatch(name):
        return (
            f"job name {name[:80]!r} is not allowed: it must start with a letter or digit and contain only "
            "letters, digits, '.', '_' and '-' (at most 253 characters)"
        )
    return None


def check_job_name(name: object) -> str:
    problem = job_name_problem(name)
    if problem:
        raise ProtocolError(problem)
    assert isinstance(name, str)
    return name


def check_command_id(value: object) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ProtocolError(f"command id {str(value)[:80]!r} is not allowed (letters, digits, '.', '_', '-')")
    return value


def check_kind(value: object) -> str:
    if not isinstance(value, str) or not _KIND.fullmatch(value):
        raise ProtocolError(f"command kind {str(value)[:80]!r} is not allowed (lowercase letters, digits, _ . -)")
    return value


# ---------------------------------------------------------------------------------------------- numbers


def finite_or_text(value: float | None) -> float | str | None:
    """A float for JSON: finite values as they are, NaN/inf as the strings "nan"/"inf"/"-inf"."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else str(number)


def number_from_json(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _require(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ProtocolError(f"{what}: field {key!r} is missing or not a {_type_names(kind)}")
    return value


def _type_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def _message(data: Any, what: str, *, versioned: bool = True) -> dict[str, Any]:
    """`data` as a message of this protocol version: a JSON object (ProtocolError naming `what` otherwise)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{what}: not a JSON object")
    version = data.get("version")
    if versioned and version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"{what}: protocol version {version!r} is not supported (this side speaks {PROTOCOL_VERSION})"
        )
    return data


def _object(data: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    """The JSON object in field `key` ({} when missing; null or any other type is refused)."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ProtocolError(f"{what}: field {key!r} must be an object")
    return value


# ---------------------------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Command:
    """One instruction to a job: written by remediate into ``inbox/<id>.json``."""

    id: str
    kind: str
    params: dict[str, Any]
    created_at: float
    expires_at: float
    """The job never applies the command once this time has passed (it acknowledges it as expired)."""
    issued_by: dict[str, Any] = field(default_factory=dict)
    version: int = PROTOCOL_VERSION

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Command:
        data = _message(data, "command")
        params, issued_by = _object(data, "params", "command"), _object(data, "issued_by", "command")
        created = _require(data, "created_at", (int, float), "command")
        expires = _require(data, "expires_at", (int, float), "command")
        if not (math.isfinite(created) and math.isfinite(expires)):
            raise ProtocolError("command: created_at and expires_at must be finite")
        return cls(
            id=check_command_id(data.get("id")),
            kind=check_kind(data.get("kind")),
            params=params,
            created_at=float(created),
            expires_at=float(expires),
            issued_by=issued_by,
        )


@dataclass(frozen=True)
class Ack:
    """What the job did with one command: written by the job into ``outbox/<id>.json``."""

    id: str
    kind: str
    status: str
    """applied | expired | rejected | failed"""
    detail: str
    received_at: float
    acked_at: float
    step_before: int | None = None
    step_after: int | None = None
    result: dict[str, Any] = field(default_factory=dict)
    """Kind-specific facts: checkpoint, lr_before/lr_after, batches_skipped, ..."""
    job: dict[str, Any] = field(default_factory=dict)
    """Who answered: job, pid, host, rank, world_size."""
    pid: int | None = None
    """The pid of the process that wrote this answer (rank 0): remediate compares it with the plan's pid."""
    host: str | None = None
    """That process's host name."""
    version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Ack:
        data = _message(data, "acknowledgement")
        status = data.get("status")
        if status not in ACK_STATUSES:
            raise ProtocolError(f"acknowledgement: status {status!r} is not one of {', '.join(ACK_STATUSES)}")
        result, job = _object(data, "result", "acknowledgement"), _object(data, "job", "acknowledgement")
        detail = data.get("detail", "")
        host = data.get("host")
        return cls(
            id=check_command_id(data.get("id")),
            kind=str(data.get("kind", "")),
            status=status,
            detail=detail if isinstance(detail, str) else str(detail),
            received_at=float(number_from_json(data.get("received_at")) or 0.0),
            acked_at=float(number_from_json(data.get("acked_at")) or 0.0),
            step_before=_optional_int(data, "step_before"),
            step_after=_optional_int(data, "step_after"),
            result=result,
            job=job,
            pid=_optional_int(data, "pid"),  # absent from acknowledgements of older jobs
            host=host if isinstance(host, str) else None,
        )


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint in a job's index: its step, the loss when it was saved, and whether it counts as good."""

    step: int
    loss: float | None = None
    good: bool = False
    path: str | None = None
    saved_at: float = 0.0
    run: str | None = None
    """The run of the job that saved it (`CheckpointIndex.run_id`); None in indexes of older libraries."""

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "loss": finite_or_text(self.loss)}
        if self.run is None:  # as indexes of older libraries wrote it
            del data["run"]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> CheckpointInfo:
        data = _message(data, "checkpoint", versioned=False)
        step = _require(data, "step", int, "checkpoint")
        path = data.get("path")
        return cls(
            step=step,
            loss=number_from_json(data.get("loss")),
            good=data.get("good") is True,
            path=path if isinstance(path, str) else None,
            saved_at=float(number_from_json(data.get("saved_at")) or 0.0),
            run=_optional_str(data, "run"),
        )

    def describe(self) -> str:
        loss = "unknown loss" if self.loss is None else f"loss {self.loss:.4g}"
        return f"step {self.step} ({loss}, {'good' if self.good else 'not marked good'})"


@dataclass(frozen=True)
class Registration:
    """``job.json``: who the job is and how it is doing. Rewritten by rank 0 (heartbeat, checkpoint saves)."""

    job: str
    pid: int
    host: str
    rank: int = 0
    world_size: int = 1
    framework: str = "pytorch"
    started_at: float = 0.0
    last_step: int | None = None
    last_poll_at: float | None = None
    heartbeat_s: float = 2.0
    """How often the job rewrites this file while it polls."""
    pid_start: int | None = None
    """The process start time (field 22 of /proc/<pid>/stat): tells a live job from a reused pid."""
    wake_signal: str | None = None
    """The signal the job handles as a wake-up (SIGUSR2), or None: never send one."""
    kinds: tuple[str, ...] = ()
    checkpoints: tuple[CheckpointInfo, ...] = ()
    lr: tuple[float, ...] = ()
    """The learning rate of every optimizer param group at the last heartbeat."""
    closed_at: float | None = None
    """Set when the job stopped polling on purpose (training finished)."""
    pod: str | None = None
    """The job's pod (or host) name from its environment ($POD_NAME, else $HOSTNAME): what Prometheus'
    target discovery calls it, for `expect_pod`."""
    namespace: str | None = None
    """The job's Kubernetes namespace ($POD_NAMESPACE), for `expect_namespace`."""
    commands: dict[str, dict[str, Any]] | None = None
    """Every command the job handles -> the schema of its params (`remediate.training.commands`);
    None from an older library that declares none (it lists only `kinds`)."""
    refused: dict[str, str] = field(default_factory=dict)
    """Command kinds the job's integration cannot apply -> why (e.g. a Trainer set up so that it cannot change
    its batch size): remediate's refusal says so. Empty from an older library."""
    version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "kinds": list(self.kinds),
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "lr": [finite_or_text(v) for v in self.lr],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Registration:
        data = _message(data, "registration")
        kinds = data.get("kinds") or []
        checkpoints = data.get("checkpoints") or []
        lr = data.get("lr") or []
        if not isinstance(kinds, list) or not isinstance(checkpoints, list) or not isinstance(lr, list):
            raise ProtocolError("registration: kinds, checkpoints and lr must be lists")
        wake = data.get("wake_signal")
        commands = data.get("commands")
        if commands is not None and not (
            isinstance(commands, dict) and all(isinstance(v, dict) for v in commands.values())
        ):
            raise ProtocolError("registration: commands must map each command name to its params schema")
        return cls(
            job=check_job_name(data.get("job")),
            pid=_require(data, "pid", int, "registration"),
            host=str(data.get("host", "")),
            rank=_optional_int(data, "rank") or 0,
            world_size=_optional_int(data, "world_size") or 1,
            framework=str(data.get("framework", "")),
            started_at=float(number_from_json(data.get("started_at")) or 0.0),
            last_step=_optional_int(data, "last_step"),
            last_poll_at=number_from_json(data.get("last_poll_at")),
            heartbeat_s=float(number_from_json(data.get("heartbeat_s")) or 2.0),
            pid_start=_optional_int(data, "pid_start"),
            wake_signal=wake if wake in WAKE_SIGNALS else None,
            kinds=tuple(str(k) for k in kinds),
            checkpoints=tuple(CheckpointInfo.from_dict(c) for c in checkpoints),
            lr=tuple(v for v in (number_from_json(x) for x in lr) if v is not None),
            closed_at=number_from_json(data.get("closed_at")),
            pod=_optional_str(data, "pod"),
            namespace=_optional_str(data, "namespace"),
            commands=None if commands is None else {str(k): v for k, v in commands.items()},
            refused=_refused(data.get("refused")),
        )


def _refused(value: Any) -> dict[str, str]:
    """A registration's ``refused`` (kind -> why); anything else in it is ignored (it only explains a refusal)."""
    if not isinstance(value, dict):
        return {}
    return {str(kind): why for kind, why in value.items() if isinstance(why, str)}


# ---------------------------------------------------------------------------------------------- checkpoints


def select_checkpoint(
    checkpoints: Iterable[CheckpointInfo],
    current_step: int | None,
    which: str,
    min_steps_back: int = 0,
    *,
    saved_before: float | None = None,
) -> tuple[CheckpointInfo | None, str]:
    """The checkpoint a rollback restores, and why: the newest one (marked good, for `latest_good`)
    whose step is at most ``current_step - min_steps_back`` and, with `saved_before` (epoch seconds:
    the alert's start), that was saved strictly before that time — a checkpoint saved during the
    spike is never restored. Used by the job when it applies a rollback and by remediate's dry-run
    (on the job's registered index) alike."""
    if which not in CHECKPOINT_CHOICES:
        raise ProtocolError(f"checkpoint must be one of {', '.join(CHECKPOINT_CHOICES)}, got {which!r}")
    known = sorted(checkpoints, key=lambda c: c.step)
    if not known:
        return None, "the job has no checkpoint"
    limit = None if current_step is None else current_step - max(0, min_steps_back)
    candidates = [c for c in known if limit is None or c.step <= limit]
    if saved_before is not None:
        candidates = [c for c in candidates if c.saved_at < saved_before]
    if which == LATEST_GOOD:
        candidates = [c for c in candidates if c.good]
    wanted = "the newest checkpoint marked good" if which == LATEST_GOOD else "the newest checkpoint"
    if limit is not None and min_steps_back:
        wanted += f" at least {min_steps_back} steps before step {current_step} (step <= {limit})"
    elif limit is not None:
        wanted += f" at or before step {current_step}"
    if saved_before is not None:
        wanted += f" saved before {_utc(saved_before)}"
    if not candidates:
        steps = ", ".join(f"{c.step}{'' if c.good else '*'}" for c in known[-8:])
        newer = sum(1 for c in known if saved_before is not None and c.saved_at >= saved_before)
        late = f" ({newer} saved at or after {_utc(saved_before)})" if newer and saved_before is not None else ""
        return None, f"no checkpoint fits: wanted {wanted}; the job has steps {steps} (* = not good){late}"
    chosen = candidates[-1]
    return chosen, f"{wanted}: {chosen.describe()}"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1000):03d}Z"
