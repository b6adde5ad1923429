"""The job's ``job.json`` and the name it holds: who the job is, rewritten at each heartbeat (rank 0).

The name is held for the process's life by an flock on ``job.lock``, kept open until `release_name`:
the kernel drops the lock when the process dies, so a crashed job's name is free again at once and its
stale job.json is simply overwritten; there is no window between checking and taking.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from remediate.training.controldirs import age_out, remove_if_idle
from remediate.training.files import JobPaths, atomic_write_json
from remediate.training.handle import JobHandle
from remediate.training.handlers import current_lrs
from remediate.training.procfs import identity_from_env, pid_start_time, this_host
from remediate.training.protocol import PROTOCOL_VERSION, CheckpointInfo, ProtocolError, Registration
from remediate.training.wakeup import WakeUp

log = logging.getLogger("remediate.training")


class JobNameInUse(RuntimeError):
    """Another live process holds this job name on this control root: its commands would go to either job."""


class JobFile:
    """One job's job.json and job.lock: what `control` (its job, ranks, commands, optimizers) and `wake` say now."""

    def __init__(self, control: JobHandle, wake: WakeUp) -> None:
        self.control = control
        self.wake = wake
        self.paths: JobPaths = control.paths
        self.started_at = time.time()
        self.next_heartbeat = 0.0
        self.live = False
        """Between the job's registration and its close (rank 0): job.json is kept up to date."""
        self.pod, self.namespace = identity_from_env()  # checked against Prometheus' target labels (expect_pod)
        self.checkpoints: list[CheckpointInfo] = []
        """The checkpoint index job.json publishes (remediate's dry-run picks a rollback's checkpoint from it)."""
        self._lock_fd: int | None = None

    def open(self) -> None:
        """Create the job's directories, take its name, install the wake-up signal and write job.json (rank 0);
        remove the control directories other jobs left idle (`controldirs.age_out`)."""
        self.paths.create()
        self.take_name()
        self.wake.install()
        store = self.control.checkpoints
        if store is not None and not self.checkpoints:
            with contextlib.suppress(Exception):
                self.checkpoints = list(store.list())
        self.write(fsync=True)
        self.live = True
        age_out(self.paths.root, self.paths.job)

    def close(self) -> None:
        """Mark job.json closed (nobody should wait for this job), remove the control directory when nothing is
        outstanding (`controldirs.remove_if_idle`, while the name is still held) and give up the name."""
        self.live = False
        with contextlib.suppress(OSError):
            self.write(fsync=True, closed=True)
        remove_if_idle(self.paths)
        self.release_name()

    def take_name(self) -> None:
        """Hold the job name (`JobNameInUse` when another live process holds it)."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.paths.lock, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise JobNameInUse(self._holder_message("holds the lock on " + str(self.paths.lock))) from None
        try:
            self._refuse_live_unlocked_holder()
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def release_name(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _refuse_live_unlocked_holder(self) -> None:
        """A job.json of a live process on this host that holds no lock (a job on an older library)."""
        try:
            holder = self.paths.read_registration()
        except (FileNotFoundError, ProtocolError):
            return
        if holder.pid == os.getpid() or holder.closed_at is not None or holder.host != this_host():
            return
        start = pid_start_time(holder.pid)
        if start is None or holder.pid_start is None or start != holder.pid_start:
            return  # gone, or the pid now belongs to another process: a stale registration, taken over
        raise JobNameInUse(self._holder_message("is registered and still running", holder))

    def _holder_message(self, how: str, holder: Registration | None = None) -> str:
        if holder is None:
            with contextlib.suppress(FileNotFoundError, ProtocolError):
                holder = self.paths.read_registration()
        who = "another process" if holder is None else f"process {holder.pid} on host {holder.host or '?'}"
        return (
            f"job name {self.paths.job!r} is already taken on control root {self.paths.root}: {who} {how}. "
            "Two live jobs with one name would each get the other's commands: give this job another name "
            "(TrainingControl(job=...) / $REMEDIATE_TRAINING_JOB), or stop the other one first"
        )

    def identity(self) -> dict[str, Any]:
        """Who answers a command (an acknowledgement's `job`)."""
        control = self.control
        return {
            "job": control.job,
            "pid": os.getpid(),
            "host": this_host(),
            "rank": control.rank,
            "world_size": control.world_size,
            "framework": control.framework,
        }

    def write(self, *, fsync: bool = False, closed: bool = False) -> None:
        control, now = self.control, time.time()
        lrs: list[float] = []
        with contextlib.suppress(Exception):
            lrs = current_lrs(control.optimizers)
        commands = control.commands
        registration = Registration(
            job=control.job,
            pid=os.getpid(),
            pid_start=pid_start_time(os.getpid()),
            host=this_host(),
            rank=control.rank,
            world_size=control.world_size,
            framework=control.framework,
            started_at=self.started_at,
            last_step=control.last_step,
            last_poll_at=now if control.last_step is not None else None,
            heartbeat_s=control.heartbeat_interval,
            wake_signal=None if closed else self.wake.name,
            kinds=tuple(commands),
            commands=commands,
            refused=control.refused,
            checkpoints=tuple(self.checkpoints),
            lr=tuple(lrs),
            closed_at=now if closed else None,
            pod=self.pod,
            namespace=self.namespace,
            version=PROTOCOL_VERSION,
        )
        atomic_write_json(self.paths.registration, registration.to_dict(), tmp_dir=self.paths.tmp, fsync=fsync)

    def rewrite(self) -> None:
        """Write job.json again (a new checkpoint, a new command) while the job runs; a failure is logged."""
        if not self.live:
            return
        try:
            self.write()
        except OSError as exc:
            log.warning("remediate: cannot update %s: %s", self.paths.registration, exc)

    def heartbeat_due(self) -> bool:
        return time.monotonic() >= self.next_heartbeat

    def heartbeat(self) -> None:
        """Rewrite job.json (last step, poll time, lr), and again in `heartbeat_interval` seconds."""
        self.next_heartbeat = time.monotonic() + self.control.heartbeat_interval
        self.rewrite()

    def on_checkpoints(self, checkpoints: Iterable[CheckpointInfo]) -> None:
        self.checkpoints = list(checkpoints)
        self.rewrite()
