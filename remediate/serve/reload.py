"""The reload of `remediate serve` (remediate.live), in each of its processes.

The master (`ReloadOnHup`, mixed into serving's gunicorn arbiters) reads the set on SIGHUP and, when it is
valid, holds it, tells the executor process and lets gunicorn replace the HTTP workers; an HTTP worker's
POST /-/reload asks its master (`reload_by_master`); the executor process re-reads the set without stopping
(`reload_executor`). The master records each outcome, and the start's read as the first success, in the
remediate_config_last_reload_* gauges (remediate.metrics.ReloadGauges).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from remediate.config.settings import Settings
from remediate.live import RELOAD_ERRORS, LiveSet, read_live
from remediate.logs.audit import audit_event
from remediate.serve.httpworker import TOLD_TO_STOP

if TYPE_CHECKING:
    from remediate.metrics import ReloadGauges

log = logging.getLogger("remediate.serve")


class ReloadOnHup:
    """Mixed into gunicorn's master (before gunicorn's Arbiter), whose SIGHUP then re-reads the live set
    first: an invalid file keeps the running set and replaces nothing; a valid set goes to the app (`app.live`,
    what each child forked from now on starts with), then gunicorn's own SIGHUP forks new HTTP workers and
    stops the old ones gracefully."""

    remediate_settings: Settings
    app: Any
    log: Any
    _reload_gauges: ReloadGauges | None = None

    def start(self) -> None:
        # The set the preflight read is the first success: recorded before any worker is forked.
        self.reload_gauges().applied(time.time())
        super().start()  # type: ignore[misc]  # gunicorn's Arbiter

    def reload_gauges(self) -> ReloadGauges:
        """This master's remediate_config_last_reload_* gauges."""
        if self._reload_gauges is None:
            # Imported here, not at the top: prometheus_client reads PROMETHEUS_MULTIPROC_DIR once, at its import,
            # and `remediate serve` sets it after importing this module (launcher.run_server).
            from remediate.metrics import ReloadGauges

            self._reload_gauges = ReloadGauges(None)
        return self._reload_gauges

    def handle_hup(self) -> None:
        try:
            live = read_live(self.remediate_settings)
        except RELOAD_ERRORS as exc:
            self.reload_gauges().refused()
            audit_event(
                "reload", level=logging.ERROR, outcome="refused", error=str(exc), running=self.app.live.describe()
            )
            return
        self.reload_gauges().applied(time.time())
        self.app.live = live
        audit_event("reload", outcome="applied", playbooks=len(live.playbooks), loaded=live.describe())
        if missing := live.unconfigured():
            self.log.warning("%s", missing)
        self.live_reloaded()
        super().handle_hup()  # type: ignore[misc]  # gunicorn's Arbiter, after this in the MRO

    def live_reloaded(self) -> None:
        """Tells the children a reload does not replace (none here) to re-read the live set."""


def reload_by_master(master: int, wait: float) -> Callable[[LiveSet], bool]:
    """POST /-/reload in an HTTP worker forked by `master`: SIGHUP to the master, which reads the set again
    and replaces the workers. True once it told this worker to stop (the workers forked since serve with the
    new set); False if it did not within `wait` seconds (a file changed again: the master's log says why)."""

    def reload(_live: LiveSet) -> bool:
        if os.getppid() != master:  # the master is gone: this worker is an orphan about to stop
            return False
        os.kill(master, signal.SIGHUP)
        return TOLD_TO_STOP.wait(wait)

    return reload


def reload_executor(settings: Settings, apply: Callable[[LiveSet], None]) -> None:
    """The executor process's part of a reload: the set read again and given to `apply`, or kept (logged)."""
    try:
        live = read_live(settings)
    except RELOAD_ERRORS as exc:
        log.error("executor process: reload refused, the running playbooks kept: %s", exc)
        return
    apply(live)
    log.info("executor process: reloaded %s", live.describe())
