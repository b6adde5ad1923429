"""POST /webhook: AlertManager's notifications (v4 payload), the one hot path of the HTTP layer.

The answer is 200 only once the notification, its decisions and its runs are committed (the engine's
`ingest_body`); the runs execute in the executor, never inside the request. Every refusal is counted in
remediate_webhook_rejected_total by its status.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import sqlalchemy as sa
from flask import Blueprint, Response, request

from remediate.config.settings import WEBHOOK
from remediate.errors import PayloadError, StoreUnavailable
from remediate.judging.engine import IngestResult
from remediate.logs.audit import audit_event
from remediate.runs import Decision
from remediate.server.answers import error
from remediate.server.auth import requires
from remediate.services import Services

log = logging.getLogger("remediate.server")

LARGE_BODY_BYTES = 1024 * 1024
"""A webhook body over this (or of unknown length) is parsed one at a time per worker process:
parsing costs about 11-13 bytes of memory per body byte (docs/benchmarks.md), so with several
threads per worker, large bodies at once would multiply a worker's peak."""


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("webhook", __name__)
    settings, metrics, store, engine = services.settings, services.metrics, services.store, services.engine
    large_body = threading.BoundedSemaphore(1)

    @bp.post("/webhook")
    @requires(services, WEBHOOK)
    def webhook() -> Any:
        length = request.content_length
        if length is not None and length > settings.server.max_body_bytes:
            metrics.rejected.labels("413").inc()
            return error(413, "payload_too_large", f"body over {settings.server.max_body_bytes} bytes")
        if request.mimetype != "application/json":
            metrics.rejected.labels("415").inc()
            return error(415, "unsupported_media_type", "send Content-Type: application/json")
        if length is not None and length <= LARGE_BODY_BYTES:
            return ingest()
        if not large_body.acquire(timeout=settings.store.busy_timeout):
            metrics.rejected.labels("503").inc()
            return error(503, "busy", "another large notification is being stored; AlertManager will retry")
        try:
            return ingest()
        finally:
            large_body.release()

    def ingest() -> Any:
        body = request.get_data(cache=False)
        if len(body) > settings.server.max_body_bytes:
            metrics.rejected.labels("413").inc()
            return error(413, "payload_too_large", f"body over {settings.server.max_body_bytes} bytes")
        try:
            result = engine.ingest_body(body, received_at=time.time())
            # The commit went to the file this process has open; if the path names another file now
            # (deleted, replaced), nobody will ever read it: AlertManager must send it again.
            store.database.check_file()
        except PayloadError as exc:
            metrics.rejected.labels("400").inc()
            return error(400, "invalid_payload", exc.detail, field=exc.field)
        except StoreUnavailable as exc:
            log.error("could not store a notification: %s", exc)
            metrics.rejected.labels("503").inc()
            return error(503, "store_unavailable", f"{exc}; AlertManager will retry")
        except sa.exc.SQLAlchemyError:
            log.exception("could not store a notification")
            metrics.rejected.labels("503").inc()
            return error(503, "store_unavailable", "the notification could not be stored; AlertManager will retry")
        metrics.record_ingest(result)
        _audit(result)
        return Response(result.summary_json(), mimetype="application/json")

    return bp


DECISION_LEVELS = {
    Decision.REJECTED: logging.WARNING,
    Decision.TRUNCATED: logging.WARNING,
    Decision.DUPLICATE: logging.DEBUG,
    Decision.UNMATCHED: logging.DEBUG,
}
"""A decision event's level when not INFO: a run that could not be made, and alerts AlertManager left out of
the notification (max_alerts), are warnings; AlertManager's re-sends
(duplicates) and alerts no playbook matches would be most of the lines of a busy server (~70 us each)."""


def _audit(result: IngestResult) -> None:
    """The notification's audit events: its counts, then each (alert, playbook) pair's decision."""
    audit_event(
        "alert_received", notification_id=result.notification_id, status=result.status, alerts=result.alerts,
        firing=result.alert_statuses.get("firing", 0), resolved=result.alert_statuses.get("resolved", 0),
        decisions=len(result.decisions), runs_queued=result.runs_queued,
        truncated_alerts=result.truncated_alerts, notification_reason=result.notification_reason,
    )  # fmt: skip
    for d in result.decisions:
        audit_event(
            "decision", level=DECISION_LEVELS.get(d.decision, logging.INFO), notification_id=result.notification_id,
            alertname=d.alertname, fingerprint=d.fingerprint, playbook=d.playbook, target=d.target,
            decision=d.decision.value, reason=d.reason, run_id=d.run_id,
        )  # fmt: skip
