"""scripts/serve run for real, in a copy of the repository's tree whose .venv runs this checkout's remediate
(nothing is installed): what a user gets from `scripts/serve` on a laptop, files it writes included."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import STOP_GRACE

ROOT = Path(__file__).resolve().parents[2]


def serve_tree(tree: Path) -> Path:
    """A tree with scripts/, pyproject.toml and constraints.txt whose .venv is this interpreter (ensure_venv:
    nothing to do)."""
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    shutil.copy(ROOT / "constraints.txt", tree / "constraints.txt")
    return with_venv(tree)


def with_venv(tree: Path) -> Path:
    """`tree` (holding pyproject.toml and constraints.txt) given a .venv whose python is this interpreter and whose
    install marker matches them, so scripts/lib.sh's ensure_venv installs nothing."""
    bin_dir = tree / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    launcher = bin_dir / "remediate"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m remediate "$@"\n')
    launcher.chmod(0o755)
    both = (tree / "pyproject.toml").read_bytes() + (tree / "constraints.txt").read_bytes()
    digest = subprocess.run(["sha256sum"], input=both, capture_output=True, check=True).stdout.decode().split()[0]
    (tree / ".venv" / ".remediate-installed").write_text(f"{digest} extras= \n")
    return tree


@dataclass
class ServeScript:
    """A running `scripts/serve` (its own process group) and its log."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=STOP_GRACE)


def start_serve_script(tree: Path, log_path: Path, *args: str) -> ServeScript:
    """`scripts/serve ARGS` in `tree`, without any REMEDIATE_* variable of the test's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["scripts/serve", *args],
            cwd=tree,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ServeScript(process, log_path)
