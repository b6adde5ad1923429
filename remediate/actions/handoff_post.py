"""What every hand-off action (k8s.handoff, slurm.handoff) shares: the post to a named sink, made by the
registry's `notify` action called as it is, and the params that say where and what to post.

Only the mark each scheduler keeps differs (an annotation on a Kubernetes node, the reason of a Slurm drain):
that stays in each action."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from remediate.actions.base import Action, ActionDeps, StepContext
from remediate.actions.notify import TIMEOUT
from remediate.actions.notify_sink import NotifyAction
from remediate.actions.schema import Param
from remediate.errors import ActionError
from remediate.runs import StepStatus


def step_names(value: Any) -> tuple[str, ...]:
    """The steps `after_failed` names: one name (the older form) or a list of them; none for empty."""
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(value or ())


def check_step_names(value: Any) -> str | None:
    """A `Param.check`: a step's name (empty: none, the default), or a list of step names (each non-empty)."""
    if isinstance(value, str):
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(name, str) and name.strip() for name in value):
        return f"must be a step's name or a list of step names, got {value!r}"
    return None


POST_PARAMS: dict[str, Param] = {
    "sink": Param(str, required=True, static=True, doc="the sink of the `sinks` setting to post to"),
    "message": Param(
        str,
        default="",
        late=True,
        doc="the message to the sink, as notify's (rendered when the step runs: may read step.*, run.link)",
    ),
    "timeout": TIMEOUT,
    "after_failed": Param(
        object,
        default="",
        static=True,
        check=check_step_names,
        type_name="str or list",
        doc="hand off only if this earlier step of the run failed (e.g. a re-admission gate), or any of these "
        "steps (`[gate, burnin, k8s-burnin]`: a step the run does not have counts as not failed); else do nothing",
    ),
}
"""The hand-off's post: to which sink, with which message, within which time; and whether it is needed."""


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
    def not_needed(params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any] | None:
        """With `after_failed: gate` (or `[gate, burnin]`): what the step reports instead of handing off while
        none of those steps failed (an `always` step after a gate that passed: the node went back, nothing to hand
        over); None when the hand-off is to be made. Why a param and not a step condition: one `always` step then
        serves both outcomes of the gate, and the history says why nothing was handed off."""
        written = params.get("after_failed") or ""
        names = step_names(written)
        if not names:
            return None
        found = {s.name: s for s in ctx.steps}
        if any(found[name].status == StepStatus.FAILED for name in names if name in found):
            return None
        seen = ", ".join(f"step {name} {found[name].status if name in found else 'not in this run'}" for name in names)
        return {"outcome": "not_needed", "would": f"nothing: {seen}, {'not' if len(names) == 1 else 'none'} failed",
                "can_act": True, "after_failed": written}  # fmt: skip

    @staticmethod
    def posted(params: Mapping[str, Any]) -> dict[str, Any]:
        return {"sink": params["sink"], "message": params.get("message", ""), "timeout": params["timeout"]}
