"""Fixtures for the disk cleanup tests: real directory trees in tmp_path, and a disk whose free space they control.

A test cannot fill a real disk, so the free-space target is made reachable through the
cleanup's injectable free-space function: `FakeDisk` reports a filesystem of `capacity` bytes
whose used space is what the files under the tree occupy right now (st_blocks, measured on
every call), so deleting a file really raises the free space the cleanup sees, by exactly
what the file occupied.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from remediate.disk import DiskSpace
from remediate.disk.policy import CleanupPolicy, parse_policy

DAY = 86400.0


def make_file(path: Path, size: int = 1000, *, age_days: float = 30.0, data: bytes | None = None) -> Path:
    """Write a file of `size` bytes (or `data`) last modified `age_days` ago; parents are created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if data is not None else b"x" * size)
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


def allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


@dataclass
class FakeDisk:
    """Free space = capacity - space the regular files under `root` occupy now (walked on every call)."""

    root: Path
    capacity: int
    calls: int = 0

    def used(self) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                st = os.lstat(os.path.join(dirpath, name))
                if not os.path.islink(os.path.join(dirpath, name)):
                    total += st.st_blocks * 512
        return total

    def __call__(self, fd: int) -> DiskSpace:
        self.calls += 1
        return DiskSpace(free=self.capacity - self.used(), total=self.capacity)

    @property
    def free(self) -> int:
        return self.capacity - self.used()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A precious file outside the policy root; every safety test checks it survives."""
    return make_file(tmp_path / "precious" / "model.ckpt", 4096, age_days=365)


@pytest.fixture
def disk(root: Path) -> FakeDisk:
    return FakeDisk(root, capacity=10 * 1024 * 1024)


@pytest.fixture
def make_policy(root: Path) -> Callable[..., CleanupPolicy]:
    """make_policy(**fields): a policy over `root` (patterns ['*'], min_age 1d, no caps) with fields overridden."""

    def build(**fields: Any) -> CleanupPolicy:
        raw: dict[str, Any] = {
            "name": "test",
            "mountpoint": "/test",
            "roots": [str(root)],
            "patterns": ["*"],
            "min_age": "1d",
            "max_files": None,
        }
        raw.update(fields)
        return parse_policy(raw, source="test")

    return build


@pytest.fixture
def tmpfs_inside(root: Path) -> Iterator[Path | None]:
    """A tmpfs mounted at root/mnt when this process may mount (root in a sandbox that allows it), else None."""
    mnt = root / "mnt"
    mnt.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        yield None
        return
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
