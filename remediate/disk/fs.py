"""The filesystem side of a cleanup: walk a policy root, delete and truncate files, read free space.

Never follow a symbolic link, never leave the root, never cross into another filesystem:

- A root is opened one component at a time from '/' with O_DIRECTORY|O_NOFOLLOW: a root whose
  path holds a symlink is refused.
- Directories are walked through file descriptors (os.scandir on a directory fd, lstat with
  dir_fd and follow_symlinks=False); a subdirectory is opened relative to its parent's fd with
  O_NOFOLLOW and must be the same inode the listing showed. Symlinks are never entered or deleted,
  directories on another st_dev than the root (mounts) are not entered, nor are the mount points
  /proc/self/mountinfo lists inside the root (bind mounts of the same filesystem).
- A file is deleted with unlinkat(dir_fd, name) on its directory reopened from the root fd the
  same way and checked against the inode the scan recorded, right after fstatat (no follow)
  shows the same regular file (st_dev, st_ino, mtime). unlinkat removes a directory entry and
  never follows a symlink: if one is swapped in after that check, the link itself goes and its
  target is untouched.
- Truncation opens the log with O_NOFOLLOW relative to its directory fd, checks the inode again,
  copies the tail to the start and ftruncates.

`FsHooks` lets tests act between the steps (swap a file for a symlink, fake a device id, fail an
unlink); production code passes none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from remediate.disk.selection import Done, FileInfo, Item

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_DEPTH = 128
EXAMPLES = 20
COPY_CHUNK = 1 << 20
LINE_SEARCH = 64 * 1024


class RootError(OSError):
    """A policy root that cannot be opened safely."""


@dataclass(frozen=True)
class DiskSpace:
    free: int
    """Bytes available to unprivileged users (f_bavail * f_frsize): node_filesystem_avail_bytes."""
    total: int
    """Size of the filesystem (f_blocks * f_frsize): node_filesystem_size_bytes."""

    @property
    def free_percent(self) -> float:
        return 100.0 * self.free / self.total if self.total else 0.0


def statvfs_space(fd: int) -> DiskSpace:
    """Free space of the filesystem holding the open directory `fd` (os.statvfs)."""
    result = os.statvfs(fd)
    return DiskSpace(free=result.f_bavail * result.f_frsize, total=result.f_blocks * result.f_frsize)


FreeSpace = Callable[[int], DiskSpace]


@dataclass
class FsHooks:
    """Test seams. Production code uses the defaults, which do nothing."""

    after_scan: Callable[[], None] | None = None
    """Called once the scan is done and before anything is deleted."""
    before_unlink: Callable[[int, str], None] | None = None
    """Called with (dir_fd, name) after the file was checked and right before unlinkat."""
    device_of: Callable[[str, os.stat_result], int] | None = None
    """Device id of the entry at a root-relative path (default: st_dev)."""


def open_root(path: str) -> int:
    """Open an absolute directory path without following any symlink on the way; the caller closes the fd."""
    fd = os.open("/", DIR_FLAGS)
    try:
        walked = ""
        for part in (p for p in path.split("/") if p):
            walked += "/" + part
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    kind = "a symbolic link" if _is_link(fd, part) else "not a directory"
                    raise RootError(
                        exc.errno, f"{walked} is {kind} (roots are opened without following links)"
                    ) from None
                raise RootError(exc.errno, f"cannot open {walked}: {exc.strerror}") from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def mount_points_under(root: str, mountinfo: str = "/proc/self/mountinfo") -> set[str]:
    """Mount points strictly inside `root` (bind mounts included), from the kernel's mountinfo."""
    found: set[str] = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.readlines()
    except OSError:
        return found
    prefix = root.rstrip("/") + "/"
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            point = _unescape_mount(fields[4])
            if point.startswith(prefix):
                found.add(point)
    return found


def _unescape_mount(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \040, \011, \012, \134.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def display(path: str) -> str:
    """A path fit for JSON and logs: undecodable bytes become backslash escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclass
class ScanResult:
    files: list[FileInfo] = field(default_factory=list)
    dirs: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    """(root, rel_dir) -> (st_dev, st_ino) of every directory walked, for the deleter to check."""
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, path: str) -> None:
        self.skipped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < EXAMPLES:
            examples.append(display(path))


def scan_root(root: str, root_fd: int, result: ScanResult, hooks: FsHooks | None = None) -> None:
    """Add the regular files under `root` (open as `root_fd`) on the root's filesystem to `result`."""
    hooks = hooks or FsHooks()
    device_of = hooks.device_of or (lambda rel, st: st.st_dev)
    root_stat = os.fstat(root_fd)
    root_dev = root_stat.st_dev
    result.dirs[(root, "")] = (root_stat.st_dev, root_stat.st_ino)
    mounts = mount_points_under(root)
    # Depth-first with one open fd per level: frames of (fd, rel_dir, subdirectories still to walk).
    stack: list[tuple[int, str, list[tuple[str, os.stat_result]]]] = []
    stack.append((root_fd, "", _list(root, root_fd, "", root_dev, device_of, result)))
    try:
        while stack:
            fd, rel, pending = stack[-1]
            if not pending:
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            name, expected = pending.pop()
            child_rel = f"{rel}/{name}" if rel else name
            child_path = f"{root}/{child_rel}"
            if child_path in mounts:
                result.skip("mount_point", child_path)
                continue
            if len(stack) >= MAX_DEPTH:
                result.skip("too_deep", child_path)
                continue
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                result.skip(_reason(exc), child_path)
                continue
            opened = os.fstat(child)
            if (opened.st_dev, opened.st_ino) != (expected.st_dev, expected.st_ino):
                os.close(child)
                result.skip("changed_during_scan", child_path)
                continue
            result.dirs[(root, child_rel)] = (opened.st_dev, opened.st_ino)
            stack.append((child, child_rel, _list(root, child, child_rel, root_dev, device_of, result)))
    finally:
        for fd, _, _ in stack:
            if fd != root_fd:
                os.close(fd)


def _list(
    root: str,
    fd: int,
    rel: str,
    root_dev: int,
    device_of: Callable[[str, os.stat_result], int],
    result: ScanResult,
) -> list[tuple[str, os.stat_result]]:
    """Record the files of one directory; return its subdirectories (on the root's filesystem)."""
    subdirs: list[tuple[str, os.stat_result]] = []
    try:
        iterator = os.scandir(fd)
    except OSError as exc:
        result.skip(_reason(exc), f"{root}/{rel}" if rel else root)
        return subdirs
    with iterator:
        for entry in iterator:
            name = entry.name
            entry_rel = f"{rel}/{name}" if rel else name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                result.skip(_reason(exc), f"{root}/{entry_rel}")
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                result.skip("symlink", f"{root}/{entry_rel}")
                continue
            if stat.S_ISDIR(mode):
                if device_of(entry_rel, st) != root_dev:
                    result.skip("other_filesystem", f"{root}/{entry_rel}")
                else:
                    subdirs.append((name, st))
                continue
            if not stat.S_ISREG(mode):
                result.skip("not_a_regular_file", f"{root}/{entry_rel}")
                continue
            if device_of(entry_rel, st) != root_dev:
                result.skip("other_filesystem", f"{root}/{entry_rel}")
                continue
            result.files.append(
                FileInfo(
                    root=root,
                    rel_dir=rel,
                    name=name,
                    size=st.st_size,
                    allocated=st.st_blocks * 512,
                    mtime_ns=st.st_mtime_ns,
                    dev=st.st_dev,
                    ino=st.st_ino,
                    nlink=st.st_nlink,
                )
            )
    subdirs.reverse()  # popped from the end: walk in listing order
    return subdirs


def _reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "vanished"
    if isinstance(exc, PermissionError):
        return "permission_denied"
    if exc.errno == errno.ELOOP:
        return "replaced_by_symlink"
    return errno.errorcode.get(exc.errno or 0, "error").lower()


class DirChanged(Exception):
    """A directory is not the one the scan saw (replaced, moved, or now a symlink)."""


class SafeDirs:
    """Directory fds reopened from the policy roots, each checked against the inode the scan recorded.

    Keeps up to `capacity` fds open (least recently used closed first). Use as a context manager.
    """

    def __init__(self, roots: dict[str, int], dirs: dict[tuple[str, str], tuple[int, int]], capacity: int = 256):
        self._roots = roots
        self._dirs = dirs
        self._capacity = capacity
        self._open: OrderedDict[tuple[str, str], int] = OrderedDict()

    def __enter__(self) -> SafeDirs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self._open:
            _, fd = self._open.popitem()
            os.close(fd)

    def fd(self, root: str, rel_dir: str) -> int:
        if rel_dir == "":
            return self._roots[root]
        key = (root, rel_dir)
        cached = self._open.get(key)
        if cached is not None:
            self._open.move_to_end(key)
            return cached
        parent_rel, _, name = rel_dir.rpartition("/")
        parent = self.fd(root, parent_rel)
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise DirChanged(f"directory {rel_dir} was replaced by a symbolic link or a file") from None
            raise
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._dirs.get(key):
            os.close(fd)
            raise DirChanged(f"directory {rel_dir} was replaced since the scan")
        self._open[key] = fd
        if len(self._open) > self._capacity:
            _, oldest = self._open.popitem(last=False)
            os.close(oldest)
        return fd


def _check_same(st: os.stat_result, info: FileInfo) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "replaced by a symbolic link since the scan: left alone"
    if not stat.S_ISREG(st.st_mode):
        return "no longer a regular file: left alone"
    if (st.st_dev, st.st_ino) != (info.dev, info.ino):
        return "replaced by another file since the scan: left alone"
    if st.st_mtime_ns != info.mtime_ns:
        return "modified since the scan: left alone"
    return None


def _failure(item: Item, exc: OSError) -> Done:
    if isinstance(exc, FileNotFoundError):
        return Done(item, ok=False, reason="already gone")
    name = errno.errorcode.get(exc.errno or 0, "")
    return Done(item, ok=False, reason=f"{exc.strerror or exc}{f' ({name})' if name else ''}")


def delete(item: Item, dirs: SafeDirs, hooks: FsHooks | None = None) -> Done:
    """Delete one scanned file if it is still the same regular file; never raises for one file's trouble."""
    info = item.file
    try:
        dir_fd = dirs.fd(info.root, info.rel_dir)
        st = os.stat(info.name, dir_fd=dir_fd, follow_symlinks=False)
        problem = _check_same(st, info)
        if problem:
            return Done(item, ok=False, reason=problem)
        if hooks is not None and hooks.before_unlink is not None:
            hooks.before_unlink(dir_fd, info.name)
        os.unlink(info.name, dir_fd=dir_fd)
    except DirChanged as exc:
        return Done(item, ok=False, reason=f"{exc}: left alone")
    except OSError as exc:
        return _failure(item, exc)
    return Done(item, ok=True, removed=st.st_size, freed=st.st_blocks * 512 if st.st_nlink == 1 else 0)


def truncate(item: Item, dirs: SafeDirs, over_bytes: int) -> Done:
    """Cut a log file down to its last `item.keep_bytes` bytes, starting at a line where one begins in them."""
    info = item.file
    try:
        dir_fd = dirs.fd(info.root, info.rel_dir)
        before = os.stat(info.name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(before.st_mode) or not stat.S_ISREG(before.st_mode):
            return Done(item, ok=False, reason=_check_same(before, info) or "not a regular file")
        fd = os.open(info.name, FILE_FLAGS, dir_fd=dir_fd)
    except DirChanged as exc:
        return Done(item, ok=False, reason=f"{exc}: left alone")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Done(item, ok=False, reason="replaced by a symbolic link since the scan: left alone")
        return _failure(item, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (info.dev, info.ino):
            return Done(item, ok=False, reason="replaced by another file since the scan: left alone")
        if st.st_nlink > 1:  # linked since the scan: its other names would be truncated too
            return Done(
                item, ok=False, reason=f"has {st.st_nlink} hard links (the other names would lose it too): left alone"
            )
        size = st.st_size
        if size <= over_bytes:
            return Done(item, ok=False, reason=f"now {size} bytes, not over {over_bytes}: left alone")
        start = size - item.keep_bytes
        head = os.pread(fd, min(LINE_SEARCH, item.keep_bytes), start)
        newline = head.find(b"\n")
        if newline != -1 and start + newline + 1 < size and os.pread(fd, 1, start - 1) != b"\n":
            start += newline + 1  # keep whole lines: drop the partial one the cut lands in
        kept = size - start
        offset = 0
        while offset < kept:
            chunk = os.pread(fd, min(COPY_CHUNK, kept - offset), start + offset)
            if not chunk:
                break
            os.pwrite(fd, chunk, offset)
            offset += len(chunk)
        os.ftruncate(fd, offset)
        after = os.fstat(fd)
    except OSError as exc:
        return _failure(item, exc)
    finally:
        os.close(fd)
    freed = max(0, st.st_blocks - after.st_blocks) * 512 if st.st_nlink == 1 else 0
    return Done(item, ok=True, removed=size - after.st_size, freed=freed, kept_bytes=after.st_size)


@contextlib.contextmanager
def exclusive(fd: int, *, wait: float) -> Iterator[bool]:
    """flock(LOCK_EX) on a root's fd so two cleanups of one policy (two workers, two processes) never interleave.

    Yields False when the lock was not free within `wait` seconds.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                yield False
                return
            time.sleep(0.05)
    try:
        yield True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
