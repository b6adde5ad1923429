"""`scontrol -o show node NAME`, the fresh read of the one node a step decides on, parsed into a SlurmNode. Pure.

Why this command: on Slurm 22.05 `sinfo --json -n NAME` prints every node all the same, and `scontrol` has no
`--json` before 23.02, so the one read of one node is `scontrol -o show node NAME`: one line of `Key=value`
pairs, checked on 22.05.8:

    NodeName=gpu-01 ... NodeHostName=gpu-01 ... State=IDLE+DRAIN ... Partitions=train ...
    ... ExtSensorsTemp=n/s Reason=XID 79 on GPU 3 [root@2026-12-02T14:19:41]

Values may hold spaces (`OS=Linux 6.1 #1 SMP ...`, the reason), so a pair ends where the next ` Key=` starts,
except the reason: a person's reason may hold ` a=b` too, so it runs from `Reason=` to Slurm's own
` [user@time]` suffix (the last field on 22.05, or the end of the line). State is the base state and its flags
joined by `+` (`MIXED+DRAIN`, `DOWN+NOT_RESPONDING`), the same words `sinfo --json` gives in `state` and
`state_flags`.
"""

from __future__ import annotations

import re
import time

from remediate.slurm.errors import SlurmError
from remediate.slurm.model import SlurmNode

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s\[([^\s@\[\]]+)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\])?\s*$")
NULL = ("(null)", "N/A", "")
"""What scontrol writes for a field without a value."""


def _fields(line: str) -> dict[str, str]:
    keys = list(_KEY.finditer(line))
    ends = [following.start() for following in keys[1:]] + [len(line)] if keys else []
    return {this.group(1): line[this.end() : end].strip() for this, end in zip(keys, ends, strict=True)}


def _names(value: str) -> tuple[str, ...]:
    return () if value in NULL else tuple(part for part in value.split(",") if part)


def _epoch(stamp: str) -> int:
    """scontrol's local `YYYY-MM-DDTHH:MM:SS` as epoch seconds (0 when it is not one)."""
    try:
        return int(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        return 0


def parse_show_node(text: str, command: str = "scontrol -o show node") -> SlurmNode:
    """The node of one `scontrol -o show node NAME` answer; SlurmError for one without NodeName or State."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    head, _, reason_part = line.partition(" Reason=")
    fields = _fields(head)
    name, state = fields.get("NodeName", ""), fields.get("State", "")
    if not name or not state:
        raise SlurmError(f"{command}: no NodeName or State in its answer: {line[:200]!r}")
    reason, set_by, changed_at = "", None, 0
    if reason_part:
        found = _REASON.search("Reason=" + reason_part)
        if found is not None:
            reason = found.group(1).strip()
            set_by = found.group(2) if reason else None
            changed_at = _epoch(found.group(3)) if found.group(3) else 0
    base, *flags = state.split("+")
    return SlurmNode(
        name=name,
        hostname=fields.get("NodeHostName") or name,
        state=base.rstrip("*~#!%$@^-").lower() or "unknown",
        flags=frozenset(flag.upper() for flag in flags if flag),
        reason=reason,
        reason_set_by=set_by,
        reason_changed_at=changed_at,
        partitions=_names(fields.get("Partitions", "")),
        features=_names(fields.get("ActiveFeatures", "") or fields.get("AvailableFeatures", "")),
    )
