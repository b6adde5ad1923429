"""The spellings of the training library's previous API that still work for one release, each with a
DeprecationWarning that names the new one (docs/training-protocol.md, "The job-facing API").

- names imported from `remediate.training` that now live in their own module (the package's `_MOVED`, in
  its ``__init__``, so that a missing attribute never loads this module; the server's protocol types among
  them: the package namespace is the job's);
- `TrainingControl(wake_signal=..., heartbeat_interval=..., ...)`: those keywords are `ControlOptions` fields
  now, and ``handlers=`` is `TrainingControl.add_handler` (`split_options`);
- ``control.inbox``, ``control.outbox``, ``control.job_file``: the job's parts, private now (`LegacyAttributes`).

Everything here goes in the next release.
"""

from __future__ import annotations

import warnings
from dataclasses import fields, replace
from typing import Any

from remediate.training.inbox import Inbox
from remediate.training.jobfile import JobFile
from remediate.training.options import ControlOptions
from remediate.training.outbox import Outbox

OPTION_KEYWORDS = tuple(field.name for field in fields(ControlOptions))
"""The constructor keywords that became `ControlOptions` fields."""


def split_options(
    owner: str, options: ControlOptions | None, keywords: dict[str, Any], *, stacklevel: int
) -> tuple[ControlOptions, dict[str, Any]]:
    """The options and the ``handlers=`` dict that the old keywords of `owner`'s constructor ask for (warned).

    `keywords` are the ones the new signature does not take; any other than the old ones is a TypeError, as
    with a plain signature. The old keywords win over the fields of `options` when both are given.
    `stacklevel`: the caller's frames above this function, so that the warning names the job's own line.
    """
    unknown = sorted(set(keywords) - set(OPTION_KEYWORDS) - {"handlers"})
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")
    moved = {name: keywords[name] for name in OPTION_KEYWORDS if name in keywords}
    handlers: dict[str, Any] = keywords.get("handlers") or {}
    advice = []
    if moved:
        spelled = ", ".join(f"{name}=..." for name in moved)
        advice.append(f"{owner}({spelled}) is deprecated: pass options=ControlOptions({spelled})")
    if "handlers" in keywords:
        advice.append(f"{owner}(handlers=...) is deprecated: call control.add_handler(kind, handler) for each")
    if advice:
        warnings.warn(
            "; ".join(advice) + " (the old keywords stop working in the next release)",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )
    return replace(options or ControlOptions(), **moved), handlers


def _warn_private(name: str) -> None:
    warnings.warn(
        f"TrainingControl.{name} is internal and stops being readable in the next release: pending() and wait() "
        "tell whether a command waits, acks lists what the job answered",
        DeprecationWarning,
        stacklevel=3,
    )


class LegacyAttributes:
    """The job's parts `TrainingControl` used to leave public, still readable for one release (warned)."""

    _inbox: Inbox
    _outbox: Outbox
    _job_file: JobFile

    @property
    def inbox(self) -> Inbox:
        _warn_private("inbox")
        return self._inbox

    @property
    def outbox(self) -> Outbox:
        _warn_private("outbox")
        return self._outbox

    @property
    def job_file(self) -> JobFile:
        _warn_private("job_file")
        return self._job_file
