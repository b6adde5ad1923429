"""Safe disk cleanup: policies (pure), selection and stop rules (pure), the fd-based walker and deleter.

    policy.py     CleanupPolicy, PolicySet, load_policies (YAML), parse_size
    patterns.py   globs relative to a root ('*.tmp', '**/cache/*')
    selection.py  FileInfo -> ordered deletions/truncations; run_budget (target, caps, deadline)
    fs.py         open roots without following links, walk by directory fds, delete/truncate safely
    cleanup.py    Cleaner(policy).plan(target) / .execute(target)
    source.py     PolicySource: the node's policies file, loaded lazily

See docs/disk-cleanup.md.

May import: remediate.errors and config's durations; nothing above it (pyproject.toml's `backends`
contract); policy, patterns and selection import not even os (`disk-policy`).
"""

from __future__ import annotations

from remediate.disk.cleanup import Cleaner, CleanupError, Target
from remediate.disk.fs import DiskSpace, FsHooks, statvfs_space
from remediate.disk.policy import CleanupPolicy, PolicyError, PolicySet, load_policies, parse_size
from remediate.disk.source import NoPoliciesConfigured, PolicySource

__all__ = [
    "Cleaner",
    "CleanupError",
    "CleanupPolicy",
    "DiskSpace",
    "FsHooks",
    "NoPoliciesConfigured",
    "PolicyError",
    "PolicySet",
    "PolicySource",
    "Target",
    "load_policies",
    "parse_size",
    "statvfs_space",
]
