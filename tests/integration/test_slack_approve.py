"""Approve from Slack in place, through the real Flask app on a SQLite file.

Each request is signed here exactly as Slack signs it (api.slack.com/authentication/verifying-requests-from-slack:
`v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{raw body}` under the app's signing secret), computed in the test
from a known secret, around a `block_actions` payload of Slack's shape, form-encoded as `payload=<JSON>`. Slack's
`response_url` is a local HTTP recorder: what remediate answers there is what the on-call sees.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from werkzeug.test import TestResponse

from remediate.config.values import to_slack_approvers
from tests.integration.test_cli import SHIPPED_PLAYBOOKS, keep_root_logging  # noqa: F401 - a fixture
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli
from tests.support.http import APPROVE_XID, TOKEN, Server, real_firing
from tests.support.realsystems import WebhookRecorder

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's own documentation example's shape: 32 hex-like characters
ALICE, MALLORY = "U123ABC", "U0MALLORY"
RESPONSE_PATH = "/actions/T0001/5551234/abcdefABCDEF"


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """As Slack computes it (independently of remediate's SlackSigner)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def block_actions(
    run_id: int | str, *, user: str = ALICE, response_url: str, action_id: str = "remediate-approve"
) -> dict[str, Any]:
    """A `block_actions` payload as Slack sends it for a click on a message's button."""
    buttons = [
        {"type": "button", "text": {"type": "plain_text", "text": f"Open run {run_id}"},
         "url": f"https://remediate.example.com/ui/runs/{run_id}", "action_id": "open-run"},
        {"type": "button", "text": {"type": "plain_text", "text": "Approve"}, "action_id": "remediate-approve",
         "value": str(run_id), "style": "primary"},
    ]  # fmt: skip
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "alice", "name": "alice", "team_id": "T0001"},
        "api_app_id": "A0001",
        "token": "Shh_its_a_seekrit",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0ONCALL"},
        "trigger_id": "12466734323.1395872398.1ab2c3d4e5f6",
        "team": {"id": "T0001", "domain": "example"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": "C0ONCALL", "name": "oncall"},
        "message": {
            "type": "message",
            "subtype": "bot_message",
            "text": "GpuXidError on node-a: waiting for approval.",
            "ts": "1700000000.000100",
            "bot_id": "B0001",
            "blocks": [
                {"type": "header", "block_id": "h", "text": {"type": "plain_text", "text": "🔥 GpuXidError on node-a"}},
                {"type": "actions", "block_id": "a", "elements": buttons},
            ],
        },
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": "a",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": str(run_id),
                "style": "primary",
                "type": "button",
                "action_ts": "1700000012.345678",
            },
        ],
    }


def click(
    server: Server, payload: dict[str, Any], *, secret: str = SECRET, timestamp: int | None = None,
    tamper: Callable[[bytes], bytes] = lambda body: body,
) -> TestResponse:  # fmt: skip
    """POST the payload to the interactivity URL as Slack does: form-encoded, signed, timestamped."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": slack_signature(secret, stamp, body)}
    return server.client.post(
        "/slack/interactions", data=tamper(body), headers=headers, content_type="application/x-www-form-urlencoded"
    )


@pytest.fixture
def answers() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path=RESPONSE_PATH) as recorder:
        yield recorder


@pytest.fixture
def slack_server(make_server: Callable[..., Server], tmp_path: Path) -> tuple[Server, int]:
    """A server with Slack interactivity on (alice listed) and one run awaiting approval."""
    secret_file = tmp_path / "slack-signing-secret"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")
    server = make_server(
        playbooks={"approve.yaml": APPROVE_XID},
        slack_signing_secret_file=secret_file,
        slack_approvers=to_slack_approvers({ALICE: "alice"}),
    )
    run_id = server.webhook(real_firing()).get_json()["runs"][0]
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    return server, run_id


def audited(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "remediate.audit" and getattr(r, "event", None) == event]


def test_a_listed_slack_user_approves_the_run_in_place_and_the_message_says_who(
    slack_server: tuple[Server, int], answers: WebhookRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    server, run_id = slack_server
    caplog.set_level(logging.INFO, logger="remediate.audit")

    response = click(server, block_actions(run_id, response_url=answers.url))

    assert response.status_code == 200, response.get_data(as_text=True)
    detail = server.get(f"/runs/{run_id}").get_json()
    assert (detail["status"], detail["approved_by"]) == ("queued", "slack:alice")
    answer = answers.wait_for(timeout=10)
    assert answer.path == RESPONSE_PATH
    assert answer.json["replace_original"] is True
    said = f"✅ Approved by <@{ALICE}> (recorded as slack:alice): run {run_id} is queued and runs now"
    assert answer.json["text"].startswith(said)
    header, line, actions = answer.json["blocks"]
    assert header == block_actions(run_id, response_url=answers.url)["message"]["blocks"][0]
    assert line == {"type": "section", "text": {"type": "mrkdwn", "text": answer.json["text"]}}
    # The message as it was, the Approve button swapped for that line: a second click has nothing to press.
    assert [e["action_id"] for e in actions["elements"]] == ["open-run"]
    [record] = audited(caplog, "approval")
    assert (record.run_id, record.principal) == (run_id, "slack:alice")
    # The same approval as POST /runs/<id>/approve: the executor runs it.
    server.drain()
    done = server.get(f"/runs/{run_id}").get_json()
    assert (done["status"], done["approved_by"]) == ("succeeded", "slack:alice")


def test_every_block_of_the_announcement_is_kept_and_only_its_actions_block_is_swapped_for_the_approval(
    slack_server: tuple[Server, int], answers: WebhookRecorder
) -> None:
    """The announcement's blocks (header, the alert, the steps, Status and Playbook, context, the buttons) stay as
    Slack shows them, in their order; the buttons' block becomes the line saying who approved (Open run after it),
    and the Status field no longer says the run awaits approval."""
    server, run_id = slack_server
    payload = block_actions(run_id, response_url=answers.url)
    header, actions = payload["message"]["blocks"]
    about = {"type": "section", "text": {"type": "mrkdwn", "text": "GPU 3 on node-a: XID 79, fell off the bus"}}
    fields = {
        "type": "section",
        "fields": [
            {"type": "mrkdwn", "text": "*Status*\nawaiting approval"},
            {"type": "mrkdwn", "text": "*Playbook*\ngpu-xid-quarantine"},
        ],
    }
    context = {"type": "context", "elements": [{"type": "mrkdwn", "text": "node-a · GpuXidError · firing"}]}
    after = {"type": "context", "elements": [{"type": "mrkdwn", "text": "a block after the buttons"}]}
    payload["message"]["blocks"] = [header, about, fields, context, actions, after]

    assert click(server, payload).status_code == 200

    answer = answers.wait_for(timeout=10).json
    line = {"type": "section", "text": {"type": "mrkdwn", "text": answer["text"]}}
    status = {**fields, "fields": [{"type": "mrkdwn", "text": "*Status*\napproved, queued"}, fields["fields"][1]]}
    others = {**actions, "elements": [e for e in actions["elements"] if e["action_id"] == "open-run"]}
    assert answer["replace_original"] is True
    assert answer["blocks"] == [header, about, status, context, line, others, after]


def test_without_the_messages_blocks_in_the_payload_the_message_is_not_replaced_by_one_line(
    slack_server: tuple[Server, int], answers: WebhookRecorder
) -> None:
    server, run_id = slack_server
    payload = block_actions(run_id, response_url=answers.url)
    del payload["message"]

    assert click(server, payload).status_code == 200

    answer = answers.wait_for(timeout=10).json
    assert answer["replace_original"] is False and "blocks" not in answer
    assert answer["text"].startswith(f"✅ Approved by <@{ALICE}>")
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "slack:alice"


def test_a_message_of_unexpected_shape_in_the_payload_still_approves_and_is_answered(
    slack_server: tuple[Server, int], answers: WebhookRecorder
) -> None:
    """The payload's copy of the message is only echoed back: odd blocks are dropped, never a 500."""
    server, run_id = slack_server
    payload = block_actions(run_id, response_url=answers.url)
    odd = [{"type": "actions", "elements": "junk"}, {"type": "actions", "elements": [7]}]
    payload["message"]["blocks"] = ["junk", *odd]

    assert click(server, payload).status_code == 200

    blocks = answers.wait_for(timeout=10).json["blocks"]
    assert blocks[:2] == odd
    assert blocks[2]["text"]["text"].startswith(f"✅ Approved by <@{ALICE}>")
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "slack:alice"


@pytest.mark.parametrize(
    ("how", "reason", "message"),
    [
        ("another secret", "forged_signature", "does not verify"),
        ("body changed after signing", "forged_signature", "does not verify"),
        ("no signature", "forged_signature", "does not verify"),
        ("six minutes old", "stale_timestamp", "more than 300 s from now"),
        ("six minutes ahead", "stale_timestamp", "more than 300 s from now"),
        ("no timestamp", "stale_timestamp", "missing or not UNIX seconds"),
        ("a timestamp of other digits", "stale_timestamp", "missing or not UNIX seconds"),
    ],
)
def test_a_forged_or_stale_request_is_refused_401_audited_and_approves_nothing(
    slack_server: tuple[Server, int],
    answers: WebhookRecorder,
    caplog: pytest.LogCaptureFixture,
    how: str,
    reason: str,
    message: str,
) -> None:
    server, run_id = slack_server
    caplog.set_level(logging.INFO, logger="remediate.audit")
    payload = block_actions(run_id, response_url=answers.url)
    now = int(time.time())

    if how == "another secret":
        response = click(server, payload, secret="not-the-signing-secret-at-all-123")
    elif how == "body changed after signing":
        response = click(server, payload, tamper=lambda body: body.replace(b"U123ABC", b"U0MALLRY"))
    elif how == "a timestamp of other digits":
        body = urlencode({"payload": json.dumps(payload)}).encode()
        # Superscript digits: str.isdigit() says yes, int() refuses; a 401, never a 500.
        stamp = "\u00b9\u00b2\u00b3"
        headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": slack_signature(SECRET, "123", body)}
        response = server.client.post(
            "/slack/interactions", data=body, headers=headers, content_type="application/x-www-form-urlencoded"
        )
    elif how in ("no signature", "no timestamp"):
        body = urlencode({"payload": json.dumps(payload)}).encode()
        stamp = str(now)
        headers = {"X-Slack-Request-Timestamp": stamp} if how == "no signature" else {}
        if how == "no timestamp":
            headers["X-Slack-Signature"] = slack_signature(SECRET, stamp, body)
        response = server.client.post(
            "/slack/interactions", data=body, headers=headers, content_type="application/x-www-form-urlencoded"
        )
    else:
        # Correctly signed, but replayed (or from a wrong clock) outside Slack's five-minute window.
        response = click(server, payload, timestamp=now - 361 if how == "six minutes old" else now + 361)

    assert response.status_code == 401
    assert message in response.get_data(as_text=True)
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    [record] = audited(caplog, "approval_refused")
    assert (record.reason, record.levelno) == (reason, logging.WARNING)
    assert audited(caplog, "approval") == [] and answers.requests == []


def test_an_unlisted_slack_user_is_told_so_and_the_run_still_waits(
    slack_server: tuple[Server, int], answers: WebhookRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    server, run_id = slack_server
    caplog.set_level(logging.INFO, logger="remediate.audit")

    response = click(server, block_actions(run_id, user=MALLORY, response_url=answers.url))

    assert response.status_code == 200  # Slack's request was genuine: the refusal is the answer to the person
    answer = answers.wait_for(timeout=10).json
    assert (answer["response_type"], answer["replace_original"]) == ("ephemeral", False)
    assert answer["text"] == (
        f"<@{MALLORY}>, you are not on remediate's Slack approver list (slack_approvers): run {run_id} was not "
        f"approved. Ask an operator to add your Slack user id {MALLORY}."
    )
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    [record] = audited(caplog, "approval_refused")
    assert (record.reason, record.slack_user, record.run_id) == ("unlisted_user", MALLORY, run_id)


def test_a_run_no_longer_waiting_is_not_approved_again_and_the_answer_says_why(
    slack_server: tuple[Server, int], answers: WebhookRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    server, run_id = slack_server
    assert server.post(f"/runs/{run_id}/approve").status_code == 200  # an operator was quicker, on the page
    caplog.set_level(logging.INFO, logger="remediate.audit")

    response = click(server, block_actions(run_id, response_url=answers.url))

    assert response.status_code == 200
    answer = answers.wait_for(timeout=10).json
    assert answer["response_type"] == "ephemeral"
    assert answer["text"] == (
        f"Run {run_id} no longer waits for approval: it is queued (approved by operator). Nothing was done."
    )
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "operator"
    [record] = audited(caplog, "approval_refused")
    assert (record.reason, record.principal, record.status) == ("not_waiting", "slack:alice", "queued")

    answers.clear()
    assert click(server, block_actions(99999, response_url=answers.url)).status_code == 200
    assert answers.wait_for(timeout=10).json["text"] == "There is no run 99999 (any more): nothing was approved."
    assert audited(caplog, "approval_refused")[-1].reason == "unknown_run"


def test_a_click_on_a_link_button_is_acknowledged_and_does_nothing(
    slack_server: tuple[Server, int], answers: WebhookRecorder
) -> None:
    """Slack sends link buttons' clicks to the interactivity URL too, and wants each acknowledged."""
    server, run_id = slack_server
    response = click(server, block_actions(run_id, response_url=answers.url, action_id="open-run"))
    assert (response.status_code, response.get_data()) == (200, b"")
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    assert answers.requests == []


def test_a_signed_request_without_a_usable_payload_is_400_naming_the_field(slack_server: tuple[Server, int]) -> None:
    server, _ = slack_server
    stamp = str(int(time.time()))
    for body, field in ((b"text=hello", "payload"), (b"payload=%7Bnot+json", "payload")):
        headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": slack_signature(SECRET, stamp, body)}
        response = server.client.post(
            "/slack/interactions", data=body, headers=headers, content_type="application/x-www-form-urlencoded"
        )
        assert (response.status_code, response.get_json()["field"]) == (400, field)


def test_without_a_signing_secret_the_endpoint_is_off(make_server: Callable[..., Server]) -> None:
    server = make_server()
    response = server.client.post("/slack/interactions", data=b"payload=%7B%7D")
    assert (response.status_code, response.get_json()["error"]) == (404, "not_configured")


def test_a_response_url_that_fails_leaves_the_approval_done_and_the_url_out_of_the_log(
    slack_server: tuple[Server, int], answers: WebhookRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    server, run_id = slack_server
    answers.status = 500

    assert click(server, block_actions(run_id, response_url=answers.url)).status_code == 200

    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "slack:alice"
    assert len(answers.requests) == 1  # posted once, not again: Slack may have shown it
    [warning] = [m for r in caplog.records if r.name == "remediate.server" and "Slack click" in (m := r.getMessage())]
    assert "answered 500" in warning and RESPONSE_PATH not in warning


@pytest.mark.usefixtures("keep_root_logging")
@pytest.mark.parametrize("contents", [None, "\n"])
def test_serve_refuses_to_start_with_a_missing_or_empty_signing_secret_file(
    tmp_path: Path, contents: str | None
) -> None:
    secret_file = tmp_path / "slack-signing-secret"
    if contents is not None:
        secret_file.write_text(contents, encoding="utf-8")
    database = tmp_path / "serve.db"
    result = cli(
        "serve", "--playbooks", SHIPPED_PLAYBOOKS, "--database-url", f"sqlite:///{database}", "--bind", "127.0.0.1:1",
        env={"REMEDIATE_TOKEN": TOKEN, "REMEDIATE_SLACK_SIGNING_SECRET_FILE": str(secret_file)},
    )  # fmt: skip
    assert_one_line_error(result, f"slack_signing_secret_file {secret_file}")
    assert not database.exists()  # refused in preflight, before the store or gunicorn


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"alice": "alice"}, "slack_approvers.alice: not a Slack user id"),
        ({ALICE: "al ice"}, f"slack_approvers.{ALICE}: the name must be"),
        ("[U1, U2]", "must be a mapping of Slack user ids"),
    ],
)
def test_a_bad_approver_list_is_refused_naming_the_entry(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_slack_approvers(value)


def test_the_approver_list_reads_the_environments_json_text() -> None:
    assert to_slack_approvers('{"U123ABC": "alice", "W0BOB": "bob"}') == (("U123ABC", "alice"), ("W0BOB", "bob"))
