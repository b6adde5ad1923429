"""Every exception remediate raises on purpose, in one tree.

    RemediateError
    ├── ConfigError            settings that cannot work (missing token, bad URL, ...)
    ├── PayloadError           a webhook body that is not AlertManager's v4 JSON (-> HTTP 400)
    ├── PlaybookError          a playbook file that does not load or validate
    ├── ParamsError            step params that do not render or do not fit the action's schema
    ├── ActionError            an action failed while planning or executing
    │   ├── RetryableActionError   ... and trying again later may succeed
    │   ├── PartialFailure         ... after doing part of its work: `result` says what, kept with the step
    │   ├── OutcomePending         ... after handing its change over: it may still happen (reconciled later)
    │   └── AmbiguousActionError   ... after the request may have reached its target: never retried
    ├── UnknownRunError        no run with that id
    ├── StoreUnavailable       the database cannot take a write now (-> HTTP 503)
    │   ├── StoreBusy              its write lock (or a pooled connection) was not free within store_busy_timeout
    │   ├── StoreFileReplaced      its file was deleted or replaced under the running process
    │   ├── StoreConflict          another writer (a replica) stored the same alert occurrence first
    │   ├── StoreUnreachable       its server is down, restarting, failing over or not reachable
    │   └── StoreRefused           it refused the transaction for a reason that may pass: disk full, read-only,
    │                              an I/O error, out of resources, a serialization failure or deadlock
    ├── RunStateError          the run is not in a state that allows the operation
    ├── ClaimLostError         an executor's claim on a run is gone (another executor took it over)
    └── DatabaseCopyError      `remediate db copy` refused (source not this schema, target not empty) or failed

The docstring of each class is its default message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def located(message: str, *where: str) -> str:
    """`file F, playbook 'p', field f: message`, leaving out the empty parts of `where`."""
    place = ", ".join(part for part in where if part)
    return f"{place}: {message}" if place else message


class RemediateError(Exception):
    """remediate failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(RemediateError):
    """The configuration is not usable."""


class PayloadError(RemediateError):
    """The webhook payload is not a valid AlertManager v4 notification."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}" if field else message)


class PlaybookError(RemediateError):
    """A playbook is not valid."""

    def __init__(self, message: str, *, file: str = "", playbook: str = "", field: str = "") -> None:
        self.file, self.playbook, self.field = file, playbook, field
        super().__init__(
            located(message, file and f"file {file}", playbook and f"playbook {playbook!r}", field and f"field {field}")
        )


class ParamsError(RemediateError):
    """Step parameters are not valid."""


class ActionError(RemediateError):
    """The action failed."""


class RetryableActionError(ActionError):
    """The action failed, and trying again may succeed."""


class PartialFailure(ActionError):
    """The action failed after doing part of its work (e.g. some of a node's jobs checkpointed).

    `result` (JSON-able) says what was done and what was not; the executor records it as the failed
    step's result, so the history keeps it.
    """

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = dict(result)


class AmbiguousActionError(ActionError):
    """The action failed after its request may have reached the target (a time-out waiting for the answer,
    a connection dropped after sending, a 5xx): it may have been applied. Never retried for an action that
    is not idempotent."""

    maybe_applied = True


class UnknownRunError(RemediateError):
    """No such run."""


class RunStateError(RemediateError):
    """The run is not in a state that allows this."""


class AlreadyPaused(RemediateError):
    """Remediation is paused already: a new pause would replace who paused it and why (give force to replace)."""

    def __init__(self, by: str, reason: str, since: float | None) -> None:
        why = f": {reason}" if reason else ""
        super().__init__(f"remediation is already paused by {by}{why}; pause again with force to replace who and why")
        self.by = by
        self.reason = reason
        self.since = since


class NotPaused(RemediateError):
    """A resume while remediation is not paused: nothing changed (a resume records who resumed, so a resume of
    nothing would record a change that did not happen)."""

    def __init__(self) -> None:
        super().__init__("remediation is not paused; nothing to resume")


class OutcomePending(ActionError):
    """The action handed its change over and gave up waiting: it may still happen.

    `follow_up` (JSON-able) says what to look for; the executor keeps it with the failed step
    and `Executor.reconcile_pending` later asks the action's plan what became of it.
    """

    def __init__(self, message: str, follow_up: dict[str, Any]) -> None:
        super().__init__(message)
        self.follow_up = dict(follow_up)


class ClaimLostError(RemediateError):
    """This executor's claim on the run is gone: another executor took the run over. Write nothing more."""


class StoreUnavailable(RemediateError):
    """The database cannot take a write now."""


class StoreBusy(StoreUnavailable):
    """The database's write lock was not free in time."""


class StoreUnreachable(StoreUnavailable):
    """The database server cannot be reached: down, restarting, failing over, or the network is."""


class StoreRefused(StoreUnavailable):
    """The database refused the transaction for a reason of its own that may pass (its disk is full, its file
    read-only or failing, the server out of resources, a serialization failure or a deadlock): nothing of it
    was committed, and the same transaction may succeed later."""


class StoreFileReplaced(StoreUnavailable):
    """The database file was deleted or replaced while open: writes would go to a file nobody can read again."""


class StoreConflict(StoreUnavailable):
    """Another writer stored a run for the same alert occurrence first (the unique dedupe key): the
    transaction was rolled back whole, and judging the notification again sees that run."""


class DatabaseCopyError(RemediateError):
    """The database copy cannot be done: nothing was written to the target."""


def parsed_by(parse: Callable[[Any], object], *errors: type[Exception]) -> Callable[[Any], str | None]:
    """A check that a value is one `parse` accepts: the message of its error (one of `errors`), or None
    (a `Param.check` of an action's schema, a template's syntax check)."""

    def check(value: Any) -> str | None:
        try:
            parse(value)
        except errors as exc:
            return str(exc)
        return None

    return check
