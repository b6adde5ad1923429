"""`notify.slack`: a Block Kit message to a Slack incoming webhook, linking to the run page.

The message and the POST are shared with notify.teams (remediate.actions.chat); this module says only
how the message looks in Slack.
"""

from __future__ import annotations

from typing import Any, ClassVar

from remediate import inert
from remediate.actions.chat import ChatMessage, ChatWebhookAction, slack_blocks


class NotifySlackAction(ChatWebhookAction):
    name: ClassVar[str] = "notify.slack"
    description: ClassVar[str] = (
        "Post a Block Kit message to a Slack incoming webhook: what fired, the playbook's steps and their "
        "status so far, and a button to the run page (public_url); sent once, retried only when nothing was sent."
    )

    def render(self, message: ChatMessage) -> dict[str, Any]:
        return slack_blocks(message)

    def escape(self, text: str) -> str:
        return inert.slack(text)
