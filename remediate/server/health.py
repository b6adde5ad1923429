"""What probes and Prometheus read, without a token: /healthz (the process answers), /readyz (a
notification can be stored now) and /metrics (the exposition; `report_window: 0` keeps node and job
names, and the store read behind them, off it)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint, Response, jsonify

from remediate.errors import StoreUnavailable
from remediate.metrics import ReliabilityCollector, exposition
from remediate.server.answers import error
from remediate.services import Services


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("health", __name__)
    store, settings = services.store, services.settings
    reliability = (
        ReliabilityCollector(
            store,
            window=settings.report.window,
            max_age=settings.report.cache,
            job_labels=settings.report.job_labels,
        )
        if settings.report.window > 0
        else None
    )

    @bp.get("/healthz")
    def healthz() -> Any:
        return jsonify({"status": "ok"})

    @bp.get("/readyz")
    def readyz() -> Any:
        # Ready means a notification can be stored now: the file is still ours and a write commits
        # (not only a read: a read-only, full or deleted database still answers reads).
        try:
            store.database.probe_write()
        except StoreUnavailable as exc:
            return error(503, "store_unavailable", str(exc))
        except sa.exc.SQLAlchemyError as exc:
            return error(503, "store_unreachable", f"{exc.__class__.__name__}: {getattr(exc, 'orig', '') or ''}")
        ready: dict[str, Any] = {"status": "ready", "playbooks": len(services.engine.playbooks)}
        if services.executor_beat is not None:
            # Shown, not judged: the master replaces an executor process whose beat is older than the lease.
            age = services.executor_beat.age()
            ready["executor"] = {
                "heartbeat_age_s": None if age is None else round(age, 3),
                "lease_s": settings.executor.lease,
            }
        return jsonify(ready)

    @bp.get("/metrics")
    def metrics() -> Any:
        body = exposition(services.metrics_registry, store, reliability, services.executor_beat)
        return Response(body, mimetype="text/plain; version=0.0.4")

    return bp
