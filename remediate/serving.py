"""`remediate serve`: gunicorn in front of the Flask app, with the executor inside every worker.

The master checks everything that can fail before forking (token, playbooks,
database and schema upgrade), so a bad config is one clear line at start-up,
not a crash loop of workers. Each worker builds its own app (no preload: no
database connection crosses a fork) and starts its executor threads once its
app is loaded.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from gunicorn.app.base import BaseApplication

from remediate.config import Settings

log = logging.getLogger("remediate.serve")


class _GunicornApp(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)
        # gunicorn >= 27 opens a control socket in $HOME shared by every server of the user: not needed.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self) -> Any:
        from remediate.server import create_app

        return create_app(self.settings)


def _post_worker_init(worker: Any) -> None:
    services = worker.wsgi.extensions["remediate"]
    if services.settings.executor_threads:
        services.executor.start()


def _worker_exit(_server: Any, worker: Any) -> None:
    app = getattr(worker, "wsgi", None)
    if app is not None and "remediate" in getattr(app, "extensions", {}):
        app.extensions["remediate"].executor.stop(timeout=5)


def _child_exit(_server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def preflight(settings: Settings) -> None:
    """Fail before forking: token, playbooks, database reachable and schema current."""
    from remediate.actions import default_registry
    from remediate.config import check_server_credentials
    from remediate.playbooks import load_playbooks
    from remediate.store import Store

    check_server_credentials(settings)
    playbooks = load_playbooks(settings.playbooks, default_registry(settings))
    from remediate.runners import Dispatch

    dispatch = Dispatch.from_settings(settings)  # agents configured without a token: fail here, not in workers
    if settings.gpu_backend == "simulated":
        # Chosen explicitly, so a missing or broken device file is a start-up error, not a failure of the
        # first GPU step. (NVML stays lazy: a server without GPUs sends GPU steps to node agents.)
        from remediate.gpu import open_backend

        open_backend(settings.gpu_backend, simulator_file=settings.gpu_simulator_file)
    store = Store.open(settings.database_url)
    store.close()
    log.info(
        "%d playbooks from %s; store %s; mode %s; node steps: %s",
        len(playbooks),
        settings.playbooks,
        settings.database_url,
        settings.mode,
        "on the agents of their nodes" if dispatch.uses_agents else "here (no agents configured)",
    )


def run_server(settings: Settings) -> None:
    from remediate.logsafe import configure_logging

    configure_logging()  # alert data in a message can never start a forged log line
    preflight(settings)
    if settings.insecure_no_auth and not settings.credentials():
        log.warning("!!! --insecure-no-auth: the webhook and every mutating endpoint accept requests WITHOUT A TOKEN")
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    own_metrics_dir = metrics_dir is None
    if own_metrics_dir:
        metrics_dir = tempfile.mkdtemp(prefix="remediate-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    options = {
        "bind": settings.bind,
        "workers": settings.workers,
        "threads": settings.threads,
        "worker_class": "gthread" if settings.threads > 1 else "sync",
        "timeout": 60,
        "graceful_timeout": 15,
        "post_worker_init": _post_worker_init,
        "worker_exit": _worker_exit,
        "child_exit": _child_exit,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "remediate",
    }
    try:
        _GunicornApp(settings, options).run()
    finally:
        if own_metrics_dir and metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
