"""What probes and Prometheus read, without a token: /healthz (the process answers), /readyz (a
notification can be stored now) and /metrics (the exposition; `report_window: 0` keeps node and job
names, and the store read behind them, off it)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint, Response, jsonify

from remediate.errors import StoreUnavailable
from remediate.kube.nodecache import MAX_STALENESS
from remediate.metrics import ReliabilityCollector, exposition
from remediate.server.answers import error
from remediate.services import Services
from remediate.slurm.nodecache import STALE_AFTER_POLLS


def node_cache_state(services: Services) -> dict[str, Any] | None:
    """The k8s.* actions' node cache (remediate.kube.nodecache): the executor process's, from the file it marks
    each sync in, else this process's own; None while no step has read it (nothing is watched)."""
    if services.node_cache_beat is not None:
        age = services.node_cache_beat.age()
        if age is None:
            return None
        return {"age_s": round(age, 3), "max_staleness_s": MAX_STALENESS, "fresh": age <= MAX_STALENESS}
    status = services.kube.node_cache_status() if services.kube is not None else None
    return None if status is None or not status.started else status.as_dict()


def slurm_cache_state(services: Services) -> dict[str, Any] | None:
    """The slurm.* actions' node cache (remediate.slurm.nodecache), as node_cache_state shows the Kubernetes one:
    the executor process's age from its beat file (its bound from the settings), else this process's own
    status; None before its first read (nothing is polled)."""
    bound = STALE_AFTER_POLLS * services.settings.slurm.poll_interval
    if services.slurm_cache_beat is not None:
        age, nodes = services.slurm_cache_beat.age(), services.slurm_cache_beat.nodes()
        if age is None:
            return None
        return {"age_s": round(age, 3), "max_staleness_s": bound, "fresh": age <= bound, "nodes": nodes}
    status = services.slurm.status() if services.slurm is not None else None
    return None if status is None or not status.synced else status.as_dict()


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
        if (cache := node_cache_state(services)) is not None:
            # Shown, not judged: a view past its bound fails the k8s steps that read it (retryable), nothing else.
            ready["node_cache"] = cache
        if (slurm_cache := slurm_cache_state(services)) is not None:
            # Shown, not judged either: past its bound the slurm.drain steps fail retryable, nothing else.
            ready["slurm_cache"] = slurm_cache
        return jsonify(ready)

    @bp.get("/metrics")
    def metrics() -> Any:
        body = exposition(
            services.metrics_registry,
            store,
            reliability,
            services.executor_beat,
            lambda: node_cache_state(services),
            lambda: slurm_cache_state(services),
        )
        return Response(body, mimetype="text/plain; version=0.0.4")

    return bp
