"""disk.cleanup on 100,000 small files: how long the scan + plan and the cleanup itself take.

    .venv/bin/python bench/disk_cleanup.py                 # 100,000 files in 100 directories under /tmp
    .venv/bin/python bench/disk_cleanup.py --files 10000   # quicker
    .venv/bin/python bench/disk_cleanup.py --dir /data/bench   # on another filesystem

Builds the tree (files of 64 bytes, all a week old, so every one is a candidate), then times
`Cleaner.plan` (walk by directory fds + lstat of every entry + selection + the plan report) and
`Cleaner.execute` (walk again, then per file: reopen-check of its directory, fstatat, unlinkat and a
statvfs for the target) with an unreachable target, so it deletes everything. Also times the JSON
encoding of the result, which the store records. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from remediate.disk import Cleaner, Target
from remediate.disk.policy import parse_policy

WEEK = 7 * 86400


def build(root: Path, files: int, dirs: int) -> float:
    started = time.perf_counter()
    when = time.time() - WEEK
    per_dir = -(-files // dirs)
    made = 0
    for d in range(dirs):
        directory = root / f"job-{d:04d}"
        directory.mkdir(parents=True)
        for f in range(min(per_dir, files - made)):
            path = directory / f"shard-{f:05d}.tmp"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"x" * 64)
            os.utime(fd, (when, when))
            os.close(fd)
            made += 1
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the tree (default: a temp dir)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="remediate-bench-disk-", dir=args.dir))
    root = base / "scratch"
    try:
        built = build(root, args.files, args.dirs)
        policy = parse_policy(
            {
                "name": "bench",
                "mountpoint": "/bench",
                "roots": [str(root)],
                "patterns": ["*.tmp"],
                "min_age": "1d",
                "max_files": None,
            }
        )
        cleaner = Cleaner(policy)
        target = Target(free_bytes=2**62)

        started = time.perf_counter()
        plan = cleaner.plan(target)
        plan_s = time.perf_counter() - started
        assert plan["would_delete_files"] == args.files, plan["summary"]

        started = time.perf_counter()
        result = cleaner.execute(target)
        cleanup_s = time.perf_counter() - started
        assert result["deleted_files"] == args.files, result["summary"]
        left = sum(len(files) for _, _, files in os.walk(root))

        started = time.perf_counter()
        encoded = json.dumps(result)
        json_s = time.perf_counter() - started
    finally:
        shutil.rmtree(base, ignore_errors=True)

    fs = os.statvfs(base.parent)
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    print(
        f"tree: {args.files:,} files of 64 bytes in {args.dirs} directories under {base.parent} "
        f"(block size {fs.f_frsize}); built in {built:.2f} s"
    )
    print(f"scan + plan:   {plan_s:6.2f} s  ({args.files / plan_s:,.0f} files/s)")
    print(f"cleanup:       {cleanup_s:6.2f} s  ({args.files / cleanup_s:,.0f} files/s; scan included)")
    print(f"result JSON:   {json_s:6.2f} s  ({len(encoded) / 2**20:.1f} MiB recorded in the step's result)")
    print(
        f"files left: {left}; bytes freed (st_blocks): {result['bytes_freed']:,}; "
        f"free change measured: {result['free_change_bytes']:,}"
    )
    print(
        f"BENCH disk_cleanup files={args.files} scan_plan_s={plan_s:.3f} cleanup_s={cleanup_s:.3f} json_s={json_s:.3f}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
