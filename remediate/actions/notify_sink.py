"""`notify`: post to a named sink of the settings (`sinks`), so that no playbook holds a URL.

`sink: oncall` names where to post (static: never from an alert); the settings say what it is
(remediate.config.settings:
`sinks.oncall: {type: webhook|slack|teams, url | url_file, headers_file}`; the Helm chart's `sinks` value).
The POST is that of the action of the sink's type, called as it is (notify.webhook's JSON summary,
notify.slack's Block Kit message, notify.teams' Adaptive Card): the same Idempotency-Key, no redirect
followed, retried only when nothing was sent, secrets read from their files only when the step runs.

A sink that is not configured makes the step's plan say `can_act: false` naming the setting, and its execution
fail with that reason, posting nothing: a notification step of a shipped playbook never stops the steps before
it (a failed step fails its run; the steps before it have run). `remediate serve` lists such sinks at start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from remediate.actions.base import Action, ActionDeps, StepContext, Where
from remediate.actions.chat import ChatWebhookAction, NotifySlackAction, NotifyTeamsAction
from remediate.actions.notify import TIMEOUT, NotifyWebhookAction, PostingAction
from remediate.actions.schema import Param, ParamSchema
from remediate.config.values import Sink
from remediate.errors import ActionError

if TYPE_CHECKING:
    import requests


class SinkNotConfiguredError(ActionError):
    """The step names a sink that the settings do not define: nothing is posted."""


def not_configured(name: str) -> str:
    """Why a step naming sink `name` cannot act, and which setting fixes it."""
    return (
        f"sink {name!r} is not configured: set sinks.{name} (settings file or REMEDIATE_SINKS; "
        "the chart's `sinks` value)"
    )


class NotifyAction(Action):
    name: ClassVar[str] = "notify"
    description: ClassVar[str] = (
        "Post to a named sink of the settings (`sinks`: a webhook, Slack or Teams, its URL from a file such as a "
        "mounted Secret) in that sink's format: notify.webhook's JSON summary, notify.slack's or notify.teams' "
        "message; sent once, retried only when nothing was sent. A sink that is not configured: the plan says "
        "can_act false and the step fails, posting nothing."
    )
    where: ClassVar[Where] = Where.CLUSTER
    idempotent: ClassVar[bool] = False
    reports_run: ClassVar[bool] = True
    settings_section: ClassVar[str] = "notify"
    schema: ClassVar[ParamSchema] = ParamSchema(
        {
            "sink": Param(
                str,
                required=True,
                static=True,
                doc="the name of a sink of the `sinks` setting (e.g. oncall)",
            ),
            "message": Param(
                str,
                default="",
                late=True,
                doc="free text of the message; a template rendered when the step runs, which may read the earlier "
                "steps' outcomes (`steps`, `step.<name>`, `run.outcome`) and `run.link`",
            ),
            "timeout": TIMEOUT,
        }
    )

    def __init__(
        self,
        sinks: Iterable[Sink] = (),
        *,
        public_url: str | None = None,
        session: requests.Session | None = None,
        slack_approve_in_place: bool = False,
    ) -> None:
        self.sinks = {sink.name: sink for sink in sinks}
        # One instance per format, called as they are: the POST, its retries and formats stay theirs.
        self.formats: dict[str, PostingAction] = {
            "webhook": NotifyWebhookAction(session, public_url=public_url),
            "slack": NotifySlackAction(session, public_url=public_url, approve_in_place=slack_approve_in_place),
            "teams": NotifyTeamsAction(session, public_url=public_url),
        }

    def use_sinks(self, sinks: Iterable[Sink]) -> None:
        """Post to `sinks` from now on (a reload, remediate.live); a step already posting keeps its sink."""
        self.sinks = {sink.name: sink for sink in sinks}

    @classmethod
    def from_deps(cls, deps: ActionDeps) -> Self:
        settings = deps.settings
        return cls(
            settings.sinks,
            public_url=settings.public_url,
            slack_approve_in_place=settings.slack_signing_secret_file is not None,
        )

    def _target(self, params: Mapping[str, Any]) -> tuple[Sink, PostingAction, dict[str, Any]]:
        """The sink, the action of its type and that action's params; SinkNotConfiguredError without it."""
        sink = self.sinks.get(params["sink"])
        if sink is None:
            raise SinkNotConfiguredError(not_configured(params["sink"]))
        action = self.formats[sink.type]
        where = {key: getattr(sink, key) for key in ("url", "url_file", "headers_file") if getattr(sink, key)}
        return sink, action, action.validate({**where, "message": params["message"], "timeout": params["timeout"]})

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        try:
            sink, action, posted = self._target(params)
        except SinkNotConfiguredError as exc:
            return {"sink": params["sink"], "can_act": False, "why_not": str(exc)}
        return {"sink": sink.name, "type": sink.type, "can_act": True, **action.plan(posted, ctx)}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        sink, action, posted = self._target(params)
        return {"sink": sink.name, "type": sink.type, **action.execute(posted, ctx)}

    def announce(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        """That the run waits for approval, to a Slack or Teams sink (remediate.executor.announce): that action's own
        announcement. A webhook sink is told nothing before approval, as notify.webhook is not."""
        sink, action, posted = self._target(params)
        if not isinstance(action, ChatWebhookAction):
            return {"sink": sink.name, "type": sink.type, "announced": False}
        return {"sink": sink.name, "type": sink.type, **action.announce(posted, ctx)}


SINK_ACTIONS = (NotifyAction.name, "k8s.handoff", "slurm.handoff")
"""The actions whose `sink` param names a sink (k8s.handoff and slurm.handoff post through `notify`)."""


class PlaybookSteps(Protocol):
    """What `sinks_in_use` reads of a playbook (remediate.playbooks.model.Playbook: actions import no intake)."""

    name: str

    def steps_for(self, status: str) -> tuple[Any, ...]: ...

    @property
    def rungs(self) -> tuple[Any, ...]: ...


def sinks_in_use(playbooks: Iterable[PlaybookSteps]) -> dict[str, list[str]]:
    """The sinks the `notify` (and `*.handoff`) steps of `playbooks` name, each with the playbooks naming it."""
    used: dict[str, set[str]] = {}
    for playbook in playbooks:
        resolved = [step for rung in playbook.rungs for step in rung.on_resolved]
        for step in (*playbook.steps_for("firing"), *playbook.steps_for("resolved"), *resolved):
            if step.action in SINK_ACTIONS:
                used.setdefault(str(step.params["sink"]), set()).add(playbook.name)
    return {sink: sorted(names) for sink, names in sorted(used.items())}


def unconfigured_sinks(playbooks: Iterable[PlaybookSteps], sinks: Iterable[Sink]) -> str | None:
    """One line naming the sinks playbooks use that the settings do not define (and who uses them); None: none."""
    configured = {sink.name for sink in sinks}
    missing = {name: users for name, users in sinks_in_use(playbooks).items() if name not in configured}
    if not missing:
        return None
    listed = "; ".join(f"{name} (used by {', '.join(users)})" for name, users in missing.items())
    settings = ", ".join(f"sinks.{name}" for name in missing)
    return (
        f"sinks NOT configured: {listed}: their notify steps fail and post nothing until you set {settings} "
        "(settings file or REMEDIATE_SINKS; the chart's `sinks` value)"
    )
