"""`notify.teams`: an Adaptive Card to a Microsoft Teams incoming or Workflows webhook, linking to the run page.

The message and the POST are shared with notify.slack (remediate.actions.chat); this module says only
how the message looks in Teams.
"""

from __future__ import annotations

from typing import Any, ClassVar

from remediate import inert
from remediate.actions.chat import ChatMessage, ChatWebhookAction, teams_card


class NotifyTeamsAction(ChatWebhookAction):
    name: ClassVar[str] = "notify.teams"
    description: ClassVar[str] = (
        "Post an Adaptive Card to a Microsoft Teams (incoming or Workflows) webhook: what fired, the playbook's "
        "steps and their status so far, and a link to the run page (public_url); sent once, retried only when "
        "nothing was sent."
    )

    def render(self, message: ChatMessage) -> dict[str, Any]:
        return teams_card(message)

    def escape(self, text: str) -> str:
        return inert.teams(text)
