"""The training command protocol, version 1: file layout, messages and atomic file I/O (docs/training-protocol.md).

Shared by both sides: the training job (`remediate.training.client`) and remediate's
`training.*` actions. Standard library only: no torch, no server code.

Layout under the control root (one directory per job)::

    <root>/<job>/job.json            registration: pid, host, rank/world size, framework, last step and
                                     poll time, checkpoint index (written by the job, rank 0)
    <root>/<job>/job.lock            flock'd by the one live process that holds the job name
    <root>/<job>/inbox/<id>.json     commands (written by remediate)
    <root>/<job>/taken/<id>.json     a command the job has claimed (renamed out of the inbox)
    <root>/<job>/outbox/<id>.json    acknowledgements (written by the job)
    <root>/<job>/applied.log         ids of every command the job took, one per line (at most once)
    <root>/<job>/tmp/                temp files; every message is written there and renamed into place

Every JSON message is written to a temp file in ``tmp/``, flushed and renamed into
place, so a reader sees the whole file or nothing. Times are Unix epoch seconds
(floats) on the node's clock: the job and remediate's agent run on the same node.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
ENV_CONTROL_ROOT = "REMEDIATE_TRAINING_CONTROL_ROOT"
ENV_JOB = "REMEDIATE_TRAINING_JOB"
DEFAULT_CONTROL_ROOT = Path("/run/remediate/training")

REGISTRATION_FILE = "job.json"
LOCK_FILE = "job.lock"
"""flock'd by the live process that holds the job name, for its whole life (the kernel drops it when it dies)."""
APPLIED_FILE = "applied.log"
INBOX, OUTBOX, TAKEN, TMP = "inbox", "outbox", "taken", "tmp"
MAX_MESSAGE_BYTES = 1024 * 1024
"""Larger files in the control directories are refused unread."""

# Built-in command kinds.
ROLLBACK = "rollback"
SCALE_LR = "scale_lr"
CHECKPOINT = "checkpoint"
BUILTIN_KINDS = (ROLLBACK, SCALE_LR, CHECKPOINT)

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


def new_command_id() -> str:
    return secrets.token_hex(12)


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


def identity_from_env(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(pod, namespace) of this process as Kubernetes names it: $POD_NAME (downward API), else $HOSTNAME,
    else the host name (a pod's host name is its name); and $POD_NAMESPACE."""
    env = os.environ if env is None else env
    pod = env.get("POD_NAME") or env.get("HOSTNAME") or this_host()
    return pod, env.get("POD_NAMESPACE") or None


def _check_version(data: Mapping[str, Any], what: str) -> None:
    version = data.get("version")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"{what}: protocol version {version!r} is not supported (this side speaks {PROTOCOL_VERSION})"
        )


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
        return {
            "version": self.version,
            "id": self.id,
            "kind": self.kind,
            "params": self.params,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "issued_by": self.issued_by,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Command:
        if not isinstance(data, dict):
            raise ProtocolError("command: not a JSON object")
        _check_version(data, "command")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise ProtocolError("command: field 'params' must be an object")
        issued_by = data.get("issued_by") or {}
        if not isinstance(issued_by, dict):
            raise ProtocolError("command: field 'issued_by' must be an object")
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
        return {
            "version": self.version,
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "detail": self.detail,
            "received_at": self.received_at,
            "acked_at": self.acked_at,
            "step_before": self.step_before,
            "step_after": self.step_after,
            "result": self.result,
            "job": self.job,
            "pid": self.pid,
            "host": self.host,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Ack:
        if not isinstance(data, dict):
            raise ProtocolError("acknowledgement: not a JSON object")
        _check_version(data, "acknowledgement")
        status = data.get("status")
        if status not in ACK_STATUSES:
            raise ProtocolError(f"acknowledgement: status {status!r} is not one of {', '.join(ACK_STATUSES)}")
        result = data.get("result") or {}
        job = data.get("job") or {}
        if not isinstance(result, dict) or not isinstance(job, dict):
            raise ProtocolError("acknowledgement: fields 'result' and 'job' must be objects")
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
        data: dict[str, Any] = {
            "step": self.step,
            "loss": finite_or_text(self.loss),
            "good": self.good,
            "path": self.path,
            "saved_at": self.saved_at,
        }
        if self.run is not None:
            data["run"] = self.run
        return data

    @classmethod
    def from_dict(cls, data: Any) -> CheckpointInfo:
        if not isinstance(data, dict):
            raise ProtocolError("checkpoint: not a JSON object")
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
    version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "job": self.job,
            "pod": self.pod,
            "namespace": self.namespace,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "host": self.host,
            "rank": self.rank,
            "world_size": self.world_size,
            "framework": self.framework,
            "started_at": self.started_at,
            "last_step": self.last_step,
            "last_poll_at": self.last_poll_at,
            "heartbeat_s": self.heartbeat_s,
            "wake_signal": self.wake_signal,
            "kinds": list(self.kinds),
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "lr": [finite_or_text(v) for v in self.lr],
            "closed_at": self.closed_at,
            "commands": self.commands,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Registration:
        if not isinstance(data, dict):
            raise ProtocolError("registration: not a JSON object")
        _check_version(data, "registration")
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
        )


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


# ---------------------------------------------------------------------------------------------- files


def atomic_write_json(path: Path, data: Mapping[str, Any], *, tmp_dir: Path | None = None, fsync: bool = True) -> None:
    """Write `data` as JSON to a temp file in `tmp_dir` (default: next to `path`) and rename it to `path`.

    The temp file is created exclusively and without following symlinks; `tmp_dir` must be on the
    same filesystem as `path`. Readers see the old file, the new one, or none — never half a file.
    """
    text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":")).encode() + b"\n"
    directory = tmp_dir if tmp_dir is not None else path.parent
    tmp = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        try:
            view = memoryview(text)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path, *, limit: int = MAX_MESSAGE_BYTES, dir_fd: int | None = None) -> Any:
    """Parse a JSON file without following a symlink, refusing anything but a regular file up to `limit` bytes.

    With `dir_fd`, `path` is a name in that open directory (openat). Raises FileNotFoundError when
    it is not there, ProtocolError when it is not acceptable.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ProtocolError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProtocolError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise ProtocolError(f"{path}: {info.st_size} bytes, more than the {limit} allowed")
        chunks = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(65536, remaining))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > limit:
        raise ProtocolError(f"{path}: more than the {limit} bytes allowed")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{path}: not valid JSON ({exc})") from exc


@dataclass(frozen=True)
class JobPaths:
    """The files of one job under a control root."""

    root: Path
    job: str

    def __post_init__(self) -> None:
        check_job_name(self.job)

    @property
    def dir(self) -> Path:
        return self.root / self.job

    @property
    def registration(self) -> Path:
        return self.dir / REGISTRATION_FILE

    @property
    def lock(self) -> Path:
        return self.dir / LOCK_FILE

    @property
    def applied(self) -> Path:
        return self.dir / APPLIED_FILE

    @property
    def inbox(self) -> Path:
        return self.dir / INBOX

    @property
    def outbox(self) -> Path:
        return self.dir / OUTBOX

    @property
    def taken(self) -> Path:
        return self.dir / TAKEN

    @property
    def tmp(self) -> Path:
        return self.dir / TMP

    def command(self, command_id: str) -> Path:
        return self.inbox / f"{check_command_id(command_id)}.json"

    def taken_command(self, command_id: str) -> Path:
        return self.taken / f"{check_command_id(command_id)}.json"

    def ack(self, command_id: str) -> Path:
        return self.outbox / f"{check_command_id(command_id)}.json"

    def create(self) -> None:
        """Make the job's directories (the job does this when it registers)."""
        for path in (self.dir, self.inbox, self.outbox, self.taken, self.tmp):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)

    def check_safe(self) -> None:
        """Refuse a job directory that is not a plain directory tree under the root (no symlinks anywhere).

        remediate's agent may run as root while jobs own their directories: a symlinked inbox
        must never make it write somewhere else.
        """
        for path in (self.dir, self.inbox, self.outbox, self.tmp):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                raise ProtocolError(
                    f"{path} does not exist: the job has not registered (or not with this version)"
                ) from None
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise ProtocolError(f"{path} is not a plain directory (symlinks are refused)")

    def read_registration(self) -> Registration:
        return Registration.from_dict(read_json(self.registration))

    def read_ack(self, command_id: str) -> Ack | None:
        try:
            return Ack.from_dict(read_json(self.ack(command_id)))
        except FileNotFoundError:
            return None


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class JobDir:
    """A job's control directory as remediate's agent uses it: through directory file descriptors.

    The agent may run as root while the job owns its directory: a job (or anyone with its uid)
    can swap ``inbox`` for a symlink between a check and a write. So the job directory is opened
    relative to the root with O_DIRECTORY|O_NOFOLLOW, its subdirectories relative to it the same
    way, and every file is written, renamed, read and unlinked relative to those descriptors
    (openat, renameat, unlinkat, fstatat without following): whatever is swapped in later, the
    agent only ever touches the directories it opened, all under the root. The root itself is a
    setting, not job-controlled, and is opened as configured.
    """

    SUBDIRS = (INBOX, OUTBOX, TAKEN, TMP)

    def __init__(self, paths: JobPaths) -> None:
        self.paths = paths
        self._fds: dict[str, int] = {}
        try:
            root_fd = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                self._fds["."] = self._open(root_fd, paths.job, paths.dir)
            finally:
                os.close(root_fd)
            for name in self.SUBDIRS:
                self._fds[name] = self._open(self._fds["."], name, paths.dir / name)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _open(parent: int, name: str, shown: Path) -> int:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise ProtocolError(
                f"{shown} does not exist: the job has not registered (or not with this version)"
            ) from None
        except OSError as exc:
            # ELOOP (a symlink) or ENOTDIR: never followed.
            raise ProtocolError(f"{shown} is not a plain directory (symlinks are refused): {exc.strerror}") from None

    def __enter__(self) -> JobDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def read_registration(self) -> Registration:
        return Registration.from_dict(read_json(Path(REGISTRATION_FILE), dir_fd=self._fds["."]))

    def registration_owner(self) -> int | None:
        try:
            return os.stat(REGISTRATION_FILE, dir_fd=self._fds["."], follow_symlinks=False).st_uid
        except OSError:
            return None

    def write_command(self, command: Command) -> None:
        """Write the command to tmp/ and rename it into inbox/, both through the opened descriptors."""
        name = f"{check_command_id(command.id)}.json"
        text = json.dumps(command.to_dict(), sort_keys=True, allow_nan=False, separators=(",", ":")).encode() + b"\n"
        tmp_name = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp_fd = self._fds[TMP]
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp_name, flags, 0o644, dir_fd=tmp_fd)
        try:
            try:
                view = memoryview(text)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp_name, name, src_dir_fd=tmp_fd, dst_dir_fd=self._fds[INBOX])
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=tmp_fd)
            raise

    def withdraw(self, command_id: str) -> bool:
        """Unlink the command from the inbox; False when it is no longer there (the job claimed it)."""
        try:
            os.unlink(f"{check_command_id(command_id)}.json", dir_fd=self._fds[INBOX])
        except FileNotFoundError:
            return False
        return True

    def is_taken(self, command_id: str) -> bool:
        try:
            os.stat(f"{check_command_id(command_id)}.json", dir_fd=self._fds[TAKEN], follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def read_ack(self, command_id: str) -> Ack | None:
        try:
            data = read_json(Path(f"{check_command_id(command_id)}.json"), dir_fd=self._fds[OUTBOX])
        except FileNotFoundError:
            return None
        return Ack.from_dict(data)


def pid_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None where unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def process_cgroup(pid: int) -> str | None:
    """The cgroup lines of a process (/proc/<pid>/cgroup, as the reader's cgroup namespace shows them), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return text.strip()[:4096] or None


def pod_uid_of(cgroup: str | None) -> str | None:
    """The Kubernetes pod UID in a cgroup path (kubelet's ``kubepods...pod<uid>...``), or None outside a pod.

    Read by the agent from /proc (host cgroup namespace), it is the kernel's word, not the job's.
    """
    found = _POD_UID.search(cgroup or "")
    return found.group(1).replace("_", "-") if found else None


def pid_uid(pid: int) -> int | None:
    """The real uid of a process (from /proc/<pid>/status), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def this_host() -> str:
    return socket.gethostname()


def describe_lrs(values: Sequence[float]) -> str:
    unique = sorted(set(values))
    if not unique:
        return "?"
    return f"{unique[0]:.3g}" if len(unique) == 1 else ", ".join(f"{v:.3g}" for v in values)
