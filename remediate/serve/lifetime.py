"""What belongs to the lifetime of `remediate serve`'s master, not to each process forked from it.

gunicorn forks each HTTP worker from inside the master's call stack (`Arbiter.run` -> `spawn_worker`), and the
worker ends with `sys.exit`: unless stopped, its SystemExit unwinds through every `finally:` and context manager
the master had open when it forked, and then runs the master's `atexit` handlers. A reload, a worker SIGTERMed,
timed out or crashed then ran the master's clean-up in the worker: it removed the master's private directory
(the executor's heartbeat, its wake socket) and the Prometheus multiprocess directory, and every request
answered 500 from then on. So:

- `owned_tempdir`: a temporary directory removed only by the process that made it;
- `ChildExitsHere` (mixed into the master's arbiter): a forked HTTP worker's exit goes no further than gunicorn's
  own clean-up of the worker; it ends there with `os._exit`, as the executor process does;
- `die_with_parent`: the kernel signals a child when its master dies (even by SIGKILL), so no orphaned worker
  keeps the listening socket open answering nothing, and the executor process stops at once.

No remediate import: the master loads this, gunicorn and the beat only.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("remediate.serve")

_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when the thread that forked it ends (linux/prctl.h)."""


@contextlib.contextmanager
def owned_tempdir(prefix: str) -> Iterator[Path]:
    """A new private (0700) temporary directory, removed on exit only by the process that made it: a child
    forked inside the block that unwinds through it leaves it to its maker."""
    owner = os.getpid()
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)


def exit_code(exc: SystemExit) -> int:
    """The status `sys.exit(code)` asks for, as the interpreter would exit with it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    return 1


def end_child(status: int) -> None:
    """End a forked child now: its logs flushed, none of the master's `finally:` or `atexit` run."""
    try:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(status)


class ChildExitsHere:
    """Mixed into gunicorn's Arbiter (before it): an HTTP worker forked by `spawn_worker` ends in it, once
    gunicorn's own `finally:` of the worker ran, never unwinding into the master's stack."""

    def spawn_worker(self) -> int:
        master = os.getpid()
        try:
            return int(super().spawn_worker())  # type: ignore[misc]  # gunicorn's Arbiter, after this in the MRO
        except SystemExit as exc:
            if os.getpid() == master:  # the master's own exit (gunicorn halting): its clean-up runs
                raise
            end_child(exit_code(exc))
            raise  # not reached: end_child does not return


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this (just forked) process when its parent dies, however it dies
    (kill -9 included). Linux only (prctl(2)); elsewhere the child's own look at getppid() remains."""
    libc_name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or libc_name is None:
        return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        return
    if os.getppid() != parent:  # the parent died before the prctl: nobody will signal us
        os.kill(os.getpid(), sig)


def worker_dies_with_master(server: Any, _worker: Any) -> None:
    """gunicorn's `post_fork` hook (in the new HTTP worker): SIGKILL when the master that forked it dies.

    gunicorn's worker notices a dead master only at its loop's next look at getppid(), and then stops
    gracefully: it stops accepting but keeps the listening socket open until its connections finish (up to
    `graceful_timeout`), so the kernel goes on queueing connections that nobody answers (AlertManager waits out
    its timeout) and the port stays taken. Not SIGTERM for the same reason. A master killed is a crash: a
    request cut short is re-sent by AlertManager, and what was stored is found again (deduplicated)."""
    die_with_parent(server.pid, signal.SIGKILL)
