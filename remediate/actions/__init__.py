"""Actions, one module per family, and the registry the server builds once at start-up.

The registry keeps no list: `default_registry` imports every module of this package (and of
its subpackages) and registers each concrete `Action` subclass defined there that names itself
(`name` set on the class), built by its `from_deps`. A new action is therefore one module here
and nothing else.

May import: the backends (gpu, disk, kube, slurm), config, outbound, errors, runs, the breaker's interface and, of
intake, only the alert a step sees (intake.alertref); never the store, judging, the executor, HTTP or the CLI
(pyproject.toml's `actions` and `actions-no-intake` contracts).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

from remediate.actions.base import Action, ActionDeps, ActionRegistry, StepContext

if TYPE_CHECKING:
    from remediate.config.settings import Settings
    from remediate.gpu import GpuBackend
    from remediate.kube import KubeClient
    from remediate.slurm import SlurmNodeCache

__all__ = [
    "Action",
    "ActionRegistry",
    "StepContext",
    "action_classes",
    "default_registry",
]


def _subclasses(cls: type[Action]) -> list[type[Action]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


@cache
def action_classes() -> tuple[type[Action], ...]:
    """Every shipped action class, found by importing each module of this package.

    Only classes defined in this package count (a test's own Action subclass is not shipped), and only
    concrete ones that set `name` themselves (family bases such as KubeAction do not).
    """
    modules = {__name__} | {module.name for module in pkgutil.walk_packages(__path__, prefix=f"{__name__}.")}
    for name in sorted(modules):
        importlib.import_module(name)
    found = {
        cls
        for cls in _subclasses(Action)
        if cls.__module__ in modules and "name" in vars(cls) and not inspect.isabstract(cls)
    }
    return tuple(sorted(found, key=lambda cls: cls.name))


def default_registry(
    settings: Settings | None = None, kube: KubeClient | None = None, slurm: SlurmNodeCache | None = None
) -> ActionRegistry:
    """Every shipped action, built with its dependencies from `settings` (defaults when None). Built for a site's
    `settings`, it leaves the steps of the schedulers the site does not run out of the playbooks it loads
    (`schedulers`); without settings, every step loads.

    Backends open lazily: a server on a node without GPUs starts fine, and a GPU step
    there fails with NVML's own clear error.
    """
    from remediate.actions.slurm.common import slurm_node_cache
    from remediate.config.settings import Settings
    from remediate.gpu import open_backend
    from remediate.gpu.floor import with_floor
    from remediate.kube import KubeClient

    schedulers = None if settings is None else settings.engine.schedulers
    settings = settings or Settings()

    @cache
    def gpu_backend() -> GpuBackend:
        backend = open_backend(settings.gpu.backend, simulator_file=settings.gpu.simulator_file)
        # The node's own power floor (an agent's limit, whatever the server asks).
        return with_floor(
            backend, floor_watts=settings.gpu.power_floor_watts, floor_percent=settings.gpu.power_floor_percent
        )

    # Built now, connected on first use (the official client is imported then): see remediate.kube.client.
    # `kube` given: the process's one client, whose node cache the staged rollouts' waves share (one watch).
    client = kube or KubeClient(
        kubeconfig=settings.kube.kubeconfig,
        context=settings.kube.context,
        request_timeout=settings.kube.request_timeout,
    )

    def kube_client() -> KubeClient:
        return client

    # `slurm` given: the process's one node cache (one sinfo --json per interval, whatever reads it); built
    # here it starts on the first slurm step's read, so a process that runs none never polls.
    slurm_cache = slurm or slurm_node_cache(settings.slurm)

    def slurm_nodes() -> SlurmNodeCache:
        return slurm_cache

    registry = ActionRegistry(schedulers=schedulers)

    def deps(cls: type[Action]) -> ActionDeps:
        section = getattr(settings, cls.settings_section) if cls.settings_section else None
        return ActionDeps(
            settings=section,
            gpu_backend=gpu_backend,
            kube_client=kube_client,
            slurm_cache=slurm_nodes,
            peer=registry.get,
            burnin=settings.burnin,
        )

    for cls in action_classes():
        registry.register(cls.from_deps(deps(cls)))
    return registry
