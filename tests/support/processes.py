"""Real processes the tests start and read: a job script's EVENT lines, and from /proc a process's children."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tests.support.waiting import scaled, wait_until

REPO = Path(__file__).resolve().parents[2]
PLAIN_JOB = REPO / "tests" / "support" / "jobs" / "plain_job.py"
REMEDIATE = Path(sys.executable).with_name("remediate")
"""The `remediate` command a user runs: the console script pip installed beside this interpreter (the venv's)."""


def run_remediate(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`remediate ARGS` as an operator runs it: the installed command, none of the caller's REMEDIATE_* variables,
    `env` added; its output captured as text."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    command = [str(REMEDIATE), *args]
    environment.update(env or {})
    return subprocess.run(command, capture_output=True, text=True, env=environment, cwd=cwd, timeout=scaled(timeout),
                          check=False)  # fmt: skip


def log_tail(path: Path, n: int = 40) -> str:
    """The last `n` lines of a process's log, for a failing test's message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log yet)"


class JobProcess:
    """A job script of tests/support/jobs/ run as a real process (remediate importable), its output in `log`.
    The job prints `EVENT {json}` lines for what it did: those are what the tests read."""

    def __init__(self, log: Path, *command: str, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._out = log.open("wb")
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        environment = {**os.environ, "PYTHONPATH": path, **(env or {})}
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, cwd=REPO, env=environment)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log, n)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        lines = self.text().splitlines()
        found = [json.loads(line[len("EVENT ") :]) for line in lines if line.startswith("EVENT ")]
        return [e for e in found if name is None or e["event"] == name]

    def wait_for(self, name: str, timeout: float = 10.0, count: int = 1) -> list[dict[str, Any]]:
        """The job's `name` events once it printed `count` of them; fails with its output if it exits first."""
        wait_until(lambda: len(self.events(name)) >= count or self.proc.poll() is not None, timeout, interval=0.02)
        found = self.events(name)
        assert len(found) >= count, f"no {name!r} event (exit code {self.proc.poll()}):\n{self.text()[-3000:]}"
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(scaled(10))
        self._out.close()


class PlainJob(JobProcess):
    """One tests/support/jobs/plain_job.py process (the quick-start loop) and its output; its checkpoints under
    <workdir>/ckpt-<name>, shared by its restarts."""

    def __init__(self, workdir: Path, root: Path, name: str, *args: str) -> None:
        super().__init__(workdir / f"{name}-{time.monotonic_ns()}.log", sys.executable, str(PLAIN_JOB), "--root",
                         str(root), "--job", name, "--checkpoints", str(workdir / f"ckpt-{name}"), *args)  # fmt: skip


class _Stoppable(Protocol):
    def stop(self) -> None: ...


J = TypeVar("J", bound=_Stoppable)


def job_starter(kind: Callable[..., J], workdir: Path, root: Path) -> Iterator[Callable[..., J]]:
    """For a fixture to `yield from`: start(name, *args, **options) -> kind(workdir, root, name, *args, **options);
    every job it started is stopped at the test's end."""
    started: list[J] = []

    def start(name: str, *args: str, **options: Any) -> J:
        started.append(kind(workdir, root, name, *args, **options))
        return started[-1]

    yield start
    for job in started:
        job.stop()


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is `pid` now (any of its threads may have forked them)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found
