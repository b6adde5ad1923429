"""Glob patterns of cleanup policies, matched against paths relative to a policy root. Pure.

- A pattern without '/' matches the file's name in any directory: ``*.tmp``, ``core.[0-9]*``.
- A pattern with '/' matches the whole relative path, one component at a time: ``*``, ``?`` and
  ``[...]`` never match a '/', and a ``**`` component matches any number of directories (zero
  included): ``cache/*``, ``**/checkpoints/*.pt``, ``runs/*/tmp/**``.
- Matching is case-sensitive; ``*`` matches names that start with a dot too.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence


class GlobError(ValueError):
    """A pattern that cannot be used."""


def _check(pattern: str) -> None:
    if not pattern:
        raise GlobError("a pattern must not be empty")
    if "\0" in pattern:
        raise GlobError("a pattern must not contain NUL")
    if pattern.startswith("/"):
        raise GlobError(f"{pattern!r}: patterns are relative to the policy's roots (no leading '/')")
    if pattern.endswith("/"):
        raise GlobError(f"{pattern!r}: patterns match files (no trailing '/')")
    if any(part in ("", ".", "..") for part in pattern.split("/")):
        raise GlobError(f"{pattern!r}: no empty, '.' or '..' components")


class PathMatcher:
    """Any-of a list of patterns."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        name_patterns = []
        self._paths: list[tuple[re.Pattern[str] | None, ...]] = []
        for pattern in self.patterns:
            _check(pattern)
            if "/" not in pattern:
                name_patterns.append(pattern)
            else:
                self._paths.append(
                    tuple(None if part == "**" else re.compile(fnmatch.translate(part)) for part in pattern.split("/"))
                )
        self._names = re.compile("|".join(fnmatch.translate(p) for p in name_patterns)) if name_patterns else None

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def matches(self, rel_path: str) -> bool:
        if self._names is not None and self._names.match(rel_path.rpartition("/")[2]):
            return True
        if self._paths:
            parts = rel_path.split("/")
            return any(_match(compiled, 0, parts, 0) for compiled in self._paths)
        return False


def _match(pattern: Sequence[re.Pattern[str] | None], pi: int, parts: Sequence[str], si: int) -> bool:
    while pi < len(pattern):
        current = pattern[pi]
        if current is None:  # '**': any number of directories; as the last component, at least the file
            first = si + 1 if pi == len(pattern) - 1 else si
            return any(_match(pattern, pi + 1, parts, k) for k in range(first, len(parts) + 1))
        if si >= len(parts) or not current.match(parts[si]):
            return False
        pi += 1
        si += 1
    return si == len(parts)
