"""The one way a run awaiting approval is approved: POST /runs/<id>/approve, the run page's Approve button and
Slack's (remediate.server.slack) all come here, so each approval is recorded and audited alike."""

from __future__ import annotations

import time
from collections.abc import Callable

from remediate.logs.audit import audit_event
from remediate.store import Store


def approve_run(
    store: Store, wake: Callable[[], None], run_id: int, *, principal: str, via: str, by: str | None = None
) -> None:
    """The run leaves awaiting_approval for the queue, approved by `principal` (recorded as `by` when the API
    adds the caller's note to it), the audit event `approval` says who and `via` which door, and the executor is
    woken. UnknownRunError, RunStateError (it no longer waits) as the store raises them."""
    store.queue.approve(run_id, by=by or principal, now=time.time())
    audit_event("approval", principal=principal, run_id=run_id, via=via)
    wake()
