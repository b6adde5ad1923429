"""One cleanup of one policy: scan the roots, select, then plan (change nothing) or execute.

`Cleaner(policy).plan(target)` says which files would go, in order, how many bytes that frees,
the free space predicted after, and which cap or target stops it. `execute` does it and records
every file deleted (path, size), truncated or skipped (with the reason), the bytes freed, and the
free space before and after as statvfs measures it. Free space is read through an injectable
function (default: os.statvfs on the root's fd), so tests can give a reachable target.
"""

from __future__ import annotations

import errno
import math
import os
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from typing import Any

from remediate.disk.fs import (
    DiskSpace,
    FreeSpace,
    FsHooks,
    RootError,
    SafeDirs,
    ScanResult,
    delete,
    display,
    exclusive,
    open_root,
    scan_root,
    statvfs_space,
    truncate,
)
from remediate.disk.policy import CleanupPolicy, format_size
from remediate.disk.selection import (
    STOP_REASONS,
    BudgetResult,
    Done,
    Item,
    Limits,
    Selection,
    run_budget,
    select,
)
from remediate.errors import ActionError, RetryableActionError


class CleanupError(ActionError):
    """A cleanup cannot run (a root that is a symlink, roots on different filesystems, ...)."""


class CleanupBusy(RetryableActionError):
    """Another cleanup of the same policy is running."""


@dataclass(frozen=True)
class Target:
    """Free space wanted: a percentage of the filesystem's size, or bytes. Exactly one (disk.cleanup's
    validate checks the step's params)."""

    free_percent: float | None = None
    free_bytes: int | None = None

    def bytes_for(self, space: DiskSpace) -> int:
        if self.free_bytes is not None:
            return self.free_bytes
        assert self.free_percent is not None
        return math.ceil(space.total * self.free_percent / 100)

    def to_dict(self) -> dict[str, Any]:
        return {"free_percent": self.free_percent} if self.free_percent is not None else {"free_bytes": self.free_bytes}


def effective_caps(
    policy: CleanupPolicy, max_files: int | None = None, max_bytes: int | None = None
) -> tuple[int | None, int | None, list[str]]:
    """The step's caps may only lower the policy's: (max_files, max_bytes, notes)."""
    notes: list[str] = []

    def lower(name: str, policy_cap: int | None, step_cap: int | None) -> int | None:
        if step_cap is None:
            return policy_cap
        if policy_cap is not None and step_cap > policy_cap:
            notes.append(f"the step's {name} {step_cap} is above the policy's {policy_cap}: the policy's cap applies")
            return policy_cap
        return step_cap

    return lower("max_files", policy.max_files, max_files), lower("max_bytes", policy.max_bytes, max_bytes), notes


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _percent(free: int, total: int) -> float:
    return round(100.0 * free / total, 3) if total else 0.0


@dataclass
class _Opened:
    fds: dict[str, int]
    notes: list[str]
    anchor: int
    """fd of the first existing root: free space and the lock are taken on it."""

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


@dataclass(eq=False)
class Cleaner:
    policy: CleanupPolicy
    _: KW_ONLY
    free_space: FreeSpace = statvfs_space
    hooks: FsHooks | None = None
    clock: Callable[[], float] = time.time
    lock_wait: float = 10.0

    def __post_init__(self) -> None:
        self.hooks = self.hooks or FsHooks()

    # ------------------------------------------------------------------ shared

    def _open(self) -> _Opened:
        fds: dict[str, int] = {}
        notes: list[str] = []
        devices: dict[str, int] = {}
        try:
            for root in self.policy.roots:
                try:
                    fd = open_root(root)
                except RootError as exc:
                    if exc.errno == errno.ENOENT:
                        notes.append(f"root {root} does not exist on this node: skipped")
                        continue
                    raise CleanupError(f"policy {self.policy.name!r}: root {root}: {exc.strerror}") from None
                fds[root] = fd
                devices[root] = os.fstat(fd).st_dev
            if not fds:
                roots = ", ".join(self.policy.roots)
                raise CleanupError(f"policy {self.policy.name!r}: none of its roots exists on this node ({roots})")
            first = next(iter(fds))
            for root, device in devices.items():
                if device != devices[first]:
                    raise CleanupError(
                        f"policy {self.policy.name!r}: root {root} is on another filesystem than {first}; "
                        "a policy serves one filesystem (make one policy per mountpoint)"
                    )
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return _Opened(fds, notes, fds[first])

    def _scan(self, opened: _Opened) -> ScanResult:
        result = ScanResult()
        for root, fd in opened.fds.items():
            scan_root(root, fd, result, self.hooks)
        return result

    def _limits(self, target: Target, space: DiskSpace, max_files: int | None, max_bytes: int | None) -> Limits:
        files_cap, bytes_cap, _ = effective_caps(self.policy, max_files, max_bytes)
        return Limits(target_free=target.bytes_for(space), max_files=files_cap, max_bytes=bytes_cap)

    def _header(
        self, target: Target, space: DiskSpace, limits: Limits, notes: list[str], scan: ScanResult, chosen: Selection
    ) -> dict[str, Any]:
        return {
            "policy": self.policy.name,
            "mountpoint": self.policy.mountpoint,
            "roots": list(self.policy.roots),
            "target": target.to_dict(),
            "target_free_bytes": limits.target_free,
            "size_bytes": space.total,
            "free_before_bytes": space.free,
            "free_before_percent": _percent(space.free, space.total),
            "needed_bytes": max(0, limits.target_free - space.free),
            "caps": {"max_files": limits.max_files, "max_bytes": limits.max_bytes},
            "scan": {
                "files_seen": len(scan.files),
                "matching": chosen.matched,
                "candidates": len(chosen.deletions),
                "truncation_candidates": len(chosen.truncations),
                "kept": dict(chosen.kept),
                "skipped": dict(scan.skipped),
                "skipped_examples": scan.examples,
            },
            "notes": notes,
        }

    @staticmethod
    def _stop(result: BudgetResult) -> dict[str, Any]:
        return {"stopped_by": result.stopped_by, "stop_reason": STOP_REASONS[result.stopped_by]}

    # ------------------------------------------------------------------ plan

    def plan(self, target: Target, *, max_files: int | None = None, max_bytes: int | None = None) -> dict[str, Any]:
        """What execute would do now. Reads the tree and statvfs; changes nothing."""
        opened = self._open()
        try:
            space = self.free_space(opened.anchor)
            scan = self._scan(opened)
        finally:
            opened.close()
        chosen = select(scan.files, self.policy, now=self.clock())
        limits = self._limits(target, space, max_files, max_bytes)
        notes = opened.notes + effective_caps(self.policy, max_files, max_bytes)[2]

        def predict(item: Item) -> Done:
            return Done(item, ok=True, removed=item.removes, freed=item.frees, kept_bytes=item.keep_bytes)

        result = run_budget(chosen.items, free_before=space.free, limits=limits, act=predict)
        deletions = [d.item.file for d in result.done if d.item.kind == "delete"]
        truncations = [d for d in result.done if d.item.kind == "truncate"]
        report = self._header(target, space, limits, notes, scan, chosen)
        report.update(
            {
                "would_delete": [
                    {"path": display(f.path), "size": f.size, "modified": _iso(f.mtime_ns)} for f in deletions
                ],
                "would_delete_files": len(deletions),
                "would_delete_bytes": sum(f.size for f in deletions),
                "would_truncate": [
                    {"path": display(d.item.file.path), "size": d.item.file.size, "keep_bytes": d.kept_bytes}
                    for d in truncations
                ],
                "would_free_bytes": result.freed,
                "predicted_free_after_bytes": result.predicted_free,
                "predicted_free_after_percent": _percent(result.predicted_free, space.total),
                "target_met": result.predicted_free >= limits.target_free,
                **self._stop(result),
            }
        )
        report["summary"] = (
            f"would delete {len(deletions)} files ({format_size(report['would_delete_bytes'])})"
            + (f" and truncate {len(truncations)}" if truncations else "")
            + f": free {report['free_before_percent']:.1f}% -> {report['predicted_free_after_percent']:.1f}%"
            f" (target {format_size(limits.target_free)}); stops because {report['stop_reason']}"
        )
        return report

    # ------------------------------------------------------------------ execute

    def execute(
        self,
        target: Target,
        *,
        max_files: int | None = None,
        max_bytes: int | None = None,
        expired: Callable[[], bool] = lambda: False,
    ) -> dict[str, Any]:
        """Delete (then truncate) oldest first until the target is met or a cap, the deadline or the list ends."""
        opened = self._open()
        try:
            with exclusive(opened.anchor, wait=self.lock_wait) as locked:
                if not locked:
                    raise CleanupBusy(f"another cleanup of policy {self.policy.name!r} is running; try again later")
                return self._execute(opened, target, max_files, max_bytes, expired)
        finally:
            opened.close()

    def _execute(
        self,
        opened: _Opened,
        target: Target,
        max_files: int | None,
        max_bytes: int | None,
        expired: Callable[[], bool],
    ) -> dict[str, Any]:
        before = self.free_space(opened.anchor)
        scan = self._scan(opened)
        chosen = select(scan.files, self.policy, now=self.clock())
        limits = self._limits(target, before, max_files, max_bytes)
        notes = opened.notes + effective_caps(self.policy, max_files, max_bytes)[2]
        if self.hooks.after_scan is not None:
            self.hooks.after_scan()
        over = self.policy.truncate_logs.over_bytes if self.policy.truncate_logs else 0
        with SafeDirs(opened.fds, scan.dirs) as dirs:

            def act(item: Item) -> Done:
                return delete(item, dirs, self.hooks) if item.kind == "delete" else truncate(item, dirs, over)

            result = run_budget(
                chosen.items,
                free_before=before.free,
                limits=limits,
                act=act,
                measure=lambda: self.free_space(opened.anchor).free,
                expired=expired,
            )
        after = self.free_space(opened.anchor)
        deleted = [d for d in result.done if d.item.kind == "delete"]
        truncated = [d for d in result.done if d.item.kind == "truncate"]
        report = self._header(target, before, limits, notes, scan, chosen)
        report.update(
            {
                "deleted": [
                    {"path": display(d.item.file.path), "size": d.removed, "modified": _iso(d.item.file.mtime_ns)}
                    for d in deleted
                ],
                "deleted_files": len(deleted),
                "deleted_bytes": sum(d.removed for d in deleted),
                "truncated": [
                    {"path": display(d.item.file.path), "size_before": d.item.file.size, "size_after": d.kept_bytes}
                    for d in truncated
                ],
                "skipped": [{"path": display(d.item.file.path), "reason": d.reason} for d in result.skipped],
                "bytes_freed": result.freed,
                "free_after_bytes": after.free,
                "free_after_percent": _percent(after.free, after.total),
                "free_change_bytes": after.free - before.free,
                "target_met": after.free >= limits.target_free,
                **self._stop(result),
            }
        )
        if result.stopped_by == "target_met" and after.free < limits.target_free:
            notes.append(
                "the deletions should have met the target but statvfs does not show the space yet: "
                "a process may still hold a deleted file open"
            )
        report["summary"] = (
            f"deleted {len(deleted)} files ({format_size(report['deleted_bytes'])})"
            + (f", truncated {len(truncated)}" if truncated else "")
            + (f", skipped {len(result.skipped)}" if result.skipped else "")
            + f": free {report['free_before_percent']:.1f}% -> {report['free_after_percent']:.1f}%"
            f" (target {format_size(limits.target_free)}); stopped because {report['stop_reason']}"
        )
        return report
