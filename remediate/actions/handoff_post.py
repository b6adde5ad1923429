"""What every hand-off action (k8s.handoff, slurm.handoff) shares: the post to a named sink, made by the
registry's `notify` action called as it is, and the params that say where and what to post.

Only the mark each scheduler keeps differs (an annotation on a Kubernetes node, the reason of a Slurm drain):
that stays in each action."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from remediate.actions.base import Action, ActionDeps
from remediate.actions.notify import TIMEOUT
from remediate.actions.notify_sink import NotifyAction
from remediate.actions.schema import Param
from remediate.errors import ActionError

POST_PARAMS: dict[str, Param] = {
    "sink": Param(str, required=True, static=True, doc="the sink of the `sinks` setting to post to"),
    "message": Param(
        str,
        default="",
        late=True,
        doc="the message to the sink, as notify's (rendered when the step runs: may read step.*, run.link)",
    ),
    "timeout": TIMEOUT,
}
"""The hand-off's post: to which sink, with which message, within which time."""


def notify_of(deps: ActionDeps) -> Callable[[], Action] | None:
    """The registry's `notify` action, looked up when called (a reload's sinks apply); None outside a registry."""
    peer = deps.peer
    return None if peer is None else lambda: peer(NotifyAction.name)


class PostsToSink:
    """Mixed into a hand-off action: `notify()` is the action it posts with, `posted(params)` what it posts."""

    name: ClassVar[str]
    _notify: Callable[[], Action] | None = None

    def notify(self) -> Action:
        if self._notify is None:
            raise ActionError(f"{self.name}: no notify action to post with (built outside a registry)")
        return self._notify()

    @staticmethod
    def posted(params: Mapping[str, Any]) -> dict[str, Any]:
        return {"sink": params["sink"], "message": params.get("message", ""), "timeout": params["timeout"]}
