"""`notify` (remediate.actions.notify_sink): a step names a sink of the settings, never a URL.

Against a real local HTTP server (tests.support.realsystems.WebhookRecorder): the sink's type chooses the format,
and the POST is notify.webhook's / notify.slack's / notify.teams' own, called as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from remediate.actions import default_registry
from remediate.actions.base import StepContext, StepView
from remediate.actions.chat import NotifySlackAction, NotifyTeamsAction
from remediate.actions.notify import NotifyWebhookAction
from remediate.actions.notify_sink import NotifyAction, SinkNotConfiguredError, sinks_in_use, unconfigured_sinks
from remediate.config.settings import Settings
from remediate.config.values import Sink, to_sinks
from remediate.errors import AmbiguousActionError, PlaybookError, RetryableActionError
from remediate.intake.alerts import alert_ref
from remediate.playbooks.loading import load_directory, parse_playbook
from remediate.rehearsal.dryrun import dry_run
from tests.conftest import XID_CONTEXT as ALERT
from tests.conftest import alert_payload, notification_payload
from tests.support.realsystems import WebhookRecorder, free_port

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_URL = "https://remediate.example.com"
STEPS = (StepView(0, "cordon", "k8s.cordon", "failed", "breaker open"), StepView(1, "tell", "notify", "pending"))


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hooks/oncall") as server:
        yield server


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as each:
        yield each


def context() -> StepContext:
    return StepContext(run_id=7, step_index=1, playbook="gpu-xid", target="node-a", alert=alert_ref(ALERT), steps=STEPS)


def sink_action(session: requests.Session, **sinks: dict[str, str]) -> NotifyAction:
    return NotifyAction(to_sinks(sinks), public_url=PUBLIC_URL, session=session)


def test_a_webhook_sink_posts_what_notify_webhook_posts_to_the_same_url(
    recorder: WebhookRecorder, session: requests.Session
) -> None:
    action = sink_action(session, oncall={"type": "webhook", "url": recorder.url})
    message = "{% if step.cordon.status == 'failed' %}NOT cordoned{% endif %} {{ labels.gpu }}: {{ run.link }}"

    result = action.execute(action.validate({"sink": "oncall", "message": message}), context())

    expected = f"NOT cordoned 3: {PUBLIC_URL}/ui/runs/7"
    assert result == {
        "sink": "oncall",
        "type": "webhook",
        "posted_to": recorder.url,
        "status_code": 200,
        "message": expected,
    }
    (request,) = recorder.requests
    assert request.header("Idempotency-Key") == "remediate-run-7-step-1"
    webhook = NotifyWebhookAction(session, public_url=PUBLIC_URL)
    body = webhook.summary(webhook.validate({"url": recorder.url, "message": message}), context())
    assert request.json == body  # notify.webhook's own body
    assert body["message"] == expected


@pytest.mark.parametrize(
    ("kind", "chat"), [pytest.param("slack", NotifySlackAction, id="slack"), pytest.param("teams", NotifyTeamsAction)]
)
def test_a_chat_sink_posts_that_chats_message(
    recorder: WebhookRecorder, session: requests.Session, kind: str, chat: type[NotifySlackAction]
) -> None:
    action = sink_action(session, chat={"type": kind, "url": recorder.url})

    result = action.execute(action.validate({"sink": "chat", "message": "GPU {{ labels.gpu }}"}), context())

    assert (result["sink"], result["type"], result["status_code"], result["message"]) == ("chat", kind, 200, "GPU 3")
    (request,) = recorder.requests
    plain = chat(session, public_url=PUBLIC_URL)
    written = plain.validate({"url": recorder.url, "message": "GPU {{ labels.gpu }}"})
    sent, expected = request.json, plain.render(plain.message(written, context()))
    if kind == "slack":  # the context line carries the time of sending
        sent["blocks"] = [b for b in sent["blocks"] if b["type"] != "context"]
        expected["blocks"] = [b for b in expected["blocks"] if b["type"] != "context"]
    else:
        sent["attachments"][0]["content"]["body"].pop(-1)
        expected["attachments"][0]["content"]["body"].pop(-1)
    assert sent == expected


def test_the_url_and_headers_come_from_files_read_when_the_step_runs_and_are_never_shown(
    recorder: WebhookRecorder, session: requests.Session, tmp_path: Path
) -> None:
    url_file, headers_file = tmp_path / "url", tmp_path / "headers"
    action = sink_action(
        session, oncall={"type": "webhook", "url_file": str(url_file), "headers_file": str(headers_file)}
    )
    params = action.validate({"sink": "oncall", "message": "m"})
    url_file.write_text(recorder.url + "?token=s3cr3t-0123456789abcdefXYZ\n")  # written after the action was built
    headers_file.write_text("Authorization: Bearer very-secret-bearer-token-0123\n")

    plan = action.plan(params, context())
    result = action.execute(params, context())

    assert plan["can_act"] is True
    assert plan["would_post_to"] == f"the URL in {url_file}"
    assert plan["headers_from"] == str(headers_file)
    assert result["posted_to"] == f"the URL in {url_file}"
    (request,) = recorder.requests
    assert request.header("Authorization") == "Bearer very-secret-bearer-token-0123"
    assert "s3cr3t" not in repr((plan, result))


def test_an_unconfigured_sink_cannot_act_naming_the_setting_and_posts_nothing(
    recorder: WebhookRecorder, session: requests.Session
) -> None:
    action = sink_action(session, chat={"type": "slack", "url": recorder.url})
    params = action.validate({"sink": "oncall", "message": "m"})

    plan = action.plan(params, context())
    with pytest.raises(SinkNotConfiguredError) as failed:
        action.execute(params, context())

    why = (
        "sink 'oncall' is not configured: set sinks.oncall (settings file or REMEDIATE_SINKS; "
        "the chart's `sinks` value)"
    )
    assert plan == {"sink": "oncall", "can_act": False, "why_not": why}
    assert str(failed.value) == why
    time.sleep(0.05)
    assert recorder.requests == []


def test_a_post_that_may_have_arrived_is_not_sent_again_and_one_that_never_left_is_retryable(
    recorder: WebhookRecorder, session: requests.Session
) -> None:
    """The classification of notify.webhook's POST holds through a sink (the executor retries only the second)."""
    recorder.status = 503
    action = sink_action(
        session,
        up={"type": "webhook", "url": recorder.url},
        down={"type": "teams", "url": f"http://127.0.0.1:{free_port()}/hook"},
    )

    with pytest.raises(AmbiguousActionError, match="not sent again"):
        action.execute(action.validate({"sink": "up"}), context())
    with pytest.raises(RetryableActionError):
        action.execute(action.validate({"sink": "down"}), context())
    assert len(recorder.requests) == 1


def test_the_sink_is_written_in_the_playbook_never_templated() -> None:
    registry = default_registry()
    step = {"action": "notify", "with": {"sink": "{{ labels.team }}"}}
    with pytest.raises(PlaybookError, match="'sink' must be written in the playbook"):
        parse_playbook({"name": "p", "match": {"alertname": "A"}, "steps": [step]}, registry)
    with pytest.raises(PlaybookError, match="missing required parameter 'sink'"):
        parse_playbook({"name": "p", "match": {"alertname": "A"}, "steps": [{"action": "notify"}]}, registry)


def test_the_registry_builds_it_from_the_notify_section_of_the_settings(recorder: WebhookRecorder) -> None:
    settings = Settings.of(sinks=to_sinks({"oncall": {"type": "webhook", "url": recorder.url}}), public_url=PUBLIC_URL)
    action = default_registry(settings).get("notify")

    action.execute(action.validate({"sink": "oncall", "message": "{{ run.link }}"}), context())

    assert recorder.requests[0].json["message"] == f"{PUBLIC_URL}/ui/runs/7"


def test_with_a_slack_signing_secret_the_approve_button_of_slack_messages_approves_in_place() -> None:
    """notify.slack and a `slack` sink get the interactive button, Teams never does."""
    plain = default_registry(Settings.of(public_url=PUBLIC_URL))
    interactive = default_registry(Settings.of(public_url=PUBLIC_URL, slack_signing_secret_file=Path("/s/secret")))

    for registry, expected in ((plain, False), (interactive, True)):
        slack, teams, notify = (registry.get(name) for name in ("notify.slack", "notify.teams", "notify"))
        assert isinstance(slack, NotifySlackAction) and isinstance(notify, NotifyAction)
        assert slack.approve_in_place is expected
        assert notify.formats["slack"].approve_in_place is expected  # type: ignore[attr-defined]
        assert isinstance(teams, NotifyTeamsAction) and teams.approve_in_place is False


def test_the_shipped_playbooks_notify_the_oncall_sink_and_the_unconfigured_one_is_named_once() -> None:
    playbooks, errors = load_directory(ROOT / "playbooks", default_registry())
    assert errors == []

    used = sinks_in_use(playbooks)
    line = unconfigured_sinks(playbooks, ())

    assert used == {
        "breakfix": ["gpu-xid-quarantine", "training-fail-slow"],  # their last rungs' k8s.handoff
        "oncall": [
            "gpu-degraded",
            "gpu-overheat",
            "gpu-xid-quarantine",
            "notify-oncall",
            "training-fail-slow",
            "training-throughput-drop",
        ],
    }
    assert line == (
        "sinks NOT configured: breakfix (used by gpu-xid-quarantine, training-fail-slow); oncall (used by "
        "gpu-degraded, gpu-overheat, gpu-xid-quarantine, notify-oncall, training-fail-slow, training-throughput-drop): "
        "their notify steps fail and post nothing "
        "until you set sinks.breakfix, sinks.oncall (settings file or REMEDIATE_SINKS; the chart's `sinks` value)"
    )
    configured = (Sink("oncall", "webhook", url="http://bridge:8080/x"), Sink("breakfix", "webhook", url="http://t/x"))
    assert unconfigured_sinks(playbooks, configured) is None


def test_the_dry_run_of_a_shipped_playbook_without_the_sink_says_its_step_cannot_act(tmp_path: Path) -> None:
    """`remediate dry-run` (the /plan-like output): the notify step's plan says can_act false naming sinks.oncall;
    the steps before it plan as usual."""
    settings = Settings.of(playbooks=ROOT / "playbooks", database_url=f"sqlite:///{tmp_path / 'absent.db'}")
    alert = alert_payload("GPUTemperatureCritical", labels={"severity": "critical", "Hostname": "gpu-node-7"})

    report = dry_run(settings, notification_payload(alert), now=1_767_225_600.0)

    (playbook,) = report["alerts"][0]["playbooks"]
    assert playbook["playbook"] == "notify-oncall"
    (step,) = playbook["steps"]
    assert step["plan"]["can_act"] is False
    assert "set sinks.oncall" in step["plan"]["why_not"]
    assert playbook["cannot_succeed"] is True
    assert "sink 'oncall' is not configured: set sinks.oncall" in playbook["cannot_act"]

    configured = Settings.of(
        playbooks=ROOT / "playbooks",
        database_url=f"sqlite:///{tmp_path / 'absent.db'}",
        sinks=to_sinks({"oncall": {"type": "teams", "url_file": "/etc/remediate/sinks/oncall/url"}}),
    )
    report = dry_run(configured, notification_payload(alert), now=1_767_225_600.0)
    (playbook,) = report["alerts"][0]["playbooks"]
    plan: dict[str, Any] = playbook["steps"][0]["plan"]
    assert (plan["can_act"], plan["type"], plan["would_post_to"]) == (
        True,
        "teams",
        "the URL in /etc/remediate/sinks/oncall/url",
    )
    assert playbook["would_run"] is True
