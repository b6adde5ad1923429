"""`slurm.handoff`: hand a node remediate drained to an external breakfix system (a named sink), and say so in
the node's reason: the Slurm peer of `k8s.handoff`, the last rung of a ladder ("keep-out").

The post is the `notify` action's, called as it is (the sink's format, Idempotency-Key, retries only when
nothing was sent; a sink that is not configured: the plan says can_act false and the step fails, posting
nothing and changing nothing). Only once the sink took it is the node's reason replaced by a hand-off reason
(remediate.slurm.reason), the owner first so that `sinfo -R` says who has the node:

    breakfix: XID 79 still reported after a reset (from remediate run 42)

with `scontrol update NodeName=<node> Reason=<reason>`, no State=: the node stays drained, and one a person
resumed since the read is not drained again (SlurmClient.set_reason); the node is read back to be sure.

Only a node remediate drained (its reason carries the mark) is handed over; the rung drains first. A node
not drained is refused ("drain it first (slurm.drain)"), one a person drained or set down is refused naming
their reason and who set it (never taken over), one handed to another system is refused naming it (one owner
at a time). A node already handed to the same owner is left as it is, nothing posted again (already_owned).

From then on the reason is no longer remediate's mark: slurm.resume and slurm.requeue leave the node,
slurm.drain reports it, each naming the owner; the owner resumes it (`scontrol update NodeName=<node>
State=RESUME`). The breaker keeps counting it as held (SlurmNode.held_by_run: the drain is still remediate's
doing, as a handed-off Kubernetes node stays cordoned with remediate's marks) until the owner resumes it.
Not breaker-gated, nor refused by slurm_partitions: it takes no node out of service, it only names who has one
remediate already took out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from remediate.actions.base import Action, ActionDeps, StepContext
from remediate.actions.handoff_post import POST_PARAMS, PostsToSink, notify_of
from remediate.actions.schema import Param, ParamSchema
from remediate.actions.slurm.common import (
    NODE_PARAM,
    CacheProvider,
    SlurmAction,
    SlurmNodeRef,
    SlurmOptions,
    handed_note,
    resume_hint,
)
from remediate.errors import ActionError
from remediate.slurm import SlurmError, SlurmNode, check_owner, handoff_reason


class SlurmHandoffRefused(ActionError):
    """The node is not remediate's drain to hand over: not drained, a person's, or another system's already."""


class SlurmHandoffAction(PostsToSink, SlurmAction):
    name: ClassVar[str] = "slurm.handoff"
    description: ClassVar[str] = (
        "Hand a Slurm node remediate drained to an external breakfix system: post the evidence to a named sink "
        "(as `notify` does), then set the node's reason to `<owner>: <why> (from remediate run <id>)`; it stays "
        "drained, and remediate's resume leaves it to its owner."
    )
    idempotent: ClassVar[bool] = False  # the post may have reached the sink: never sent again after a crash
    reports_run: ClassVar[bool] = True
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "node": NODE_PARAM,
            "owner": Param(
                str,
                static=True,
                check=check_owner,
                doc="who has the node, first in its reason (`sinfo -R`); default: the sink's name",
            ),
            "why": Param(str, default="", doc="why it is handed over, in the reason; default: the alert"),
            **POST_PARAMS,
        }
    )

    def __init__(
        self,
        cache: CacheProvider,
        options: SlurmOptions | None = None,
        notify: Callable[[], Action] | None = None,
    ) -> None:
        super().__init__(cache, options)
        self._notify = notify

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        action = super().from_deps(deps)
        action._notify = notify_of(deps)
        return action

    def _owner(self, params: Mapping[str, Any]) -> str:
        owner = str(params.get("owner") or params["sink"])
        if problem := check_owner(owner):
            raise ActionError(f"owner {owner!r} (the sink's name: set the step's `owner`) {problem}")
        return owner

    def _why(self, params: Mapping[str, Any], ctx: StepContext) -> str:
        why = str(params.get("why") or "").strip()
        if why:
            return why
        alertname = ctx.alert.alertname or ctx.alert.labels.get("alertname") or "an alert"
        return f"{alertname}, handed off by playbook {ctx.playbook}"

    def _check(self, node: SlurmNode, owner: str) -> bool:
        """True when `owner` has the node already; SlurmHandoffRefused when it is not remediate's to hand over."""
        handed = node.handed_to
        if handed is not None:
            if handed.owner == owner:
                return True
            raise SlurmHandoffRefused(f"node {node.name} is {handed_note(node)}: not handed to {owner} as well "
                                      "(one owner at a time)")  # fmt: skip
        if node.drained_by_run is not None:
            return False
        by = f" by {node.reason_set_by}" if node.reason_set_by else ""
        if node.out_of_service and node.reason:
            state = "drained" if node.drained else f"out of service ({node.state})"
            raise SlurmHandoffRefused(
                f"node {node.name} is {state}{by} with reason {node.reason!r}, not by remediate: not handed over "
                "(remediate never takes over a person's drain)"
            )
        raise SlurmHandoffRefused(
            f"node {node.name} is not drained by remediate ({node.state_text}): drain it first (slurm.drain), "
            "then hand it over"
        )

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (idle := self.not_needed(params, ctx)) is not None:
            return idle
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        owner = self._owner(params)
        seen: dict[str, Any] = {"node": node.name, "from": ref.source, "found": True, "current": node.summary()}
        try:
            if self._check(node, owner):
                return {**seen, "would": f"nothing: already {handed_note(node)}", "owner": owner, "can_act": True}
        except SlurmHandoffRefused as exc:
            return {**seen, "would": "nothing", "can_act": False, "why_not": str(exc)}
        reason = handoff_reason(owner, ctx.run_id, why=self._why(params, ctx))
        posted = self.notify().plan(self.posted(params), ctx)
        would = f"post to sink {params['sink']}, then set the reason of {node.name} to {reason!r} (it stays drained)"
        return {**seen, "would": would, "owner": owner, "reason": reason, "notify": posted,
                "can_act": posted.get("can_act", True),
                **({"why_not": posted["why_not"]} if "why_not" in posted else {})}  # fmt: skip

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        if (idle := self.not_needed(params, ctx)) is not None:
            return idle
        ref = self.node_ref(params, ctx)
        node = self.read(ref)
        owner = self._owner(params)
        if self._check(node, owner):  # a retry after a lost answer, or a second alert: done already
            handed = node.handed_to
            assert handed is not None
            return {"outcome": "already_owned", "node": node.name, "owner": owner, "handed_by_run": handed.run,
                    "slurm_reason": node.reason}  # fmt: skip
        reason = handoff_reason(owner, ctx.run_id, why=self._why(params, ctx))
        notify = self.notify()
        posted = notify.execute(notify.validate(self.posted(params)), ctx)
        self.client.set_reason(node.name, reason)
        self._check_written(ref, reason, params["sink"])
        return {"outcome": "handed_off", "node": node.name, "owner": owner, "reason": reason,
                "drained_by_run": node.drained_by_run, "posted": posted, "was": node.summary(),
                "resume_with": resume_hint(node.name)}  # fmt: skip

    def _check_written(self, ref: SlurmNodeRef, reason: str, sink: str) -> None:
        """The node read back: drained with the hand-off reason, or an error saying what happened instead."""
        after = self.read(ref)
        if after.drained and after.reason == reason:
            return
        raise SlurmError(
            f"posted to sink {sink}, but node {after.name} is now {after.state_text} with reason "
            f"{after.reason or 'none'!r}, not drained with {reason!r}: someone changed it meanwhile; "
            "it was not handed over"
        )
