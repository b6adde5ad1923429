"""The signals remediate may send a Slurm job instead of requeueing it, and how a job asks for one. Pure.

Why a job asks in its comment: a job that handles a signal by checkpointing and requeueing itself (PyTorch
Lightning's SLURMEnvironment auto-requeue: `#SBATCH --signal=USR1@90`; submitit: USR2) loses the work since
its last checkpoint when `scontrol requeue` stops it. Slurm keeps the job's own `--signal` setting to itself
(22.05.8: neither `squeue --json` nor `scontrol -d -o show job` shows it), but it prints the job's comment
(`sbatch --comment`, `comment` in `squeue --json`) as written. So a job says which signal it wants with one
token of its comment: `remediate-signal=USR1` (`remediate-signal=none`: requeue it, whatever the step says).
Tokens are separated by white space or commas, so the comment can carry other words: `exp42
remediate-signal=USR1`.

The allow-list holds signals a job can catch and that leave it running when caught. Never KILL, STOP (neither
can be caught) nor the core-dumping ones (QUIT, ABRT, SEGV, ...): remediate never kills a job on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

JOB_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "CONT", "URG", "WINCH", "ALRM")
"""The signal names `scancel --signal=` takes (without SIG) that remediate may send a job."""
COMMENT_KEY = "remediate-signal"
"""The comment token's key: `remediate-signal=USR1`."""
OPT_OUT = "none"
"""`remediate-signal=none`: the job asks to be requeued, not signalled, whatever the step's `signal` param."""
_SEPARATORS = re.compile(r"[\s,]+")


def check_signal(name: object) -> str | None:
    """A problem with `name` as a signal remediate may send, or None."""
    if not isinstance(name, str) or name not in JOB_SIGNALS:
        return f"{name!r} is not one of the signals remediate sends a job: {', '.join(JOB_SIGNALS)}"
    return None


@dataclass(frozen=True)
class SignalAsk:
    """What a job's comment asks of remediate: a signal, an opt-out, or a token that cannot be honoured."""

    signal: str | None
    """The signal the job asked for; None: it asked for none (`remediate-signal=none`), or `problem`."""
    problem: str | None = None
    """Why the job's token is not honoured (an unknown signal, two different tokens): the job is then treated
    as if it had asked nothing, and the problem named in the result."""


def comment_signal(comment: str) -> SignalAsk | None:
    """What the job's comment asks (its `remediate-signal=` token); None when it carries no such token.

    The value is read case-insensitively and with or without SIG (`usr1`, `SIGUSR1`): a person writes
    `--comment` by hand, and a slip must not turn a checkpoint into a kill."""
    values = []
    for token in _SEPARATORS.split(comment):
        key, sep, value = token.partition("=")
        if sep and key.lower() == COMMENT_KEY:
            values.append(value.upper().removeprefix("SIG"))
    if not values:
        return None
    if len(set(values)) > 1:
        asks = " and ".join(f"{COMMENT_KEY}={value}" for value in dict.fromkeys(values))
        return SignalAsk(None, f"the job's comment asks {asks}: ignored")
    (value,) = set(values)
    if value == OPT_OUT.upper():
        return SignalAsk(None)
    if check_signal(value) is not None:
        return SignalAsk(None, f"the job's comment asks {COMMENT_KEY}={value}, not one of {', '.join(JOB_SIGNALS)}")
    return SignalAsk(value)
