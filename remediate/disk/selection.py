"""Which files a cleanup deletes, in which order, and when it stops. Pure: no filesystem access.

The walker (`remediate.disk.fs`) turns a policy's roots into `FileInfo` records;
`select` applies the policy (patterns, exclude, keep-newest-N per directory,
minimum age) and orders what is left oldest first; `run_budget` walks that
order and stops at the first of: the free-space target met, a cap (files,
bytes) reached, the deadline, no candidates left. The same loop makes the
dry-run plan (with predicted outcomes) and the real run (with the deleter's
outcomes and measured free space), so both stop for the same reasons.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from remediate.disk.policy import CleanupPolicy

# Why a run stopped.
TARGET_ALREADY_MET = "target_already_met"
TARGET_MET = "target_met"
MAX_FILES = "max_files"
MAX_BYTES = "max_bytes"
DEADLINE = "deadline"
NO_CANDIDATES_LEFT = "no_candidates_left"

STOP_REASONS = {
    TARGET_ALREADY_MET: "the free-space target was already met: nothing to do",
    TARGET_MET: "the free-space target is met",
    MAX_FILES: "the per-run cap on files (max_files) is reached",
    MAX_BYTES: "the next file would exceed the per-run cap on bytes (max_bytes)",
    DEADLINE: "the step's deadline is near",
    NO_CANDIDATES_LEFT: "no file the policy allows is left",
}


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One regular file as the walker saw it (lstat, never following a symlink)."""

    root: str
    rel_dir: str
    """Directory relative to the root, '/'-separated; '' for the root itself."""
    name: str
    size: int
    allocated: int
    """Bytes the file occupies on disk (st_blocks * 512)."""
    mtime_ns: int
    dev: int
    ino: int
    nlink: int = 1

    @property
    def rel_path(self) -> str:
        return f"{self.rel_dir}/{self.name}" if self.rel_dir else self.name

    @property
    def path(self) -> str:
        return f"{self.root}/{self.rel_path}"

    @property
    def frees(self) -> int:
        """Space deleting it gives back: nothing while another hard link keeps the data."""
        return self.allocated if self.nlink == 1 else 0


@dataclass(frozen=True, slots=True)
class Item:
    """One thing a run does: delete a file, or truncate a log file to its tail."""

    kind: Literal["delete", "truncate"]
    file: FileInfo
    keep_bytes: int = 0
    """truncate: bytes kept at most (the tail)."""

    @property
    def removes(self) -> int:
        """Bytes of data it removes (counted against max_bytes)."""
        return self.file.size if self.kind == "delete" else max(0, self.file.size - self.keep_bytes)

    @property
    def frees(self) -> int:
        """Space it is expected to give back."""
        if self.kind == "delete":
            return self.file.frees
        if self.file.nlink != 1 or self.file.size == 0:
            return 0
        return max(0, self.file.allocated - self.file.allocated * self.keep_bytes // self.file.size)


@dataclass
class Selection:
    """What a policy allows on the files scanned: deletions oldest first, then truncations largest first."""

    deletions: list[Item]
    truncations: list[Item]
    kept: Counter[str] = field(default_factory=Counter)
    """Matching files left alone, by reason: keep_newest, too_young, hard_linked (log files not truncated)."""
    matched: int = 0
    """Files that match the policy's patterns (before keep_newest and min_age)."""

    @property
    def items(self) -> list[Item]:
        return self.deletions + self.truncations


def select(files: Iterable[FileInfo], policy: CleanupPolicy, *, now: float) -> Selection:
    """Apply the policy to scanned files. keep_newest counts every matching file of a directory, young or old."""
    by_dir: dict[tuple[str, str], list[FileInfo]] = defaultdict(list)
    truncatable: list[FileInfo] = []
    for info in files:
        rel = info.rel_path
        if policy.deletable(rel):
            by_dir[(info.root, info.rel_dir)].append(info)
        if policy.truncatable(rel):
            truncatable.append(info)
    kept: Counter[str] = Counter()
    candidates: list[FileInfo] = []
    cutoff_ns = int((now - policy.min_age) * 1e9)
    matched = 0
    for group in by_dir.values():
        matched += len(group)
        group.sort(key=lambda f: (f.mtime_ns, f.name), reverse=True)
        kept["keep_newest"] += min(policy.keep_newest, len(group))
        for info in group[policy.keep_newest :]:
            if info.mtime_ns > cutoff_ns:
                kept["too_young"] += 1
            else:
                candidates.append(info)
    candidates.sort(key=lambda f: (f.mtime_ns, f.root, f.rel_dir, f.name))
    deletions = [Item("delete", info) for info in candidates]
    truncations: list[Item] = []
    if policy.truncate_logs is not None:
        chosen = {(f.dev, f.ino) for f in candidates}
        rule = policy.truncate_logs
        big = [f for f in truncatable if f.size > rule.over_bytes and (f.dev, f.ino) not in chosen]
        # Truncating rewrites the inode: every other name of a hard-linked file (a backup, another
        # job's copy) would lose its content too. Such files are left alone, and the plan says so.
        linked = [f for f in big if f.nlink > 1]
        if linked:
            kept["hard_linked"] += len(linked)
            big = [f for f in big if f.nlink == 1]
        big.sort(key=lambda f: (-f.size, f.root, f.rel_path))
        truncations = [Item("truncate", info, keep_bytes=rule.keep_tail_bytes) for info in big]
    return Selection(deletions, truncations, +kept, matched)


@dataclass(frozen=True)
class Limits:
    target_free: int
    """Free bytes wanted (statvfs f_bavail * f_frsize, as node_exporter's node_filesystem_avail_bytes)."""
    max_files: int | None = None
    max_bytes: int | None = None


@dataclass(frozen=True)
class Done:
    """What happened to one item: `removed`/`freed` bytes, or skipped with a reason."""

    item: Item
    ok: bool
    removed: int = 0
    freed: int = 0
    reason: str = ""
    kept_bytes: int = 0


@dataclass
class BudgetResult:
    done: list[Done]
    skipped: list[Done]
    stopped_by: str
    files: int
    removed: int
    freed: int
    free_before: int

    @property
    def predicted_free(self) -> int:
        return self.free_before + self.freed


def run_budget(
    items: Sequence[Item],
    *,
    free_before: int,
    limits: Limits,
    act: Callable[[Item], Done],
    measure: Callable[[], int] | None = None,
    expired: Callable[[], bool] = lambda: False,
) -> BudgetResult:
    """Act on items in order until the target is met (predicted or measured) or a cap, the deadline or the list ends.

    Caps count only what was done: a skipped file (gone, changed, permission denied) costs nothing.
    A file that would take the bytes over max_bytes stops the run: the order stays oldest first,
    smaller younger files are not picked instead.
    """
    done: list[Done] = []
    skipped: list[Done] = []
    files = removed = freed = 0

    def target_met() -> bool:
        if free_before + freed >= limits.target_free:
            return True
        return measure is not None and measure() >= limits.target_free

    stopped_by = NO_CANDIDATES_LEFT
    for item in items:
        if target_met():
            stopped_by = TARGET_MET if done else TARGET_ALREADY_MET
            break
        if limits.max_files is not None and files >= limits.max_files:
            stopped_by = MAX_FILES
            break
        if limits.max_bytes is not None and removed + item.removes > limits.max_bytes:
            stopped_by = MAX_BYTES
            break
        if expired():
            stopped_by = DEADLINE
            break
        outcome = act(item)
        if outcome.ok:
            done.append(outcome)
            files += 1
            removed += outcome.removed
            freed += outcome.freed
        else:
            skipped.append(outcome)
    else:
        if target_met():
            stopped_by = TARGET_MET if done else TARGET_ALREADY_MET
    return BudgetResult(done, skipped, stopped_by, files, removed, freed, free_before)
