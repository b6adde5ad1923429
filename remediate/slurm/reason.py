"""The reason remediate gives a node it drains, and how remediate knows the drain is its own. Pure.

The reason is the first thing an operator reads (`sinfo -R`, `scontrol show node`), so it says who, why and
where to look, in one line:

    remediate run 42: GPUXidCritical GPU 3 (xid 79)

`remediate run <id>` at its start is remediate's mark, and the only one: Slurm keeps no annotations, and the
reason is the one field a person who drains by hand overwrites. A drain whose reason does not start with it is
someone else's, and remediate never resumes it nor writes over it.

What the text may hold, checked against slurmctld 22.05.8: `scontrol update ... Reason=<one argv item>` keeps
quotes, '=', ';' and newlines as they are, and shows a newline in `scontrol show node` as a line break (a
reason that breaks the one-line output other tools parse). So only printable ASCII from a small set survives
here; whitespace runs become one space, anything else '_'. slurmctld sets no limit of its own, but slurmdbd
records each drain in its event table, whose `reason` column is a MySQL TINYTEXT (255 bytes): longer reasons
are cut there. REASON_MAX keeps the whole reason within it, cutting the note first, never the mark.
"""

from __future__ import annotations

import re

MARK = "remediate run"
REASON_MAX = 255
"""Bytes (ASCII: characters) of a reason: slurmdbd's event table keeps at most 255."""

_MARK = re.compile(rf"^{MARK} (\d+)(?::|$)")
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:,()/#@+%-]")
_SPACE = re.compile(r"\s+")


def safe_text(text: str) -> str:
    """`text` as one line of the characters a reason keeps: whitespace runs one space, anything else '_'."""
    return _UNSAFE.sub("_", _SPACE.sub(" ", text)).strip()


def drain_reason(run_id: int, *, alertname: str = "", gpu: str = "", note: str = "", limit: int = REASON_MAX) -> str:
    """`remediate run <id>: <alertname> GPU <gpu> (<note>)`, the empty parts left out, at most `limit` characters.

    The note comes last, so a reason too long loses the end of its note first, marked by `...`; the mark
    (a few dozen characters at most) is always whole.
    """
    head = f"{MARK} {run_id}"
    note = safe_text(note)
    parts = (safe_text(alertname), f"GPU {safe_text(gpu)}" if gpu.strip() else "", f"({note})" if note else "")
    body = " ".join(part for part in parts if part)
    reason = f"{head}: {body}" if body else head
    if len(reason) <= limit:
        return reason
    return reason[: max(len(head) + 1, limit - 3)].rstrip() + "..."


def drained_by_run(reason: str) -> int | None:
    """The run whose mark `reason` starts with; None: not a reason remediate wrote."""
    found = _MARK.match(reason)
    return int(found.group(1)) if found else None
