"""`remediate serve`: gunicorn in front of its Flask app; the server's executor in a process of its own
(`_RemediateArbiter`). (`remediate agent` serves itself: remediate.agent.server.)

The CLI's process checks everything that can fail before forking (token, playbooks,
database and schema upgrade), so a bad config is one clear line at start-up,
not a crash loop of workers; then it imports the app and becomes gunicorn's master. Its children
(HTTP workers, the executor process) are forked from it and share the pages of the modules it imported:
a memory cgroup charges a shared page once (PSS, docs/benchmarks.md). Each child builds its own app or
executor from those modules (no database connection crosses a fork).

Process layout: the gunicorn master (arbiter) forks `workers` HTTP workers
(remediate.serve.httpworker: slow clients hold no thread) and one executor process
running `executor_threads` threads. HTTP workers never execute steps, so a stalled
or killed HTTP worker cannot interrupt one. The master restarts the executor
process if it dies or stops beating (its runs are recovered like after any crash) and, on SIGTERM,
stops it with `Executor.stop()` within `graceful_timeout`. A worker that queued
runs wakes the executor with a datagram on a UNIX socket in a private directory;
a lost datagram costs one `poll_interval` at most.

Reload (remediate.live): SIGHUP to the master, or POST /-/reload (which SIGHUPs it), re-reads the playbooks.
The master keeps its set when a file is invalid (and logs which and why); else it holds the new set, forks
new HTTP workers with it and stops the old ones gracefully (gunicorn's own SIGHUP), and tells the executor
process, which re-reads them without stopping: its runs go on with the steps they were stored with.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

from remediate.config.settings import Settings
from remediate.executor.beat import ExecutorBeat, SyncBeat
from remediate.serve.httpworker import worker_class
from remediate.serve.lifetime import ChildExitsHere, die_with_parent, end_child, owned_tempdir, worker_dies_with_master
from remediate.serve.reload import ReloadOnHup, reload_by_master, reload_executor

if TYPE_CHECKING:
    from remediate.live import LiveSet

log = logging.getLogger("remediate.serve")


WAKE_SOCKET = "executor-wake.sock"
EXECUTOR_BEAT = "executor-heartbeat"
NODE_CACHE_BEAT = "node-cache-sync"
"""The executor's node cache marks each sync here (remediate.kube.nodecache): its age is in /readyz."""
SLURM_CACHE_BEAT = "slurm-cache-sync"
"""The executor's Slurm node cache marks each read here (remediate.slurm.nodecache): its age is in /readyz."""
"""The executor process's heartbeat file (remediate.executor.beat), beside the wake socket."""
EXECUTOR_START_GRACE = 60.0
"""Seconds a new executor process has to beat for the first time (imports, the store opened, recovery started)
before its master replaces it; after that, it must beat at least once per lease."""
GRACEFUL_TIMEOUT = 15
EXECUTOR_RESTART_DELAY = 1.0
"""Seconds between restarts of an executor process that keeps dying (e.g. a database it cannot open)."""


def executor_waker(path: Path) -> Callable[[], None]:
    """Wakes the executor process from an HTTP worker: one datagram, never blocking, errors ignored.

    The executor also polls every `poll_interval`, so a datagram lost (executor restarting, queue
    full) only delays the run by that much.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)

    def wake() -> None:
        with contextlib.suppress(OSError):
            sock.sendto(b"w", str(path))

    return wake


def _listen_for_wakeups(path: Path, wake: Any, stopping: threading.Event) -> socket.socket:
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    umask = os.umask(0o077)  # only this user may wake the executor
    try:
        sock.bind(str(path))
    finally:
        os.umask(umask)

    def loop() -> None:
        while not stopping.is_set():
            try:
                sock.recv(64)
            except OSError:
                return
            wake()

    threading.Thread(target=loop, name="remediate-wake", daemon=True).start()
    return sock


def _executor_process(
    settings: Settings, wake_path: Path, arbiter_pid: int, listeners: list[Any], live: LiveSet
) -> int:
    """Body of the executor process (forked by the master, which holds `live`): run the executor until SIGTERM or
    the master dies; SIGHUP re-reads the live set."""
    # The fork copied the master's state: its listening sockets (not ours to hold open) and its signal
    # handlers, which would queue our signals in the master's pipe.
    for listener in listeners:
        with contextlib.suppress(OSError):
            listener.close()
    stopping, reload_asked = threading.Event(), threading.Event()
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, lambda *_: stopping.set())
    signal.signal(signal.SIGHUP, lambda *_: reload_asked.set())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # blocked by the master across the fork
    from remediate.serve.proctitle import set_title

    set_title("executor")
    # This process sends (notify, Kubernetes, the agents) from several threads at once, each importing requests
    # on its first send (remediate.outbound.lazyhttp). Two first imports at once can see it half initialised
    # ("cannot import name 'parse_dict_header' from partially initialized module 'requests.utils'", a failed
    # notify step while the node cache made its first LIST): loaded here, once, before any thread starts.
    import requests  # noqa: F401

    from remediate.services import build_services  # not server.py: the executor process serves no HTTP
    from remediate.store import DEFAULT_BUSY_TIMEOUT, WalCheckpointer

    # Nobody waits on an answer here: the executor's writes wait as long as before (a request's 503 bound
    # would only turn a moment of contention into a failed step).
    # This process checkpoints SQLite's write-ahead log for every process of the server (store.checkpoints).
    services = build_services(
        live.over(settings),
        store_busy_timeout=DEFAULT_BUSY_TIMEOUT,
        commit_checkpoints=False,
        playbooks=live.playbooks,
        upgrade=False,  # the master's preflight did: a database away now is waited out, not a failed start
    )
    executor, announcer = services.executor, services.announcer
    beat = executor_beat(wake_path)
    beat.beat()
    executor.on_beat = beat.beat  # from the heartbeat thread, every heartbeat interval (remediate.executor.beat)
    synced = node_cache_beat(wake_path)
    synced.reset()
    if services.kube is not None:  # the k8s.* actions' node cache lives here: the HTTP workers show its age
        services.kube.node_cache().on_sync = synced.beat
        if services.kube.configured and services.engine.reads_nodes():
            # Watched from the start, as a controller's informer is: the first alert's cordon finds the view
            # current instead of waiting for a whole list of the cluster (a minute on 10,000 nodes).
            services.kube.node_cache().start()
    slurm_synced = slurm_cache_beat(wake_path)
    slurm_synced.reset()
    if services.slurm is not None:  # the same for Slurm's: the executor's one sinfo --json per interval
        cache = services.slurm
        cache.on_sync = lambda: slurm_synced.synced(cache.status().nodes)
        if services.slurm.client.configured and services.engine.reads_nodes("slurm"):
            services.slurm.start()
    checkpointer = WalCheckpointer(services.store.database.checkpoint)
    # The workers' datagram: runs were queued or approved (the executor), some may await approval (the announcer).
    sock = _listen_for_wakeups(wake_path, services.wake, stopping)
    executor.start()
    if announcer is not None:
        announcer.start()
    pruner = history_pruner(settings, services.store, services.engine.playbooks)
    if pruner is not None:
        pruner.start()
    checkpointer.start()
    try:
        while not stopping.wait(1.0):
            if os.getppid() != arbiter_pid:
                log.warning("the master process is gone: executor stopping")
                break
            if reload_asked.is_set():
                reload_asked.clear()
                reload_executor(settings, functools.partial(_apply_live, settings, services, pruner))
    finally:
        checkpointer.stop(timeout=1.0)
        if pruner is not None:
            pruner.stop(timeout=1.0)  # it stops between two batches; a batch is short
        if announcer is not None:
            announcer.stop(timeout=1.0)  # a message being sent is recorded as unconfirmed (store.announcements)
        executor.stop(timeout=GRACEFUL_TIMEOUT - 3.0)  # within the master's wait for it
        if services.slurm is not None:
            services.slurm.stop(timeout=1.0)  # a sinfo in flight is not waited for: the process ends
        sock.close()
        services.store.close()
    return 0


def _apply_live(settings: Settings, services: Any, pruner: Any, live: LiveSet) -> None:
    """A reload in the executor process: its engine's set, and the cooldowns the pruner keeps history for.
    Its runs need nothing: each runs the steps stored with it, never its playbook again."""
    services.engine.playbooks = live.playbooks
    live.apply_to(services.engine.registry)
    services.metrics.playbooks_from_zero(live.playbooks)  # the runs of a playbook added count from 0
    if pruner is not None:
        pruner.keep = retention_keep(settings, live.playbooks)


def node_cache_beat(wake_path: Path) -> ExecutorBeat:
    """The file the executor process's node cache marks each sync in (the same 8-byte monotonic time)."""
    return ExecutorBeat(wake_path.parent / NODE_CACHE_BEAT)


def slurm_cache_beat(wake_path: Path) -> SyncBeat:
    """The file the executor process's Slurm node cache marks each successful read in, with its nodes."""
    return SyncBeat(wake_path.parent / SLURM_CACHE_BEAT)


def executor_beat(wake_path: Path) -> ExecutorBeat:
    """The executor process's heartbeat file, in the server's private directory beside the wake socket."""
    return ExecutorBeat(wake_path.parent / EXECUTOR_BEAT)


def describe_exit(status: int | None) -> str:
    """How a child process ended, from its waitpid status (None: collected by another wait, unknown)."""
    if status is None:
        return "exited (its exit status was collected elsewhere)"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return f"exited with status {code}"


PRUNE_EVERY = 3600.0
"""Seconds between two prunes of the history by the executor process (when `retention` is set)."""
PRUNE_FIRST_AFTER = 5.0
"""... and after its start: a server restarted more often than hourly (rollouts) still prunes."""


def history_pruner(settings: Settings, store: Any, playbooks: Any, *, every: float = PRUNE_EVERY) -> Any:
    """The executor process's periodic prune of the history (remediate.store.retention.Pruner); None when
    `retention` is off. It keeps at least what the guards read back: the 24 h max_attempts counts, the
    longest playbook cooldown, the breaker's window."""
    if not settings.store.retention:
        return None
    from remediate.store import Pruner

    keep = retention_keep(settings, playbooks)
    return Pruner(store.retention.prune, keep, every=every, first_after=min(every, PRUNE_FIRST_AFTER))


def retention_keep(settings: Settings, playbooks: Any) -> float:
    """Seconds of history the pruner keeps: `retention`, but never less than the guards read back."""
    from remediate.judging.guards import ATTEMPT_WINDOW

    cooldowns = [p.cooldown.total_seconds() for p in playbooks.playbooks]
    return max(settings.store.retention, ATTEMPT_WINDOW.total_seconds(), settings.kube.breaker.window, *cooldowns)


class _ReloadingArbiter(ReloadOnHup, ChildExitsHere, Arbiter):  # type: ignore[misc]
    """gunicorn's master; SIGHUP reloads the live set (remediate.serve.reload); its HTTP workers end in
    spawn_worker and die with it (remediate.serve.lifetime)."""

    def __init__(self, app: _GunicornApp, settings: Settings) -> None:
        self.remediate_settings = settings
        super().__init__(app)


class _RemediateArbiter(_ReloadingArbiter):
    """gunicorn's master, which also keeps one executor process running (a reload tells it: SIGHUP)."""

    def __init__(self, app: _GunicornApp, settings: Settings, wake_path: Path) -> None:
        self.wake_path = wake_path
        self.executor_pid = 0
        self._executor_started_at = 0.0
        self._executor_status: int | None = None
        """The executor process's waitpid status, once collected (see reap_workers)."""
        self.beat = executor_beat(wake_path)
        super().__init__(app, settings)

    def live_reloaded(self) -> None:
        # Not replaced (that would stop its running steps): it re-reads the playbooks itself.
        if self.executor_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.executor_pid, signal.SIGHUP)

    def manage_workers(self) -> None:
        super().manage_workers()
        self._manage_executor()

    def _manage_executor(self) -> None:
        if self.executor_pid and self._executor_alive():
            self._kill_executor_if_silent()
            return
        if time.monotonic() - self._executor_started_at < EXECUTOR_RESTART_DELAY:
            return
        self._executor_started_at = time.monotonic()
        self.beat.reset()
        # SIGHUP waits in the child until its handler is set: a reload right after the fork is not lost.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
            raise
        if pid:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
            self.executor_pid = pid
            self.log.info(
                "Started the executor process (pid: %s, %d threads)", pid, self.remediate_settings.executor.threads
            )
            return
        status = 1
        try:
            die_with_parent(self.pid)  # it stops as on SIGTERM at once, not at its next look at its parent
            status = _executor_process(self.remediate_settings, self.wake_path, self.pid, self.LISTENERS, self.app.live)
        except BaseException:
            log.exception("the executor process failed")
        finally:
            end_child(status)

    def _kill_executor_if_silent(self) -> None:
        """SIGKILL an executor process whose heartbeat is older than the lease (SIGSTOPped, hung): alive to
        waitpid, it would hold its runs and run nothing. Its runs are recovered as after any crash."""
        age = self.beat.age()
        lease = self.remediate_settings.executor.lease
        if age is None:  # no beat yet: starting up
            age, lease = time.monotonic() - self._executor_started_at, max(lease, EXECUTOR_START_GRACE)
        if age <= lease:
            return
        self.log.error(
            "The executor process (pid: %s) has not beaten for %.1fs (lease %gs): killing it", self.executor_pid,
            age, lease,
        )  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.executor_pid, signal.SIGKILL)

    def reap_workers(self) -> None:
        # gunicorn's waitpid(-1) would reap the executor process too and drop its status (a SIGKILLed executor
        # was logged "exited"): a waitpid of its own first keeps it, as gunicorn does for its dirty arbiter.
        self._collect_executor()
        super().reap_workers()

    def _collect_executor(self) -> None:
        if not self.executor_pid or self._executor_status is not None:
            return
        try:
            pid, status = os.waitpid(self.executor_pid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            self._executor_status = status

    def _executor_alive(self) -> bool:
        """False once the executor process ended (collected here or in reap_workers); says how it ended."""
        self._collect_executor()
        status = self._executor_status
        if status is None:
            try:
                os.kill(self.executor_pid, 0)
                return True
            except ProcessLookupError:
                pass  # collected by another wait: how it ended is unknown
        level = logging.WARNING if status == 0 else logging.ERROR
        self.log.log(
            level, "The executor process (pid: %s) %s; starting another", self.executor_pid, describe_exit(status)
        )
        _mark_metrics_dead(self.executor_pid)
        self.executor_pid = 0
        self._executor_status = None
        return False

    def stop(self, graceful: bool = True) -> None:
        executor = self.executor_pid
        if executor:
            try:
                os.kill(executor, signal.SIGTERM if graceful else signal.SIGQUIT)
            except ProcessLookupError:
                executor = 0
        super().stop(graceful)  # the HTTP workers, within graceful_timeout
        if executor:
            self._reap_executor(time.monotonic() + (self.cfg.graceful_timeout if graceful else 2.0))

    def _reap_executor(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                pid, _status = os.waitpid(self.executor_pid, os.WNOHANG)
            except ChildProcessError:
                pid = self.executor_pid
            if pid:
                self.executor_pid = 0
                return
            time.sleep(0.05)
        self.log.warning("The executor process (pid: %s) did not stop in time: killing it", self.executor_pid)
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.executor_pid, signal.SIGKILL)
            os.waitpid(self.executor_pid, 0)
        self.executor_pid = 0


def _mark_metrics_dead(pid: int) -> None:
    from prometheus_client import multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)


class _GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's messages through the root logger (remediate.logs.setup): one format on stderr, not gunicorn's
    own handler beside ours. Its access log stays off: the app logs each request with its request id."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger in (self.error_log, self.access_log):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True


class _GunicornApp(BaseApplication):  # type: ignore[misc]
    """gunicorn with these `options`, serving the Flask app `load_app(live)` builds in each worker (the master
    imported its modules; no database connection crosses a fork). `arbiter` builds the master."""

    def __init__(
        self,
        options: dict[str, Any],
        load_app: Callable[[LiveSet], Any],
        arbiter: Callable[[_GunicornApp], Any],
        live: LiveSet,
    ) -> None:
        self.options = options
        self.load_app = load_app
        self.arbiter = arbiter
        self.live = live
        """The live set the master holds: each child forked starts with it (no child reads the files itself)."""
        super().__init__()

    def run(self) -> None:
        try:
            self.arbiter(self).run()
        except RuntimeError as exc:
            print(f"\nError: {exc}\n", file=sys.stderr)
            sys.stderr.flush()
            sys.exit(1)

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)
        # gunicorn >= 27 opens a control socket in $HOME shared by every server of the user: not needed.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self) -> Any:
        return self.load_app(self.live)


def _server_app(settings: Settings, wake_path: Path | None, live: LiveSet | None = None) -> Any:
    """The server's Flask app in an HTTP worker, with its master's `live` set (None: read now, no master)."""
    from remediate.server import build_services, create_app

    # HTTP workers never run steps: runs they queue wake the executor process, when there is one.
    wake = executor_waker(wake_path) if wake_path is not None else _no_executor_to_wake
    # With an executor process, it checkpoints SQLite's log: a webhook's commit does not (store.checkpoints).
    beat = executor_beat(wake_path) if wake_path is not None else None
    services = build_services(
        settings if live is None else live.over(settings),
        wake=wake,
        commit_checkpoints=wake_path is None,
        executor_beat=beat,
        node_cache_beat=node_cache_beat(wake_path) if wake_path is not None else None,
        slurm_cache_beat=slurm_cache_beat(wake_path) if wake_path is not None else None,
        playbooks=live.playbooks if live is not None else None,
        reload=reload_by_master(os.getppid(), GRACEFUL_TIMEOUT) if live is not None else None,
        # A worker forked by a master checked the schema (preflight): it boots while the database is away
        # (503 until it is back); gunicorn would stop the whole server for a worker that fails to boot.
        upgrade=live is None,
    )
    return create_app(settings, services=services)


def _no_executor_to_wake() -> None:
    """The wake-up of HTTP workers with the executors off: nobody listens (the runs wait for an executor)."""


def preflight(settings: Settings) -> LiveSet:
    """Fail before forking: token, playbooks, database reachable and schema current; the live set read."""
    from remediate.config.burnin import check_burnin
    from remediate.config.settings import check_schedulers, check_server_credentials
    from remediate.live import read_live
    from remediate.services import pool_limits
    from remediate.store import Store

    check_server_credentials(settings.auth)
    check_schedulers(settings)
    # A table without the python / image its burn-in runs: every gate would fail at its burn-in.
    check_burnin(settings.burnin, settings.engine.schedulers)
    live = read_live(settings)
    from remediate.executor.dispatch import Dispatch

    dispatch = Dispatch.from_settings(settings)  # agents configured without a token: fail here, not in workers
    from remediate.executor.grafana import target_from_settings

    target_from_settings(settings.grafana)  # grafana_url without its token: the same
    settings.notify.slack_signing_secret()  # Slack's signing secret file missing or empty: the same
    if settings.gpu.backend == "simulated":
        # Chosen explicitly, so a missing or broken device file is a start-up error, not a failure of the
        # first GPU step. (NVML stays lazy: a server without GPUs sends GPU steps to node agents.)
        from remediate.gpu import open_backend

        open_backend(settings.gpu.backend, simulator_file=settings.gpu.simulator_file)
    store = Store.open(settings.store.url, pool=pool_limits(settings))
    store.close()
    from remediate.serve.startup import start_up_block

    for line in start_up_block(settings, live.names, dispatch.uses_agents):
        log.info(line)  # the server's own text, as written (an argument's `=` would be escaped: logsetup)
    if missing := live.unconfigured():  # once, with the block: the notify steps naming them will fail
        log.warning("%s", missing)
    return live


def run_server(settings: Settings) -> None:
    """`remediate serve`: every start-up check here, then this process imports the app and becomes gunicorn's
    master of its HTTP workers and the executor process, until stopped; then its temporary dirs go."""
    from remediate.logs.setup import configure_logging

    # One format for every process of the server (gunicorn's messages too: _GunicornLogger); alert data in a
    # message can never start a forged line.
    configure_logging(settings.log.format, settings.log.level)
    with contextlib.ExitStack() as owned:
        # Removed by this process only (remediate.serve.lifetime): an HTTP worker forked below never takes them along.
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # before any import of prometheus_client (it reads it once)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(owned.enter_context(owned_tempdir("remediate-metrics-")))
            # Its variable goes with it: a caller that goes on (the CLI's tests) must not read a deleted dir.
            owned.callback(os.environ.pop, "PROMETHEUS_MULTIPROC_DIR", None)
        private_dir = owned.enter_context(owned_tempdir("remediate-serve-"))  # 0700: only this user may wake it
        live = preflight(settings)
        if settings.auth.insecure_no_auth and not settings.auth.credentials():
            log.warning(
                "!!! --insecure-no-auth: the webhook and every mutating endpoint accept requests WITHOUT A TOKEN"
            )
        # The master imports what its children run (Flask, the store, the engine, the actions) once: the HTTP
        # workers and the executor process are forked with those pages and share them while they live (a memory
        # cgroup charges a shared page once; each child importing its own copy cost ~40 MiB more, docs/benchmarks.md).
        import remediate.server  # noqa: F401

        _serve(settings, private_dir, live)


def _serve(settings: Settings, private_dir: Path, live: LiveSet) -> None:
    """gunicorn's master, its HTTP workers and the executor process, until stopped."""
    from gunicorn import util

    from remediate.serve.proctitle import take_over_gunicorn_titles
    from remediate.serve.tls import gunicorn_tls_options

    take_over_gunicorn_titles(util)  # `remediate: master` and `remediate: http` in ps
    options = {
        **gunicorn_tls_options(settings.server),  # HTTPS when tls_cert_file and tls_key_file are set
        "bind": settings.server.bind,
        "workers": settings.server.workers,
        "threads": settings.server.threads,
        "worker_class": worker_class(settings.server.request_timeout),
        "timeout": math.ceil(settings.server.worker_timeout),  # gunicorn takes whole seconds
        "post_fork": worker_dies_with_master,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "child_exit": lambda _server, worker: _mark_metrics_dead(worker.pid),
        "accesslog": None,  # the app logs one line per request (remediate.server.requestlog)
        "errorlog": "-",
        "loglevel": settings.log.level,
        "logger_class": _GunicornLogger,
        "proc_name": "remediate",
    }
    if not settings.executor.threads:  # gunicorn's own master; the workers wake nobody (no process listens)
        _GunicornApp(
            options, lambda now: _server_app(settings, None, now), lambda app: _ReloadingArbiter(app, settings), live
        ).run()
        return
    wake_path = private_dir / WAKE_SOCKET
    _GunicornApp(
        options,
        lambda now: _server_app(settings, wake_path, now),
        lambda app: _RemediateArbiter(app, settings, wake_path),
        live,
    ).run()
