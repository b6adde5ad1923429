"""Actions, one module per family, and the registry the server builds once at start-up."""

from __future__ import annotations

from remediate.actions.base import Action, ActionRegistry, StepContext, Where
from remediate.actions.log import LogAction
from remediate.actions.notify import NotifyWebhookAction

__all__ = ["Action", "ActionRegistry", "StepContext", "Where", "default_registry"]


def default_registry() -> ActionRegistry:
    """Every shipped action, built with its default dependencies."""
    return ActionRegistry([LogAction(), NotifyWebhookAction()])
