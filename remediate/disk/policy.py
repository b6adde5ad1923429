"""Cleanup policies: what `disk.cleanup` may delete on a node, configured on the node side, never by an alert.

A policy names the filesystem it serves (`mountpoint`, matched exactly against an
alert's `mountpoint` label), the directories it may touch (`roots`), which files
there are disposable (`patterns`, `exclude`, `min_age`, `keep_newest` per
directory) and how much one run may remove (`max_files`, `max_bytes`). Optionally
it truncates big log files, keeping their tail. Pure: loading reads one YAML file.

    policies:
      - name: scratch
        mountpoint: /data
        roots: [/data/scratch]
        patterns: ["*.tmp", "**/cache/*"]
        min_age: 2d
        keep_newest: 0
        max_bytes: 500GiB
        max_files: 10000
        truncate_logs: {patterns: ["*.log"], over_bytes: 1GiB, keep_tail_bytes: 100MiB}
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from remediate.config.durations import format_duration, parse_duration
from remediate.disk.patterns import GlobError, PathMatcher
from remediate.errors import ConfigError, located

DEFAULT_MIN_AGE = 3600.0
DEFAULT_MAX_FILES = 10_000
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Roots that are never allowed: the whole filesystem tree, and kernel/device pseudo-filesystems.
FORBIDDEN_ROOTS = ("/",)
FORBIDDEN_TREES = ("/proc", "/sys", "/dev")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}


class PolicyError(ConfigError):
    """A cleanup policy file is not valid."""

    def __init__(self, message: str, *, file: str = "", policy: str = "", field: str = "") -> None:
        self.file, self.policy, self.field = file, policy, field
        where = (file and f"cleanup policies file {file}", policy and f"policy {policy!r}", field and f"field {field}")
        super().__init__(located(message, *where))


def parse_size(value: Any) -> int:
    """Bytes from an int or a string like 512, 10GiB, 1.5G, 200MB (k/M/G/T = powers of 1000, Ki/Mi/Gi/Ti of 1024)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative size {value!r}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a size: {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"not a size: {value!r}")
    match = _SIZE.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {value!r} (use e.g. 512, 100MiB, 10GiB, 1.5TB)")
    number = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(number) or number > 2**63:
        raise ValueError(f"size too large: {value!r}")
    return int(number)


def format_size(size: float) -> str:
    """1536 -> '1.5 KiB' (for people; reports also carry the exact byte counts)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class TruncateLogs:
    """Log files over `over_bytes` are cut down to their last `keep_tail_bytes` (at a line start)."""

    patterns: tuple[str, ...]
    over_bytes: int
    keep_tail_bytes: int

    @cached_property
    def matcher(self) -> PathMatcher:
        return PathMatcher(self.patterns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "patterns": list(self.patterns),
            "over_bytes": self.over_bytes,
            "keep_tail_bytes": self.keep_tail_bytes,
        }


@dataclass(frozen=True)
class CleanupPolicy:
    """What one filesystem's cleanup may delete. Built by `parse_policies`, which checks every field."""

    name: str
    mountpoint: str
    roots: tuple[str, ...]
    patterns: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    min_age: float = DEFAULT_MIN_AGE
    """Seconds since the last modification before a file may be deleted."""
    keep_newest: int = 0
    """The N most recently modified matching files of each directory are never deleted."""
    max_bytes: int | None = None
    """Most bytes (file sizes) one run may delete or cut; None: no cap."""
    max_files: int | None = DEFAULT_MAX_FILES
    """Most files one run may delete or truncate; None: no cap."""
    truncate_logs: TruncateLogs | None = None
    description: str = ""
    source: str = field(default="", compare=False)

    @cached_property
    def matcher(self) -> PathMatcher:
        return PathMatcher(self.patterns)

    @cached_property
    def excluder(self) -> PathMatcher:
        return PathMatcher(self.exclude)

    def deletable(self, rel_path: str) -> bool:
        """Whether a file at `rel_path` (relative to its root, '/'-separated) matches the policy's patterns."""
        return self.matcher.matches(rel_path) and not self.excluder.matches(rel_path)

    def truncatable(self, rel_path: str) -> bool:
        if self.truncate_logs is None:
            return False
        return self.truncate_logs.matcher.matches(rel_path) and not self.excluder.matches(rel_path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mountpoint": self.mountpoint,
            "roots": list(self.roots),
            "patterns": list(self.patterns),
            "exclude": list(self.exclude),
            "min_age": format_duration(self.min_age),
            "keep_newest": self.keep_newest,
            "max_bytes": self.max_bytes,
            "max_files": self.max_files,
            "truncate_logs": self.truncate_logs.to_dict() if self.truncate_logs else None,
        }


class PolicySet:
    """The policies of one file, by name and by mountpoint (both unique)."""

    def __init__(self, policies: Iterable[CleanupPolicy] = (), *, source: str = "") -> None:
        self.source = source
        self._by_name: dict[str, CleanupPolicy] = {}
        self._by_mountpoint: dict[str, CleanupPolicy] = {}
        for policy in policies:
            if policy.name in self._by_name:
                raise PolicyError("a second policy with this name", file=source, policy=policy.name, field="name")
            other = self._by_mountpoint.get(policy.mountpoint)
            if other is not None:
                raise PolicyError(
                    f"mountpoint {policy.mountpoint!r} is already served by policy {other.name!r} "
                    "(an alert's mountpoint must pick exactly one policy)",
                    file=source,
                    policy=policy.name,
                    field="mountpoint",
                )
            self._by_name[policy.name] = policy
            self._by_mountpoint[policy.mountpoint] = policy

    def __iter__(self) -> Iterator[CleanupPolicy]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def mountpoints(self) -> list[str]:
        return sorted(self._by_mountpoint)

    def by_name(self, name: str) -> CleanupPolicy | None:
        return self._by_name.get(name)

    def by_mountpoint(self, mountpoint: str) -> CleanupPolicy | None:
        """Exact string match: '/data' does not pick the policy of '/data/' or '/'."""
        return self._by_mountpoint.get(mountpoint)


_POLICY_KEYS = {
    "name",
    "description",
    "mountpoint",
    "roots",
    "patterns",
    "exclude",
    "min_age",
    "keep_newest",
    "max_bytes",
    "max_files",
    "truncate_logs",
}
_TRUNCATE_KEYS = {"patterns", "over_bytes", "keep_tail_bytes"}


def load_policies(path: Path) -> PolicySet:
    """Read and check a policies file; every error names the file, the policy and the field."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read it: {exc.strerror or exc}", file=source) from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text: {exc}", file=source) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}", file=source) from exc
    return parse_policies(data, source=source)


def parse_policies(data: Any, *, source: str = "") -> PolicySet:
    if data is None:
        data = {"policies": []}
    if not isinstance(data, Mapping):
        raise PolicyError("the top level must be a mapping with a 'policies' list", file=source)
    unknown = sorted(str(key) for key in data if key != "policies")
    if unknown:
        raise PolicyError("unknown key (known: policies)", file=source, field=unknown[0])
    raw = data.get("policies") or []
    if not isinstance(raw, list):
        raise PolicyError("must be a list of policies", file=source, field="policies")
    policies = [parse_policy(item, source=source, index=index) for index, item in enumerate(raw)]
    return PolicySet(policies, source=source)


def parse_policy(raw: Any, *, source: str = "", index: int = 0) -> CleanupPolicy:
    label = f"policies[{index}]"
    if not isinstance(raw, Mapping):
        raise PolicyError("a policy must be a mapping", file=source, field=label)
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise PolicyError(
            "must be a name of letters, digits, '.', '_' or '-' (at most 63 characters)",
            file=source,
            field=f"{label}.name",
        )

    def fail(field_name: str, message: str) -> PolicyError:
        return PolicyError(message, file=source, policy=name, field=field_name)

    unknown = sorted(str(key) for key in raw if key not in _POLICY_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key (known: {', '.join(sorted(_POLICY_KEYS))})")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "must be a string")
    mountpoint = raw.get("mountpoint")
    if not isinstance(mountpoint, str) or not mountpoint.startswith("/") or "\0" in mountpoint:
        raise fail("mountpoint", "must be an absolute path, exactly as node_exporter's mountpoint label writes it")
    roots = _roots(raw.get("roots"), fail)
    patterns = _patterns(raw.get("patterns"), "patterns", fail, required=True)
    exclude = _patterns(raw.get("exclude"), "exclude", fail, required=False)
    min_age = _duration(raw.get("min_age", DEFAULT_MIN_AGE), "min_age", fail)
    keep_newest = _count(raw.get("keep_newest", 0), "keep_newest", fail, minimum=0)
    max_bytes = None if raw.get("max_bytes") is None else _size(raw["max_bytes"], "max_bytes", fail, minimum=1)
    max_files = (
        _count(raw["max_files"], "max_files", fail, minimum=1)
        if "max_files" in raw and raw["max_files"] is not None
        else (None if "max_files" in raw else DEFAULT_MAX_FILES)
    )
    truncate = _truncate(raw.get("truncate_logs"), fail)
    return CleanupPolicy(
        name=name,
        mountpoint=mountpoint,
        roots=roots,
        patterns=patterns,
        exclude=exclude,
        min_age=min_age,
        keep_newest=keep_newest,
        max_bytes=max_bytes,
        max_files=max_files,
        truncate_logs=truncate,
        description=description,
        source=source,
    )


def _roots(value: Any, fail: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise fail("roots", "must be a non-empty list of absolute directory paths")
    roots: list[str] = []
    for index, item in enumerate(value):
        where = f"roots[{index}]"
        if not isinstance(item, str) or not item.startswith("/") or "\0" in item:
            raise fail(where, "must be an absolute directory path")
        parts = item.split("/")
        if any(part in (".", "..") for part in parts):
            raise fail(where, "must not contain '.' or '..' components")
        root = posixpath.normpath(item)
        if root.startswith("//"):
            root = "/" + root.lstrip("/")
        if root in FORBIDDEN_ROOTS:
            raise fail(where, "the filesystem root '/' cannot be a cleanup root: name the directories to clean")
        if any(root == tree or root.startswith(tree + "/") for tree in FORBIDDEN_TREES):
            raise fail(where, f"{root} is a kernel or device filesystem, never a cleanup root")
        for other in roots:
            if root == other or root.startswith(other + "/") or other.startswith(root + "/"):
                raise fail(where, f"{root} overlaps root {other}: roots must not contain one another")
        roots.append(root)
    return tuple(roots)


def _patterns(value: Any, name: str, fail: Any, *, required: bool) -> tuple[str, ...]:
    if value is None and not required:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or (required and not value):
        raise fail(name, "must be a non-empty list of glob patterns" if required else "must be a list of globs")
    patterns: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise fail(f"{name}[{index}]", "must be a string")
        try:
            PathMatcher([item])
        except GlobError as exc:
            raise fail(f"{name}[{index}]", str(exc)) from exc
        patterns.append(item)
    return tuple(patterns)


def _duration(value: Any, name: str, fail: Any) -> float:
    if isinstance(value, bool):
        raise fail(name, "must be a duration like 1h, 2d or 30m")
    try:
        return parse_duration(str(value)).total_seconds()
    except ValueError as exc:
        raise fail(name, str(exc)) from exc


def _count(value: Any, name: str, fail: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(name, f"must be a whole number of at least {minimum}")
    return value


def _size(value: Any, name: str, fail: Any, *, minimum: int) -> int:
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise fail(name, str(exc)) from exc
    if size < minimum:
        raise fail(name, f"must be at least {minimum} bytes")
    return size


def _truncate(value: Any, fail: Any) -> TruncateLogs | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise fail("truncate_logs", "must be a mapping with patterns, over_bytes and keep_tail_bytes")
    unknown = sorted(str(key) for key in value if key not in _TRUNCATE_KEYS)
    if unknown:
        raise fail(f"truncate_logs.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_TRUNCATE_KEYS))})")
    for key in sorted(_TRUNCATE_KEYS):
        if key not in value:
            raise fail(f"truncate_logs.{key}", "missing")
    patterns = _patterns(value["patterns"], "truncate_logs.patterns", fail, required=True)
    over = _size(value["over_bytes"], "truncate_logs.over_bytes", fail, minimum=1)
    keep = _size(value["keep_tail_bytes"], "truncate_logs.keep_tail_bytes", fail, minimum=0)
    if keep >= over:
        raise fail("truncate_logs.keep_tail_bytes", "must be smaller than over_bytes")
    return TruncateLogs(patterns=patterns, over_bytes=over, keep_tail_bytes=keep)
