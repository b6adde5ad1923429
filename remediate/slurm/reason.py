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

A node remediate drained and then handed to a breakfix system (slurm.handoff) carries a hand-off reason,
the owner first so that `sinfo -R` says who has the node, and the run that handed it over last:

    breakfix: XID 79 still reported after a reset (from remediate run 42)

It no longer starts with the mark, so slurm.resume (which acts only on the mark) leaves the node to its owner;
`handed_to` reads it back, and the breaker keeps counting the node (the drain is still remediate's doing).
"""

from __future__ import annotations

import re
from typing import NamedTuple

MARK = "remediate run"
REASON_MAX = 255
"""Bytes (ASCII: characters) of a reason: slurmdbd's event table keeps at most 255."""

SELF = "remediate"
"""Not an owner: remediate itself."""
_OWNER = r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,62}"
_MARK = re.compile(rf"^{MARK} (\d+)(?::|$)")
_HANDED = re.compile(rf"^({_OWNER}):(?: .*?)? \(from {MARK} (\d+)\)$")
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


class HandedTo(NamedTuple):
    """Who has a node remediate handed over (`sinfo -R` shows the owner first), and the run that handed it."""

    owner: str
    run: int


def check_owner(owner: str) -> str | None:
    """Why `owner` cannot head a hand-off reason; None when it can. One word: the reason's `<owner>:` must read
    back as it was written, and a blank or ':' would end it early."""
    if not re.fullmatch(_OWNER, owner):
        return "must be 1-63 letters, digits or _.@+- starting with a letter or digit (e.g. breakfix)"
    if owner == SELF:
        return f"{SELF!r} is remediate itself: name the system the node is handed to"
    return None


def handoff_reason(owner: str, run_id: int, *, why: str = "", limit: int = REASON_MAX) -> str:
    """`<owner>: <why> (from remediate run <id>)`, at most `limit` characters; ValueError for an owner
    `check_owner` refuses. A reason too long loses the end of its `why` (marked `...`), never the owner nor
    the run."""
    if problem := check_owner(owner):
        raise ValueError(f"owner {owner!r} {problem}")
    head, tail = f"{owner}:", f" (from {MARK} {run_id})"
    why = safe_text(why)
    reason = f"{head} {why}{tail}" if why else f"{head}{tail}"
    if len(reason) <= limit:
        return reason
    room = max(0, limit - len(head) - len(tail) - len(" ..."))
    return f"{head} {why[:room].rstrip()}...{tail}"


def handed_to(reason: str) -> HandedTo | None:
    """Who has the node and which run handed it over, when `reason` is a hand-off reason; None otherwise."""
    found = _HANDED.match(reason)
    return HandedTo(found.group(1), int(found.group(2))) if found else None
