"""Slurm's hostlist expressions (`gpu-[01-03,07],vm`), expanded to node names. Pure.

`squeue --json` gives the nodes of a job as one such expression (v0.0.38's `nodes`), so finding the jobs on a
node means expanding it; asking `scontrol show hostnames` would be one more command per job.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """`a[1-2],b` -> [`a[1-2]`, `b`]: commas outside brackets separate hosts."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part for part in parts if part]


def expand(expression: str) -> tuple[str, ...]:
    """Every host name `expression` stands for, in order; ValueError for one that is not a hostlist."""
    hosts: list[str] = []
    for part in _split_top(expression.strip()):
        head, bracket, rest = part.partition("[")
        if not bracket:
            hosts.append(part)
            continue
        inside, closing, tail = rest.partition("]")
        if not closing or "[" in tail:
            raise ValueError(f"not a hostlist: {expression!r}")
        for item in inside.split(","):
            found = _RANGE.fullmatch(item)
            if found is None:
                raise ValueError(f"not a hostlist range {item!r} in {expression!r}")
            low, high = found.group(1), found.group(2) or found.group(1)
            width = len(low) if low.startswith("0") else 0
            hosts.extend(f"{head}{number:0{width}d}{tail}" for number in range(int(low), int(high) + 1))
    return tuple(hosts)
