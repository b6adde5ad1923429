"""How the protocol's messages lie on disk: one directory per job, atomic JSON files (docs/training-protocol.md).

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
place, so a reader sees the whole file or nothing.

`JobPaths` names the files (the job's side); `JobDir` reaches them through directory descriptors
(remediate's agent, which may be root while the job owns its directory). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediate.training.protocol import Ack, Command, ProtocolError, Registration, check_command_id, check_job_name

REGISTRATION_FILE = "job.json"
LOCK_FILE = "job.lock"
"""flock'd by the live process that holds the job name, for its whole life (the kernel drops it when it dies)."""
APPLIED_FILE = "applied.log"
INBOX, OUTBOX, TAKEN, TMP = "inbox", "outbox", "taken", "tmp"
MAX_MESSAGE_BYTES = 1024 * 1024
"""Larger files in the control directories are refused unread."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def atomic_write_json(path: Path, data: Mapping[str, Any], *, tmp_dir: Path | None = None, fsync: bool = True) -> None:
    """Write `data` as JSON to a temp file in `tmp_dir` (default: next to `path`) and rename it to `path`.

    The temp file is created exclusively and without following symlinks; `tmp_dir` must be on the
    same filesystem as `path`. Readers see the old file, the new one, or none — never half a file.
    """
    directory = tmp_dir if tmp_dir is not None else path.parent
    _write_and_rename(data, directory / _tmp_name(path.name), path, fsync=fsync)


def _tmp_name(name: str) -> str:
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _write_and_rename(
    data: Mapping[str, Any],
    tmp: str | Path,
    final: str | Path,
    *,
    fsync: bool = True,
    tmp_dir_fd: int | None = None,
    dir_fd: int | None = None,
) -> None:
    """Write `data` as JSON into a new file `tmp` and rename it to `final` (names in the directories `tmp_dir_fd`
    and `dir_fd` when given, openat/renameat); the temp file is removed if anything fails."""
    text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":")).encode() + b"\n"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW
    fd = os.open(tmp, flags, 0o644, dir_fd=tmp_dir_fd)
    try:
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final, src_dir_fd=tmp_dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=tmp_dir_fd)
        raise


def read_json(path: Path, *, limit: int = MAX_MESSAGE_BYTES, dir_fd: int | None = None) -> Any:
    """Parse a JSON file without following a symlink, refusing anything but a regular file up to `limit` bytes.

    With `dir_fd`, `path` is a name in that open directory (openat). Raises FileNotFoundError when
    it is not there, ProtocolError when it is not acceptable.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | _NO_FOLLOW
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


class _InJobDir:
    """A file or directory of the job's control directory, by name (`JobPaths.inbox`, ...)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, paths: JobPaths, owner: type | None = None) -> Path:
        return paths.dir / self.name


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

    registration = _InJobDir(REGISTRATION_FILE)
    lock = _InJobDir(LOCK_FILE)
    applied = _InJobDir(APPLIED_FILE)
    inbox = _InJobDir(INBOX)
    outbox = _InJobDir(OUTBOX)
    taken = _InJobDir(TAKEN)
    tmp = _InJobDir(TMP)

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

    def read_registration(self) -> Registration:
        return Registration.from_dict(read_json(self.registration))

    def read_ack(self, command_id: str) -> Ack | None:
        try:
            return Ack.from_dict(read_json(self.ack(command_id)))
        except FileNotFoundError:
            return None


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
        _write_and_rename(command.to_dict(), _tmp_name(name), name, tmp_dir_fd=self._fds[TMP], dir_fd=self._fds[INBOX])

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
