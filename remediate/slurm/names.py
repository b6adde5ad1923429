"""What may stand for a Slurm node or partition in a command line: checked before any name reaches argv.

Slurm itself accepts almost anything as a NodeName, and its commands read a name as a *hostlist expression*:
`gpu-[01-64]` or `a,b` names many nodes, so a label value passed on as it is could drain a rack. A name here is
one host name (RFC 1123 labels, as Slurm's NodeName and NodeHostName are in practice: letters, digits, '-', '_'
and '.', starting and ending with a letter or digit, at most 253 characters), never a list or a range. Pure.
"""

from __future__ import annotations

import re

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_PARTITION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def check_node_name(name: str) -> str | None:
    """Why `name` cannot name one Slurm node, or None."""
    if not name:
        return "is empty"
    if len(name) > 253:
        return f"is {len(name)} characters long; a node name has at most 253"
    if not _HOST.fullmatch(name):
        return (
            f"{name!r} is not a single Slurm node name (a host name: letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit; no hostlist such as gpu-[01-04] or a,b)"
        )
    return None


def check_partition_name(name: str) -> str | None:
    """Why `name` cannot name one Slurm partition, or None."""
    if not _PARTITION.fullmatch(name):
        return f"{name!r} is not a partition name (1-64 letters, digits, '_', '.' and '-'; no list)"
    return None
