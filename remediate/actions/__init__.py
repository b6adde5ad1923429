"""Actions, one module per family, and the registry the server builds once at start-up."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from remediate.actions.base import Action, ActionMemory, ActionRegistry, InMemoryMemory, StepContext, Where
from remediate.actions.disk import DiskCleanupAction
from remediate.actions.gpu import RestorePowerLimitAction, SetPowerLimitAction
from remediate.actions.log import LogAction
from remediate.actions.notify import NotifyWebhookAction

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

    settings = settings or Settings()

    @cache
    def gpu_backend() -> GpuBackend:
        return open_backend(settings.gpu_backend, simulator_file=settings.gpu_simulator_file)

    return ActionRegistry(
        [
            LogAction(),
            NotifyWebhookAction(),
            SetPowerLimitAction(gpu_backend),
            RestorePowerLimitAction(gpu_backend),
            DiskCleanupAction(PolicySource(settings.cleanup_policies_file)),
        ]
    )
