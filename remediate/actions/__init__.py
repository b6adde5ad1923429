"""Actions, one module per family, and the registry the server builds once at start-up."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from remediate.actions.base import Action, ActionMemory, ActionRegistry, InMemoryMemory, StepContext, Where
from remediate.actions.disk import DiskCleanupAction
from remediate.actions.gpu import RestorePowerLimitAction, SetPowerLimitAction
from remediate.actions.k8s import KubeOptions, kube_actions
from remediate.actions.log import LogAction
from remediate.actions.notify import NotifyWebhookAction
from remediate.actions.training import training_actions

if TYPE_CHECKING:
    from remediate.config import Settings
    from remediate.gpu import GpuBackend

__all__ = [
    "Action",
    "ActionMemory",
    "ActionRegistry",
    "InMemoryMemory",
    "StepContext",
    "Where",
    "default_registry",
]


def default_registry(settings: Settings | None = None) -> ActionRegistry:
    """Every shipped action, built with its dependencies from `settings` (defaults when None).

    Backends open lazily: a server on a node without GPUs starts fine, and a GPU step
    there fails with NVML's own clear error.
    """
    from remediate.config import Settings
    from remediate.disk import PolicySource
    from remediate.gpu import open_backend
    from remediate.gpu.floor import with_floor
    from remediate.kube import KubeClient

    settings = settings or Settings()

    @cache
    def gpu_backend() -> GpuBackend:
        backend = open_backend(settings.gpu_backend, simulator_file=settings.gpu_simulator_file)
        # The node's own power floor (an agent's limit, whatever the server asks).
        return with_floor(
            backend, floor_watts=settings.gpu_power_floor_watts, floor_percent=settings.gpu_power_floor_percent
        )

    # Built now, connected on first use (the official client is imported then): see remediate.kube.client.
    kube = KubeClient(
        kubeconfig=settings.kubeconfig, context=settings.kube_context, request_timeout=settings.kube_request_timeout
    )
    kube_options = KubeOptions(node_labels=settings.kube_node_labels, node_selector=settings.breaker_node_selector)

    return ActionRegistry(
        [
            LogAction(),
            NotifyWebhookAction(),
            SetPowerLimitAction(gpu_backend),
            RestorePowerLimitAction(gpu_backend),
            DiskCleanupAction(PolicySource(settings.cleanup_policies_file)),
            *training_actions(settings.training_control_root, settings.training_job_labels),
            *kube_actions(lambda: kube, kube_options),
        ]
    )
