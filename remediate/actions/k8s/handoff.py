"""`k8s.handoff`: hand a node to an external breakfix system (a named sink), and mark it owned by that system.

The post is the `notify` action's, called as it is (the sink's format, Idempotency-Key, retries only when
nothing was sent, a sink that is not configured: the plan says can_act false and the step fails, posting
nothing). Only once the sink took it is the node annotated (remediate.kube.owner): remediate.io/owner (the
`owner` param, by default the sink's name), remediate.io/owner-since and remediate.io/owner-why, by a
conditional write (read -> decide -> patch on the resourceVersion read), and an Event is recorded on the node.
From then on remediate's cordon, taint and drain of the node refuse, naming the owner; the undo of its own
changes does not. The owner releases the node by removing the annotation (or `remediate node release NODE`).

Idempotent as a hand-off: a node the same owner has already is left as it is (nothing posted again); a node
another system owns is refused, naming it (one owner at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext
from remediate.actions.handoff_post import POST_PARAMS, PostsToSink, notify_of
from remediate.actions.k8s.common import NODE_PARAM, ClientProvider, KubeAction, KubeOptions, NodeEvent, iso_now
from remediate.actions.k8s.patching import Decision, patch_until_stable
from remediate.actions.schema import Param, ParamSchema
from remediate.errors import ActionError
from remediate.kube import OWNER, OWNER_SINCE, OWNER_WHY, NodeInfo, owner_of
from remediate.kube.owner import MAX_WHY, SELF


class NodeOwnedByAnother(ActionError):
    """The node already belongs to another system: one owner at a time."""


def _owner_name(value: str) -> str | None:
    if not value.strip() or len(value) > 63 or any(c.isspace() for c in value):
        return "must be 1-63 characters without blanks (e.g. breakfix)"
    if value == SELF:
        return f"{SELF!r} is remediate itself: name the system the node is handed to"
    return None


class HandoffAction(PostsToSink, KubeAction):
    name: ClassVar[str] = "k8s.handoff"
    description: ClassVar[str] = (
        "Hand a node to an external breakfix system: post the evidence to a named sink (as `notify` does) and "
        "mark the node owned (remediate.io/owner): remediate's cordon, taint and drain of it refuse until released."
    )
    idempotent: ClassVar[bool] = False  # the post may have reached the sink: never sent again after a crash
    reports_run: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "node": NODE_PARAM,
            "owner": Param(
                str, static=True, check=_owner_name, doc="the owner written on the node; default: the sink's name"
            ),
            "why": Param(str, default="", doc="why it is handed over (remediate.io/owner-why); default: the alert"),
            **POST_PARAMS,
        }
    )

    def __init__(
        self,
        client: ClientProvider,
        options: KubeOptions | None = None,
        notify: Callable[[], Action] | None = None,
    ) -> None:
        super().__init__(client, options)
        self._notify = notify

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        action = super().from_deps(deps)
        action._notify = notify_of(deps)
        return action

    def _owner(self, params: Mapping[str, Any]) -> str:
        return str(params.get("owner") or params["sink"])

    def _why(self, params: Mapping[str, Any], ctx: StepContext) -> str:
        why = str(params.get("why") or "").strip()
        if not why:
            alertname = ctx.alert.alertname or ctx.alert.labels.get("alertname") or "an alert"
            why = f"{alertname}: handed off by playbook {ctx.playbook}"
        return f"{why} (remediate run {ctx.run_id})"[:MAX_WHY]

    def _check(self, node: NodeInfo, owner: str) -> bool:
        """True when `owner` has the node already; NodeOwnedByAnother when someone else has it."""
        current = owner_of(node.annotations)
        if current is None:
            return False
        if current.name == owner:
            return True
        raise NodeOwnedByAnother(f"{current.describe(node.name)}: not handed to {owner} (one owner at a time)")

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (idle := self.not_needed(params, ctx)) is not None:
            return idle
        ref, node, seen = self.observe(params, ctx)
        owner = self._owner(params)
        try:
            if self._check(node, owner):
                current = owner_of(node.annotations)
                assert current is not None
                return {**seen, "would": f"nothing: {current.describe(node.name)} already", "can_act": True}
        except NodeOwnedByAnother as exc:
            return {**seen, "can_act": False, "why_not": str(exc)}
        posted = self.notify().plan(self.posted(params), ctx)
        would = f"post to sink {params['sink']}, then mark {ref.name} owned by {owner} ({OWNER})"
        return {**seen, "would": would, "owner": owner, "notify": posted, "can_act": posted.get("can_act", True),
                **({"why_not": posted["why_not"]} if "why_not" in posted else {})}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (idle := self.not_needed(params, ctx)) is not None:
            return idle
        ref = self.node_ref(params, ctx)
        owner = self._owner(params)
        if self._check(self.read_node(ref, ctx), owner):
            return {"outcome": "already_owned", "node": ref.name, "owner": owner}
        notify = self.notify()
        posted = notify.execute(notify.validate(self.posted(params)), ctx)
        why = self._why(params, ctx)
        marks = {OWNER: owner, OWNER_SINCE: iso_now(), OWNER_WHY: why}
        note = f"handed to {owner} (sink {params['sink']}): {why}"
        event = NodeEvent("handoff", "RemediateHandedOff", "Warning", note, "handoff")

        def handed(now: NodeInfo, recorded: dict[str, Any] | None) -> dict[str, Any]:
            return {"outcome": "handed_off", "node": now.name, "owner": owner, "why": why, "posted": posted,
                    "event": recorded}  # fmt: skip

        def decide(node: NodeInfo) -> Decision:
            if self._check(node, owner):  # a retry after a lost answer: done already
                return Decision(handed, event=event)
            return Decision(handed, {"metadata": {"annotations": marks}}, event)

        return patch_until_stable(self, ref, ctx, decide)
