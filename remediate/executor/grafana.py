"""Grafana annotations of executed runs: remediations line up with the GPU graphs (docs/grafana.md).

An `Annotator` is one of the executor's `on_run_finished` listeners. A run that executed (succeeded or
failed; not a dry-run's plan, not a rejected alert or a duplicate, which never become runs that finish)
is queued and posted to `{grafana_url}/api/annotations` by one thread of its own, with a short timeout
and a couple of tries: Grafana being slow or down never delays a run nor fails one. What could not be
posted is logged and counted (`remediate_grafana_annotations_total{outcome}`).

Grafana renders an annotation's text as HTML: every value in it that an alert can set (alertname,
target, playbook, the run's error) is inert text (remediate.outbound.inert.html_text). A redirect is never
followed: the token would go to a URL the settings did not name.
"""

from __future__ import annotations

import html
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from remediate.errors import ConfigError
from remediate.outbound import inert
from remediate.runs import FinishedRun, RunStatus

if TYPE_CHECKING:
    from remediate.config.settings import GrafanaSettings

log = logging.getLogger("remediate.grafana")

ANNOTATED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED})
"""The run ends that get an annotation: runs that executed their steps."""
POSTED, FAILED, DROPPED = "posted", "failed", "dropped"


@dataclass(frozen=True)
class GrafanaTarget:
    """Where annotations go: a Grafana base URL (settings `grafana_url`) and its service-account token."""

    url: str
    token: str = field(repr=False)


def target_from_settings(settings: GrafanaSettings) -> GrafanaTarget | None:
    """The Grafana of settings `grafana_url` and `grafana_token_file`; None when unset, ConfigError when
    the URL has no token (checked before the server forks: a worker would fail at every start)."""
    if settings.url is None:
        return None
    token = settings.resolved_token()
    if token is None:
        raise ConfigError("grafana_url is set but grafana_token_file is not: Grafana needs a service-account token")
    return GrafanaTarget(settings.url, token)


def annotation(run: FinishedRun, run_link: Callable[[int], str] | None = None) -> dict[str, Any]:
    """The body Grafana's POST /api/annotations takes for `run` (an organisation-wide annotation: no
    dashboard, so every dashboard that shows annotations by tag shows it)."""
    started = run.started_at if run.started_at is not None else run.finished_at
    text = (
        f"remediate: {inert.html_text(run.playbook)} on {inert.html_text(run.target)}: "
        f"{inert.html_text(run.status)} (alert {inert.html_text(run.alertname)}, run {run.run_id})"
    )
    if run.error:
        text += f"\n{inert.html_text(run.error[:500])}"
    if run_link is not None:
        link = run_link(run.run_id)
        text += f'\n<a href="{html.escape(link)}">run {run.run_id}</a>'  # Grafana renders HTML: quoted, not markup
    return {
        "time": int(started * 1000),
        "timeEnd": int(run.finished_at * 1000),
        "tags": ["remediate", f"playbook:{run.playbook}", f"node:{run.target}", f"status:{run.status}"],
        "text": text,
    }


@dataclass(eq=False)
class Annotator:
    """Posts an annotation per executed run, off the executor's path (see the module docstring)."""

    target: GrafanaTarget
    _: KW_ONLY
    run_link: Callable[[int], str] | None = None
    """Builds the link to a run's page (from the `public_url` setting); None: no link."""
    on_outcome: Callable[[str], None] = lambda outcome: None
    timeout: float = 3.0
    tries: int = 3
    retry_wait: float = 0.5
    max_queued: int = 1000
    _queue: queue.Queue[dict[str, Any]] = field(init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _pid: int | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self._queue = queue.Queue(self.max_queued)

    def __call__(self, run: FinishedRun) -> None:
        if run.status not in ANNOTATED or run.mode == "dry-run":
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait(annotation(run, self.run_link))
        except queue.Full:  # Grafana has been unreachable for long: the run matters more than its annotation
            log.warning("grafana annotation of run %s dropped: %d are waiting already", run.run_id, self._queue.qsize())
            self.on_outcome(DROPPED)

    def _ensure_thread(self) -> None:
        # Started on first use, in the process that uses it: the server builds its services before
        # forking the executor process, and a thread does not survive a fork.
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._loop, name="remediate-grafana", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            body = self._queue.get()
            try:
                self.on_outcome(POSTED if self._post(body) else FAILED)
            except Exception:  # never let one bad annotation stop the thread
                log.exception("grafana annotation failed")
            finally:
                self._queue.task_done()

    def _post(self, body: dict[str, Any]) -> bool:
        import requests  # here, not at the top: see remediate.outbound.lazyhttp

        url = f"{self.target.url}/api/annotations"
        headers = {"Authorization": f"Bearer {self.target.token}", "Content-Type": "application/json"}
        problem = ""
        for attempt in range(1, self.tries + 1):
            try:
                response = requests.post(url, json=body, headers=headers, timeout=self.timeout, allow_redirects=False)
            except requests.RequestException as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    return True
                problem = f"HTTP {response.status_code} {response.text[:200].strip()}"
                if 300 <= response.status_code < 400:
                    where = response.headers.get("Location", "(no Location)")[:300]
                    problem = f"HTTP {response.status_code} redirecting to {where}: not followed; set grafana_url to it"
                if response.status_code < 500 and response.status_code != 429:
                    break  # a refused token or a bad body: trying again gets the same answer
            if attempt < self.tries:
                time.sleep(self.retry_wait * attempt)
        log.warning("grafana annotation not posted to %s (%s): %s", url, body["tags"][1], problem)
        return False

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until every queued annotation was posted or given up (tests, and a graceful stop)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True
