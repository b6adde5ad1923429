"""`torchrun --nproc_per_node 2 --standalone` of tests/support/jobs/torchrun_job.py (gloo, CPU) and its records.

Used by tests/integration/test_torchrun.py (the `restart` command) and tests/e2e/test_straggler.py
(the fail-slow ladder end to end).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.processes import log_tail
from tests.support.waiting import scaled, wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "jobs" / "torchrun_job.py"


class Torchrun:
    """One `python -m torch.distributed.run --nproc_per_node 2 --standalone torchrun_job.py ...` and its output."""

    def __init__(
        self, workdir: Path, root: Path, name: str, *args: str, max_restarts: int = 0, job: str = "tr-job"
    ) -> None:
        self.out = workdir / name
        self.out.mkdir()
        self.log = self.out / "torchrun.log"
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                   "--max-restarts", str(max_restarts),
                   str(SCRIPT), "--root", str(root), "--job", job, "--checkpoints", str(self.out / "ckpt"),
                   "--out", str(self.out), *args]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1",
            # A restarted group may otherwise read the previous round's addresses from the rendezvous store
            # torchrun shares with init_process_group (pytorch/pytorch#135712, #167288; docs/training-protocol.md).
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
        self._log = self.log.open("wb")
        # Its own session: the teardown can end the launcher and both ranks together, and nothing else.
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )

    def events(self, rank: int, name: str) -> list[dict[str, Any]]:
        path = self.out / f"rank{rank}.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [e for e in (json.loads(line) for line in lines if line.endswith("}")) if e["event"] == name]

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log, n)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, rank: int, name: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        def found() -> list[dict[str, Any]] | None:
            events = self.events(rank, name)
            if len(events) >= count:
                return events
            if self.proc.poll() is not None:
                raise AssertionError(f"torchrun exited ({self.proc.returncode}) before rank {rank}'s {name!r}:\n"
                                     f"{self.text()[-3000:]}")  # fmt: skip
            return None

        return wait_until(found, timeout, interval=0.05, message=f"rank {rank} never recorded {count} {name!r}")

    def finish(self, timeout: float = 30.0) -> None:
        try:
            code = self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"torchrun did not finish within {scaled(timeout):g} s:\n{self.text()[-3000:]}"
            ) from None
        assert code == 0, f"torchrun exited {code}:\n{self.text()[-3000:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # torchrun passes it on to its workers
            try:
                self.proc.wait(scaled(10))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(scaled(10))
        self._log.close()
