"""notify.slack and notify.teams against a real local HTTP server (tests.support.realsystems.WebhookRecorder).

The sink checks the payload shape Slack and Teams document; the POST itself is notify.webhook's
(`post_json`), so redirects, 5xx and refused connections are classified the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from remediate.actions import default_registry
from remediate.actions.base import StepContext, StepView
from remediate.actions.chat import ChatWebhookAction, NotifySlackAction, NotifyTeamsAction
from remediate.config.settings import Settings
from remediate.errors import ActionError, AmbiguousActionError, ParamsError, PlaybookError, RetryableActionError
from remediate.executor.announce import Announcer
from remediate.executor.loop import Executor
from remediate.intake.alerts import alert_ref
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.playbooks.model import PlaybookSet
from remediate.rehearsal.dryrun import dry_run
from remediate.store import Store
from tests.actions.test_notify import ALERT, _Redirector
from tests.conftest import alert_payload, ingest_alerts, notification_payload
from tests.support.realsystems import WebhookRecorder, free_port
from tests.support.store_json import run_json_of
from tests.support.stores import EVERY_DATABASE, rows

PUBLIC_URL = "https://remediate.example.com"
STEPS = (
    StepView(0, "cordon", "k8s.cordon", "succeeded"),
    StepView(1, "drain", "k8s.drain", "failed", "pods did not leave within 5m"),
    StepView(2, "tell on-call", "notify.slack", "pending"),
    StepView(3, "reset", "gpu.reset", "pending"),
)
SLACK_BLOCK_TYPES = {"header", "section", "context", "actions", "divider"}
KINDS = [pytest.param(NotifySlackAction, id="slack"), pytest.param(NotifyTeamsAction, id="teams")]


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/services/T000/B000/XXXX") as server:
        yield server


def context(alert: dict[str, Any] = ALERT, steps: tuple[StepView, ...] = STEPS, **extra: Any) -> StepContext:
    return StepContext(
        run_id=42, step_index=2, playbook="gpu-xid", target="node-a", alert=alert_ref(alert), steps=steps, **extra
    )


def make(kind: type[ChatWebhookAction], public_url: str | None = PUBLIC_URL) -> ChatWebhookAction:
    return kind(public_url=public_url, session=requests.Session())


def post(action: ChatWebhookAction, recorder: WebhookRecorder, ctx: StepContext | None = None, **params: Any) -> Any:
    result = action.execute(action.validate({"url": recorder.url, **params}), ctx or context())
    assert (result["posted_to"], result["status_code"]) == (recorder.url, 200)
    assert set(result) == {"posted_to", "status_code", "message"}, "the message as sent is in the result"
    (request,) = recorder.requests
    assert (request.method, request.header("Content-Type")) == ("POST", "application/json")
    assert request.header("Idempotency-Key") == "remediate-run-42-step-2"
    return request.json


def slack_texts(body: dict[str, Any]) -> list[str]:
    """Every text in a Block Kit body, in order."""
    found: list[str] = [body["text"]]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(body["blocks"])
    return found


def check_slack_shape(body: dict[str, Any]) -> None:
    """What Slack documents for an incoming webhook's Block Kit message (api.slack.com/reference/block-kit)."""
    assert set(body) == {"text", "blocks"}
    assert isinstance(body["text"], str) and body["text"]
    blocks = body["blocks"]
    assert 1 <= len(blocks) <= 50
    for block in blocks:
        assert block["type"] in SLACK_BLOCK_TYPES
        if block["type"] == "header":
            assert block["text"]["type"] == "plain_text" and len(block["text"]["text"]) <= 150
        if block["type"] == "section":
            assert "text" in block or "fields" in block
            if "text" in block:
                assert block["text"]["type"] == "mrkdwn" and len(block["text"]["text"]) <= 3000
            assert len(block.get("fields", [])) <= 10
            assert all(f["type"] == "mrkdwn" and len(f["text"]) <= 2000 for f in block.get("fields", []))
        if block["type"] == "context":
            assert 1 <= len(block["elements"]) <= 10
        if block["type"] == "actions":
            assert 1 <= len(block["elements"]) <= 25
            for button in block["elements"]:
                assert button["type"] == "button" and button["text"]["type"] == "plain_text"
                assert len(button["text"]["text"]) <= 75 and len(button["url"]) <= 3000
                assert 1 <= len(button["action_id"]) <= 255
    # verbatim: Slack auto-links no bare URL, #channel or @name.
    assert all(obj.get("verbatim") is True for obj in _text_objects(blocks) if obj["type"] == "mrkdwn")
    ids = [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]
    assert len(ids) == len(set(ids))  # unique within the message


def _text_objects(node: Any) -> list[dict[str, Any]]:
    """Every Block Kit text object (`{"type": "mrkdwn" | "plain_text", "text": ...}`) under `node`."""
    if isinstance(node, list):
        return [obj for item in node for obj in _text_objects(item)]
    if not isinstance(node, dict):
        return []
    own = [node] if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str) else []
    return own + [obj for value in node.values() for obj in _text_objects(value)]


def teams_card(body: dict[str, Any]) -> dict[str, Any]:
    """The Adaptive Card of a Teams webhook message, after checking the envelope Teams documents."""
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard"
    assert tuple(int(n) for n in card["version"].split(".")) >= (1, 4)
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    for element in card["body"]:
        assert element["type"] in {"TextBlock", "FactSet", "ColumnSet", "Container"}
        if element["type"] == "TextBlock":
            assert isinstance(element["text"], str) and element["text"]
        if element["type"] == "FactSet":
            assert all(set(f) == {"title", "value"} for f in element["facts"])
    for action in card.get("actions", []):
        assert action["type"] == "Action.OpenUrl" and action["title"] and action["url"]
    assert len(json.dumps(body).encode()) < 28 * 1024  # Teams drops bigger messages
    return card


def teams_texts(card: dict[str, Any]) -> list[str]:
    texts = []
    for element in card["body"]:
        if element["type"] == "TextBlock":
            texts.append(element["text"])
        elif element["type"] == "FactSet":
            texts += [f"{f['title']}: {f['value']}" for f in element["facts"]]
    return texts


# --------------------------------------------------------------------------- Slack


def test_slack_posts_a_block_kit_message_with_what_fired_what_was_done_and_a_run_link(
    recorder: WebhookRecorder,
) -> None:
    body = post(make(NotifySlackAction), recorder, message="Paging ml-infra")

    check_slack_shape(body)
    header, about, steps, fields, context_block, actions = body["blocks"]
    assert header["text"]["text"] == "🔥 GpuXidError on node-a"
    assert about["text"]["text"] == "GPU 3 Xid error\nPaging ml-infra"
    assert steps["text"]["text"].splitlines() == [
        "remediate runs playbook gpu-xid (4 steps):",
        "✅ 1. *cordon* `k8s.cordon`: succeeded",
        "❌ 2. *drain* `k8s.drain`: failed",
        "      pods did not leave within 5m",
        "• 3. *tell on-call* `notify.slack`: this message",
        "• 4. *reset* `gpu.reset`: pending",
    ]
    assert fields["fields"][0]["text"] == "*Status*\nalert firing; remediation running after a failed step (drain)"
    assert fields["fields"][1]["text"] == "*Playbook*\ngpu-xid"
    assert re.fullmatch(
        r"run 42 · playbook gpu-xid · mode enforce · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
        context_block["elements"][0]["text"],
    )
    (button,) = actions["elements"]
    assert (button["text"]["text"], button["url"]) == ("Open run 42", f"{PUBLIC_URL}/ui/runs/42")
    assert body["text"].startswith("GpuXidError on node-a: alert firing;")
    assert body["text"].endswith(f"(run 42) {PUBLIC_URL}/ui/runs/42")


def test_slack_without_public_url_has_no_links_and_says_run_id(recorder: WebhookRecorder) -> None:
    body = post(make(NotifySlackAction, public_url=None), recorder)

    check_slack_shape(body)
    assert [b["type"] for b in body["blocks"]] == ["header", "section", "section", "section", "context"]
    assert "http" not in json.dumps(body)
    assert "run 42" in body["text"] and "run 42" in body["blocks"][-1]["elements"][0]["text"]


def test_slack_escapes_label_and_annotation_values_so_they_add_no_link_or_mention(recorder: WebhookRecorder) -> None:
    alert = {
        **ALERT,
        "labels": {**ALERT["labels"], "alertname": "Xid<!channel>"},
        "alertname": "Xid<!channel>",
        "annotations": {"summary": "see <https://evil.example|click here> & <@U0123> <!here>"},
    }
    body = post(make(NotifySlackAction), recorder, ctx=context(alert), message="{{ alertname }} <!everyone>")

    check_slack_shape(body)
    about = body["blocks"][1]["text"]["text"]
    # The summary and the value in the message are inert; the playbook's own `<!everyone>` is its to write.
    assert about == (
        "see &lt;https:\u200b//evil.example|click here&gt; &amp; &lt;@U0123&gt; &lt;!here&gt;\n"
        "Xid&lt;!channel&gt; <!everyone>"
    )
    assert "Xid&lt;!channel&gt; on node-a" in body["text"]
    assert "<" not in body["text"] and ">" not in body["text"]
    # The header is plain_text, which Slack never parses for links, mentions or emoji: shown as typed.
    assert body["blocks"][0]["text"] == {"type": "plain_text", "text": "🔥 Xid<!channel> on node-a", "emoji": False}


def test_slack_limits_are_kept_with_an_ellipsis(recorder: WebhookRecorder) -> None:
    alert = {
        **ALERT,
        "alertname": "A" * 400,
        "labels": {**ALERT["labels"], "alertname": "A" * 400},
        "annotations": {"summary": "&" * 5000},
    }
    many = tuple(StepView(i, f"step-{i}-" + "x" * 80, "log", "succeeded", "e" * 400) for i in range(80))
    body = post(make(NotifySlackAction), recorder, ctx=context(alert, steps=many))

    check_slack_shape(body)
    header, about, steps = body["blocks"][:3]
    assert len(header["text"]["text"]) == 150 and header["text"]["text"].endswith("…")
    assert len(about["text"]["text"]) <= 3000 and about["text"]["text"].endswith("&amp;…")  # never half an escape
    assert len(steps["text"]["text"]) == 3000 and steps["text"]["text"].endswith("…")
    assert len(body["text"]) <= 3000


# --------------------------------------------------------------------------- Teams


def test_teams_posts_an_adaptive_card_with_the_same_content_and_an_open_url_action(
    recorder: WebhookRecorder,
) -> None:
    body = post(make(NotifyTeamsAction), recorder, message="Paging ml-infra")

    card = teams_card(body)
    texts = teams_texts(card)
    assert texts[:4] == [
        "GpuXidError on node-a",
        "GPU 3 Xid error",
        "Paging ml-infra",
        "remediate runs playbook gpu-xid (4 steps):",
    ]
    assert texts[4:9] == [
        "1. cordon (k8s.cordon): succeeded",
        "2. drain (k8s.drain): failed: pods did not leave within 5m",
        "3. tell on-call (notify.slack): this message",
        "4. reset (gpu.reset): pending",
        "Status: alert firing; remediation running after a failed step (drain)",
    ]
    assert texts[9].startswith("run 42 · playbook gpu-xid · mode enforce · ")
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open run 42", "url": f"{PUBLIC_URL}/ui/runs/42"}]


def test_teams_without_public_url_has_no_actions_and_says_run_id(recorder: WebhookRecorder) -> None:
    card = teams_card(post(make(NotifyTeamsAction, public_url=None), recorder))

    assert "actions" not in card
    assert "http" not in json.dumps(card["body"])
    assert teams_texts(card)[-1].startswith("run 42 ·")


def test_teams_escapes_markdown_links_and_emphasis_in_label_values(recorder: WebhookRecorder) -> None:
    alert = {**ALERT, "annotations": {"summary": "[click here](https://evil.example) **now** _x_"}}
    card = teams_card(post(make(NotifyTeamsAction), recorder, ctx=context(alert)))

    assert teams_texts(card)[1] == "\\[click here\\](https:\u200b//evil.example) \\*\\*now\\*\\* \\_x\\_"


# --------------------------------------------------------------------------- where to post, and how


@pytest.mark.parametrize("kind", KINDS)
def test_the_url_may_not_be_templated_from_a_label(kind: type[ChatWebhookAction]) -> None:
    playbook = {
        "name": "chat",
        "match": {"alertname": "GpuXidError"},
        "steps": [{"action": kind.name, "with": {"url": "{{ labels.webhook }}"}}],
    }
    with pytest.raises(PlaybookError, match="url"):
        parse_playbook(playbook, default_registry(), source="chat.yaml")


@pytest.mark.parametrize("kind", KINDS)
def test_exactly_one_of_url_and_url_file(kind: type[ChatWebhookAction]) -> None:
    action = make(kind)
    with pytest.raises(ParamsError, match="exactly one of url"):
        action.validate({})
    with pytest.raises(ParamsError, match="exactly one of url"):
        action.validate({"url": "https://chat-relay.example.com/x", "url_file": "/etc/remediate/slack-url"})
    with pytest.raises(ParamsError, match="absolute path"):
        action.validate({"url_file": "slack-url"})


@pytest.mark.parametrize("kind", KINDS)
def test_url_file_is_read_when_the_step_runs_and_the_secret_url_is_never_shown(
    recorder: WebhookRecorder, kind: type[ChatWebhookAction], tmp_path: Path
) -> None:
    secret = tmp_path / "webhook-url"
    secret.write_text(f"{recorder.url}\n")
    action = make(kind)
    params = action.validate({"url_file": str(secret)})

    plan = action.plan(params, context())
    result = action.execute(params, context())

    assert plan["would_post_to"] == result["posted_to"] == f"the URL in {secret}"
    assert recorder.url not in json.dumps([plan, result])
    assert len(recorder.requests) == 1
    recorder.status = 500
    with pytest.raises(AmbiguousActionError) as info:
        action.execute(params, context())
    assert recorder.url not in str(info.value) and str(secret) in str(info.value)
    secret.write_text("not a url")
    with pytest.raises(ActionError, match="must hold one absolute http") as bad:
        action.execute(params, context())
    assert "not a url" not in str(bad.value)


@pytest.mark.parametrize("kind", KINDS)
def test_plan_shows_the_message_and_sends_nothing(recorder: WebhookRecorder, kind: type[ChatWebhookAction]) -> None:
    action = make(kind)
    params = action.validate({"url": recorder.url})

    plan = action.plan(params, context())

    assert plan["would_post_to"] == recorder.url
    assert f"{PUBLIC_URL}/ui/runs/42" in json.dumps(plan["body"])
    assert recorder.requests == []


@pytest.mark.parametrize("kind", KINDS)
def test_errors_are_classified_as_notify_webhook_does(recorder: WebhookRecorder, kind: type[ChatWebhookAction]) -> None:
    action = make(kind)
    for status in (500, 503, 429):
        recorder.status = status
        with pytest.raises(AmbiguousActionError, match=f"answered {status}.*not sent again"):
            action.execute(action.validate({"url": recorder.url}), context())
    recorder.status = 400
    with pytest.raises(ActionError, match="answered 400") as info:
        action.execute(action.validate({"url": recorder.url}), context())
    assert not isinstance(info.value, RetryableActionError | AmbiguousActionError)
    with pytest.raises(RetryableActionError, match="failed"):
        action.execute(action.validate({"url": f"http://127.0.0.1:{free_port()}/hook"}), context())
    redirector = _Redirector(302, recorder.url)
    recorder.clear()
    try:
        with pytest.raises(ActionError, match=f"answered 302 redirecting to {recorder.url}: not followed"):
            action.execute(action.validate({"url": redirector.url}), context())
    finally:
        redirector.close()
    assert redirector.posts == 1 and recorder.requests == []


# --------------------------------------------------------------------------- through the engine and executor


def run_through_the_executor(store: Store, alert: dict[str, Any], playbook: dict[str, Any]) -> int:
    """Ingest `alert` for `playbook` (actions built with public_url) and drain the executor; the run's id."""
    registry = default_registry(Settings.of(public_url=PUBLIC_URL))
    engine = Engine(
        store=store,
        playbooks=PlaybookSet([parse_playbook(playbook, registry, source=f"{playbook['name']}.yaml")]),
        registry=registry,
    )
    (decision,) = ingest_alerts(engine, alert, at=1_767_225_600.0).decisions
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()
    return decision.run_id


@pytest.mark.parametrize("kind", KINDS)
def test_through_the_executor_the_message_names_the_earlier_steps_outcomes(
    recorder: WebhookRecorder,
    store: Store,
    kind: type[ChatWebhookAction],
) -> None:
    playbook = {
        "name": "gpu-xid",
        "match": {"alertname": "GpuXidError"},
        "steps": [
            {"name": "note it", "action": "log", "with": {"message": "GPU {{ labels.gpu }}"}},
            {
                "name": "tell the old hook",
                "action": "notify.webhook",
                "with": {"url": f"http://127.0.0.1:{free_port()}/gone"},
                "continue_on_error": True,
            },
            {
                "name": "tell on-call",
                "action": kind.name,
                "with": {"url": recorder.url, "message": "GPU {{ labels.gpu }}: {{ run.outcome }}"},
            },
            {"name": "after", "action": "log", "with": {"message": "done"}},
        ],
    }
    run_id = run_through_the_executor(store, alert_payload("GpuXidError", labels={"gpu": "5"}), playbook)

    detail = run_json_of(store, run_id)
    assert [s["status"] for s in detail["steps"]] == ["succeeded", "failed", "succeeded", "succeeded"]
    (request,) = recorder.requests
    if kind is NotifySlackAction:
        check_slack_shape(request.json)
        text = "\n".join(slack_texts(request.json))
        assert "✅ 1. *note it* `log`: succeeded" in text
        assert "❌ 2. *tell the old hook* `notify.webhook`: failed" in text
        assert "• 3. *tell on-call* `notify.slack`: this message" in text
        assert "• 4. *after* `log`: pending" in text
    else:
        text = "\n".join(teams_texts(teams_card(request.json)))
        assert "1. note it (log): succeeded" in text
        assert "2. tell the old hook (notify.webhook): failed: POST http:\u200b//127.0.0.1:" in text
        assert "3. tell on-call (notify.teams): this message" in text
        assert "4. after (log): pending" in text
    assert f"{PUBLIC_URL}/ui/runs/{run_id}" in json.dumps(request.json)
    # The playbook's own words are rendered when the step runs: they can say what the steps did.
    assert "GPU 5: note it succeeded; tell the old hook failed (POST http:\u200b//127.0.0.1:" in text


FORGED = "node-a\n✅ 3. *drain*: succeeded https://evil.example/login @here <!channel> [click](https://evil.example)"


@pytest.mark.parametrize("kind", KINDS)
def test_through_the_executor_label_values_add_no_line_link_or_formatting_and_the_playbooks_markup_stays(
    recorder: WebhookRecorder,
    store: Store,
    kind: type[ChatWebhookAction],
) -> None:
    """A label forged a `✅ 3. *drain*: succeeded` line, a mention and a link next to
    the real buttons; only the playbook may format the message."""
    if kind is NotifySlackAction:
        own = "*Heads up* <https://runbook.example/xid|runbook>: {{ labels.Hostname }} ({{ annotations.summary }})"
    else:
        own = "**Heads up** [runbook](https://runbook.example/xid): {{ labels.Hostname }} ({{ annotations.summary }})"
    playbook = {
        "name": "gpu-xid",
        "match": {"alertname": "GpuXidError"},
        "steps": [
            {"name": "note it", "action": "log", "with": {"message": "note {{ labels.Hostname }}"}},
            {"name": "tell on-call", "action": kind.name, "with": {"url": recorder.url, "message": own}},
        ],
    }
    alert = alert_payload("GpuXidError", labels={"Hostname": FORGED}, annotations={"summary": "*bold*\n_it_ `x`"})
    run_through_the_executor(store, alert, playbook)

    (request,) = recorder.requests
    if kind is NotifySlackAction:
        check_slack_shape(request.json)
        texts = [o["text"] for o in _text_objects(request.json["blocks"])] + [request.json["text"]]
        # plain_text (the header, the buttons) shows as typed: the forms below are markup only in mrkdwn.
        marked = [o["text"] for o in _text_objects(request.json["blocks"]) if o["type"] == "mrkdwn"]
        note = request.json["blocks"][1]["text"]["text"].splitlines()[-1]
        own_markup = "*Heads up* <https://runbook.example/xid|runbook>: "
        assert note.startswith(own_markup + "node-a⏎✅ 3. \u2217drain\u2217: succeeded ")
        forged_parts = ["*drain*", "<!channel>", "<https://evil", "<@", "*bold*", "_it_", "`x`"]
    else:
        texts = teams_texts(teams_card(request.json))
        (note,) = [t for t in texts if "Heads up" in t]
        assert note.startswith(r"**Heads up** [runbook](https://runbook.example/xid): node-a⏎✅ 3. \*drain\*: ")
        forged_parts = ["*drain*", "[click](", "*bold*", "_it_", "`x`"]
        marked = texts
    for text in texts:
        assert not any(line.startswith("✅ 3.") for line in text.splitlines())  # no forged step line
        assert "https://evil" not in text  # no bare URL a client would link
    for text in marked + ([request.json["text"]] if kind is NotifySlackAction else []):
        for part in forged_parts:
            assert part not in text, (part, text)
    # The only links are remediate's own and the playbook's.
    assert "https:\u200b//evil.example/login" in json.dumps(request.json, ensure_ascii=False)


@EVERY_DATABASE
def test_through_the_executor_a_ladder_run_names_its_rung(
    recorder: WebhookRecorder,
    store: Store,
) -> None:
    playbook = {
        "name": "xid-ladder",
        "match": {"alertname": "GpuXidError"},
        "escalate": [
            {
                "name": "tell",
                "holds_for": "30m",
                "steps": [{"action": "notify.slack", "with": {"url": recorder.url}}],
            }
        ],
    }
    run_id = run_through_the_executor(store, alert_payload("GpuXidError"), playbook)

    (request,) = recorder.requests
    context_text = request.json["blocks"][-2]["elements"][0]["text"]
    assert context_text.startswith(f"run {run_id} · playbook xid-ladder · rung 1 · mode enforce · ")


def test_the_dry_run_plan_previews_the_message_with_every_step_to_come(tmp_path: Path) -> None:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "xid.yaml").write_text(
        "name: xid\nmatch: {alertname: GpuXidError}\nsteps:\n"
        "  - {name: note it, action: log, with: {message: hi}}\n"
        "  - {name: tell, action: notify.slack, with: {url: 'https://hooks.slack.test/services/T/B/X'}}\n"
    )
    settings = Settings.of(
        playbooks=tmp_path / "playbooks",
        database_url=f"sqlite:///{tmp_path / 'absent.db'}",
        public_url=PUBLIC_URL,
    )

    report = dry_run(settings, notification_payload(alert_payload("GpuXidError")), now=1_767_225_600.0)

    (playbook,) = report["alerts"][0]["playbooks"]
    plan = playbook["steps"][1]["plan"]
    assert plan["would_post_to"] == "https://hooks.slack.test/services/T/B/X"
    check_slack_shape(plan["body"])
    assert "✅" not in plan["body"]["blocks"][1]["text"]["text"]  # nothing has run
    assert plan["body"]["blocks"][1]["text"]["text"].splitlines()[1:] == [
        "• 1. *note it* `log`: pending",
        "• 2. *tell* `notify.slack`: this message",
    ]


# --------------------------------------------------------------------------- a run awaiting approval, announced


@EVERY_DATABASE
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_awaiting_approval_is_announced_with_an_approve_button_then_its_own_step_speaks_once_approved(
    recorder: WebhookRecorder,
    store: Store,
    kind: type[ChatWebhookAction],
) -> None:
    registry = default_registry(Settings.of(public_url=PUBLIC_URL))
    playbook = {
        "name": "gpu-xid",
        "match": {"alertname": "GpuXidError"},
        "mode": "approve",
        "target": "node",
        "steps": [
            {"name": "note it", "action": "log", "with": {"message": "GPU {{ labels.gpu }}"}},
            {
                "name": "tell on-call",
                "action": kind.name,
                "with": {"url": recorder.url, "message": "GPU {{ labels.gpu }}"},
            },
        ],
    }
    engine = Engine(
        store=store,
        playbooks=PlaybookSet([parse_playbook(playbook, registry, source="gpu-xid.yaml")]),
        registry=registry,
    )
    (decision,) = ingest_alerts(
        engine, alert_payload("GpuXidError", labels={"gpu": "5", "Hostname": "node-a"}), at=1_767_225_600.0
    ).decisions
    run_id = decision.run_id
    executor = Executor(store=store, registry=registry, retry_wait_max=0.01)
    assert executor.drain() == 0  # nothing runs before the approval

    announcer = Announcer(store=store, registry=registry)
    assert announcer.run_once() and not announcer.run_once()  # one run announced

    (request,) = recorder.requests
    assert request.header("Idempotency-Key") == f"remediate-run-{run_id}-awaiting-approval-1"
    link = f"{PUBLIC_URL}/ui/runs/{run_id}"
    if kind is NotifySlackAction:
        check_slack_shape(request.json)
        blocks = request.json["blocks"]
        assert blocks[0]["text"]["text"] == "🔥 GpuXidError on node-a"
        assert blocks[2]["text"]["text"].splitlines() == [
            "once approved, remediate runs playbook gpu-xid (2 steps):",
            "• 1. *note it* `log`: pending",
            "• 2. *tell on-call* `notify.slack`: pending",
        ]
        assert blocks[3]["fields"][0]["text"] == "*Status*\nwaiting for approval"
        assert [(b["text"]["text"], b["url"], b.get("style")) for b in blocks[-1]["elements"]] == [
            (f"Open run {run_id}", link, None),
            ("Approve", link, "primary"),
        ]
        assert request.json["text"].startswith("GpuXidError on node-a: waiting for approval. once approved,")
    else:
        card = teams_card(request.json)
        texts = teams_texts(card)
        assert "once approved, remediate runs playbook gpu-xid (2 steps):" in texts
        assert "2. tell on-call (notify.teams): pending" in texts
        assert "Status: waiting for approval" in texts
        assert [(a["title"], a["url"]) for a in card["actions"]] == [(f"Open run {run_id}", link), ("Approve", link)]
    assert "GPU 5" in json.dumps(request.json)

    store.queue.approve(run_id, by="alice", now=1_767_225_660.0)
    assert executor.drain() == 1

    _announcement, second = recorder.requests  # the step's own message, once the run runs
    assert second.header("Idempotency-Key") == f"remediate-run-{run_id}-step-1"
    assert "remediation running (approved by alice)" in json.dumps(second.json)  # who approved
    assert "Approve" not in json.dumps(second.json)
    assert [r.status for r in rows(store, "runs")] == ["succeeded"]
    assert [(r.announced_at is not None, r.announce_error) for r in rows(store, "runs")] == [(True, None)]
