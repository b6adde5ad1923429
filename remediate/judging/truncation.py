"""AlertManager's `max_alerts`: a notification that says it left alerts of its group out (`truncatedAlerts`).

AlertManager's webhook sends the first `max_alerts` alerts of a group and counts the rest in
`truncatedAlerts` (notify/webhook/webhook.go, `truncateAlerts`). remediate never sees those alerts: no
playbook runs for them, no resolved one undoes what a run did. The engine cannot recover them; what it
can do is say so where people look: one decision `truncated` in the history (with the notification's
first alert: the decisions table names an alert, and that alert is the group's), a WARNING log line, and
remediate_alerts_truncated_total. The fix is on AlertManager's side: `max_alerts: 0` on the receiver
(docs/install.md, "Register the receiver"). Pure logic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from remediate.intake.alerts import Notification

MAX_ALERTNAME: Final = 255
"""The decisions table's alertname column: a group of several alertnames lists them, cut to this."""
MAX_GROUP: Final = 512
"""The group as the reason names it, cut to this: label values may be 4 KiB each."""


@dataclass(frozen=True)
class Truncation:
    """What AlertManager said it left out of one notification."""

    dropped: int
    sent: int
    status: str
    group: str
    """The group's labels as AlertManager keys it (`{alertname="X", Hostname="gpu-07"}`), else its groupKey."""
    alertname: str
    fingerprint: str
    """The notification's first alert's: the decision is recorded with that alert."""

    @property
    def note(self) -> str:
        """The decision's reason and the log line's message (what was lost and the fix)."""
        return (
            f"AlertManager dropped {self.dropped} alerts of group {self.group} because of the receiver's "
            f"max_alerts (this {self.status} notification carried {self.sent} of {self.sent + self.dropped}): "
            "no playbook ran for them and none will undo for them; set max_alerts: 0 on the receiver"
        )


def truncation(notification: Notification) -> Truncation | None:
    """The notification's truncation, or None when AlertManager sent every alert of the group."""
    if notification.truncated_alerts <= 0 or not notification.alerts:
        return None
    names = sorted({alert.name for alert in notification.alerts})
    return Truncation(
        dropped=notification.truncated_alerts,
        sent=len(notification.alerts),
        status=notification.status,
        group=_group(notification),
        alertname=",".join(names)[:MAX_ALERTNAME],
        fingerprint=notification.alerts[0].fingerprint,
    )


def _group(notification: Notification) -> str:
    labels = notification.group_labels
    if labels:
        # As Go's model.LabelSet.String(): sorted, `name="value"`, joined by ", ".
        shown = "{" + ", ".join(f"{name}={json.dumps(labels[name])}" for name in sorted(labels)) + "}"
    else:
        shown = notification.group_key or "(no group key)"
    return shown if len(shown) <= MAX_GROUP else shown[:MAX_GROUP] + "..."
