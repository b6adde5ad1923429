"""Why AlertManager sent a notification: the webhook body's `notification_reason` (AlertManager 0.32+).

AlertManager's dedup stage picks the reason (notify/dedup_stage.go, `needsUpdate`) and the webhook sends
its `String()` (notify/notify.go): human words, not the Go constant names. Older AlertManagers (0.25, what
Debian ships) send no such field: the reason is then "" and nothing here applies.

The reason is one per notification, not per alert: "new alerts added" means some alerts of the group are
new, the rest re-sent. So the engine never judges by it (the occurrence, fingerprint and startsAt, tells a
re-send of an alert from a new firing, with or without it); it is recorded with the notification and
shown with each decision of it, so the history says "AlertManager re-sent this group" in its own words.
The values below are AlertManager's (0.32 to 0.34, unchanged), for readers and tests: any string is kept.
"""

from __future__ import annotations

from typing import Final

FIRST_NOTIFICATION: Final = "first notification"
NEW_ALERTS_IN_GROUP: Final = "new alerts added"
NEW_RESOLVED_ALERTS: Final = "some alerts resolved"
ALL_ALERTS_RESOLVED: Final = "all alerts resolved"
REPEAT_INTERVAL_ELAPSED: Final = "repeat interval elapsed"
UNKNOWN: Final = "unknown"
"""What AlertManager sends when its pipeline carried no reason (notify/util.go: ReasonUnknown)."""

MAX_REASON_LENGTH: Final = 64
"""A longer reason is cut to this (the store's column): AlertManager's are at most 23 characters, and a
wrong one must not make AlertManager re-send the notification forever (a 400 would)."""
