"""Everything one process of `remediate serve` runs on, wired from the settings: store, registry, playbooks,
engine, executor, announcer, metrics (`build_services`).

Apart from server.py (the HTTP app) because the executor process builds the same services and serves no
HTTP, as do the CLI's commands that open the store.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.actions.messages import run_page_url
from remediate.actions.slurm.common import slurm_node_cache
from remediate.breaker import CircuitBreaker, limits_from_settings
from remediate.config.settings import Credential, Settings, check_server_credentials
from remediate.executor.announce import Announcer
from remediate.executor.beat import ExecutorBeat, SyncBeat
from remediate.executor.dispatch import Dispatch
from remediate.executor.grafana import Annotator, target_from_settings
from remediate.executor.loop import Executor
from remediate.judging.engine import Engine
from remediate.judging.waves import NodeWaves
from remediate.kube.agents import own_namespace
from remediate.kube.client import KubeClient
from remediate.kube.enroll import AgentEnrollment
from remediate.live import LiveSet
from remediate.metrics import Metrics, multiprocess_mode
from remediate.playbooks.loading import load_playbooks
from remediate.playbooks.model import PlaybookSet
from remediate.slurm import SlurmNodeCache
from remediate.store import PoolLimits, Store


@dataclass
class Services:
    """Everything a request handler may use, built once per process by `build_services` (an HTTP worker hands
    them to `create_app`; the executor process runs them)."""

    settings: Settings
    store: Store
    engine: Engine
    executor: Executor
    metrics: Metrics
    metrics_registry: CollectorRegistry | None
    wake: Callable[[], None]
    """Tells the executor that runs were queued or approved (in `remediate serve`: the executor process)."""
    credentials: tuple[Credential, ...] = ()
    """Every accepted token (see Settings.credentials); empty only with insecure_no_auth."""
    announcer: Announcer | None = None
    """Sends the chat message of each run that starts awaiting approval; started in the executor process."""
    agent_enrollment: AgentEnrollment | None = None
    """Hands agent pods their node's credential (POST /v1/agent-credential); None unless agents are found
    through Kubernetes (agent_selector) and the master agent token is set."""
    executor_beat: ExecutorBeat | None = None
    """The executor process's heartbeat (in `remediate serve`): its age is in /readyz and /metrics."""
    kube: KubeClient | None = None
    """This process's Kubernetes client: the k8s.* actions' and the waves' (one node cache, one watch)."""
    node_cache_beat: ExecutorBeat | None = None
    """When the executor is another process: the file its node cache marks each sync in (its age: /readyz)."""
    reload: Callable[[LiveSet], bool] | None = None
    """How POST /-/reload applies a set it read (in `remediate serve`: the master replaces the HTTP workers);
    None: this process alone serves, its engine takes the set."""
    slurm: SlurmNodeCache | None = None
    """This process's Slurm node cache (and its client): the slurm.* actions' (one sinfo --json per interval)."""
    slurm_cache_beat: SyncBeat | None = None
    """When the executor is another process: the file its Slurm node cache marks each read in (/readyz)."""

    def apply(self, live: LiveSet) -> bool:
        """Applies a live set read by POST /-/reload; False when it was not applied (`reload` says why)."""
        if self.reload is not None:
            return self.reload(live)
        self.engine.playbooks = live.playbooks
        live.apply_to(self.engine.registry)
        self.metrics.playbooks_from_zero(live.playbooks)
        self.metrics.reload.applied(time.time())
        return True


def pool_limits(settings: Settings) -> PoolLimits:
    """The connection pool of each process on a server database, from the settings."""
    return PoolLimits(settings.store.pool_size, settings.store.max_overflow)


def build_services(
    settings: Settings,
    *,
    wake: Callable[[], None] | None = None,
    store_busy_timeout: float | None = None,
    commit_checkpoints: bool = True,
    executor_beat: ExecutorBeat | None = None,
    playbooks: PlaybookSet | None = None,
    reload: Callable[[LiveSet], bool] | None = None,
    upgrade: bool = True,
    node_cache_beat: ExecutorBeat | None = None,
    slurm_cache_beat: SyncBeat | None = None,
) -> Services:
    """Everything a process needs; `wake` replaces the in-process executor's wake-up (HTTP workers).
    `playbooks`: the set its master holds (`remediate serve`: read once there, reloaded there); else read now.
    `commit_checkpoints=False`: the executor process checkpoints SQLite's log apart (store.checkpoints).

    The store's writers wait `store_busy_timeout` (default: the setting, for requests) for the lock.
    `upgrade=False`: the schema is the master's (`remediate serve`'s preflight checked and upgraded it), so
    nothing here connects: a child forked while the database is away boots, answers 503 and recovers with it.
    """
    credentials = tuple(check_server_credentials(settings.auth))
    metrics_registry = None if multiprocess_mode() else CollectorRegistry()
    metrics = Metrics(metrics_registry)
    client = kube_client(settings)
    slurm = slurm_node_cache(settings.slurm, on_command=metrics.slurm_command)
    registry = default_registry(settings, client, slurm)
    if playbooks is None:
        playbooks = load_playbooks(settings.engine.playbooks, registry)
    store = Store.open(
        settings.store.url,
        busy_timeout=settings.store.busy_timeout if store_busy_timeout is None else store_busy_timeout,
        pool=pool_limits(settings),
        commit_checkpoints=commit_checkpoints,
        upgrade=upgrade,
    )
    store.database.on_write_error = metrics.store_write_failed
    public_url = settings.notify.public_url
    run_link = None if public_url is None else functools.partial(run_page_url, public_url)
    target = target_from_settings(settings.grafana)  # grafana_url, grafana_token_file; None: no annotations
    listeners = [] if target is None else [Annotator(target, run_link=run_link, on_outcome=metrics.annotation)]
    metrics.count_from_zero(playbooks, annotations=target is not None)
    if not multiprocess_mode():  # this process alone serves; under `remediate serve` its master records it
        metrics.reload.applied(time.time())
    executor = Executor(
        store=store,
        registry=registry,
        settings=settings.executor,
        metrics=metrics,
        dispatch=Dispatch.from_settings(
            settings,
            on_agent_error=metrics.agent_call_failed,
            on_agent_call=metrics.agent_call_finished,
            slurm=slurm,
        ),
        breaker=CircuitBreaker(
            store.breaker.ledger, store.breaker.view, limits=limits_from_settings(settings.kube.breaker)
        ),
        on_run_finished=listeners,
    )
    announcer = Announcer(
        store=store,
        registry=registry,
        poll_interval=max(settings.executor.poll_interval, ANNOUNCE_POLL_MIN),
        on_outcome=metrics.approval_announcement,
    )
    wake = wake or _waking(executor.wake, announcer.wake)
    engine = engine_for(settings, store, playbooks, registry, on_queued=wake, kube=client, slurm=slurm)
    return Services(
        settings,
        store,
        engine,
        executor,
        metrics,
        metrics_registry,
        wake,
        credentials,
        announcer,
        agent_enrollment(settings, client),
        executor_beat,
        client,
        node_cache_beat,
        reload,
        slurm,
        slurm_cache_beat,
    )


def engine_for(
    settings: Settings,
    store: Store | None,
    playbooks: PlaybookSet,
    registry: ActionRegistry,
    *,
    on_queued: Callable[[], None] | None = None,
    kube: KubeClient | None = None,
    slurm: SlurmNodeCache | None = None,
) -> Engine:
    """The engine as `settings` make it: the server's, dry-run's (`store` None: an empty history) and replay's
    (a scratch store) judge alike, staged rollouts' waves included. `kube`, `slurm`: the process's Kubernetes
    client and Slurm node cache, the ones its registry's actions use (one watch, one sinfo per interval)."""
    return Engine(
        store=store,
        playbooks=playbooks,
        registry=registry,
        settings=settings.engine,
        on_queued=on_queued,
        breaker_stale_horizon=settings.kube.breaker.stale_horizon,
        waves=node_waves(settings, kube, slurm),
    )


def node_waves(settings: Settings, client: KubeClient | None = None, slurm: SlurmNodeCache | None = None) -> NodeWaves:
    """Where a staged rollout reads nodes' waves: `rollout_nodes`, else the label through the Kubernetes API
    (the k8s.* actions' cluster settings; the client connects on the first read, only with a rollout), or the
    Slurm feature or partition from the Slurm node cache (`slurm`, the process's; else one of the waves' own,
    polling from its first read, only with a Slurm rollout)."""
    if client is None:
        client = kube_client(settings)
    cache = slurm if slurm is not None else slurm_node_cache(settings.slurm)
    return NodeWaves(lambda: client, dict(settings.engine.rollout_nodes), slurm=lambda: cache)


def kube_client(settings: Settings) -> KubeClient:
    """The process's one Kubernetes client (it connects on first use): the k8s.* actions, the waves and the agent
    enrollment share it, so a process holds one node cache and one watch."""
    kube = settings.kube
    return KubeClient(kubeconfig=kube.kubeconfig, context=kube.context, request_timeout=kube.request_timeout)


def agent_enrollment(settings: Settings, client: KubeClient | None = None) -> AgentEnrollment | None:
    """The server's side of POST /v1/agent-credential (remediate.kube.enroll), when agents are found through
    Kubernetes: the same API client as agent discovery and the k8s.* actions."""
    agent = settings.agent
    master = agent.resolved_token()
    if not agent.selector or not master:
        return None
    return AgentEnrollment(
        client or kube_client(settings),
        master=master,
        namespace=agent.namespace or own_namespace(),
        audience=agent.audience,
        daemonset=agent.daemonset,
        service_account=agent.service_account,
    )


ANNOUNCE_POLL_MIN = 1.0
"""The announcer's slowest look for runs awaiting approval between wake-ups (a lost one costs this)."""


def _waking(*wakes: Callable[[], None]) -> Callable[[], None]:
    """One wake-up for the executor and the announcer of this process: a run stored may await approval."""

    def wake() -> None:
        for each in wakes:
            each()

    return wake
