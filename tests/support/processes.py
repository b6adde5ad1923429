"""What the tests read about a real process from /proc: its children."""

from __future__ import annotations

from pathlib import Path


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is `pid` now (any of its threads may have forked them)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # exited meanwhile
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found
