"""Approving from Slack, as deployed: the real ``remediate serve`` (gunicorn, its executor process) with Slack
interactivity on. The approval announcement's Approve button is Slack's interactive kind; a click, signed as Slack
signs it and sent to POST /slack/interactions, approves the run as `slack:alice`; the message is replaced through
the click's `response_url` (a local recorder standing for Slack) saying who approved, and the run's own Slack
step, once it runs, says who approved too."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import requests

from tests.e2e.test_announce import SLACK_PATH, playbook, xid
from tests.integration.test_slack_approve import ALICE, RESPONSE_PATH, SECRET, block_actions, slack_signature
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer, write_playbook
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]


@pytest.fixture
def slack() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path=SLACK_PATH) as sink:
        yield sink


@pytest.fixture
def answers() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path=RESPONSE_PATH) as recorder:
        yield recorder


def test_the_approve_button_of_the_announcement_approves_the_run_in_place(
    playbooks_dir: Path,
    tmp_path: Path,
    slack: WebhookRecorder,
    answers: WebhookRecorder,
    start_server: Callable[..., RemediateServer],
) -> None:
    secret_file = tmp_path / "slack-signing-secret"
    secret_file.write_text(SECRET, encoding="utf-8")
    write_playbook(playbooks_dir, "ask-before-reset", playbook(slack.url))
    server = start_server(
        env={
            "REMEDIATE_PUBLIC_URL": "https://remediate.example.com",
            "REMEDIATE_SLACK_SIGNING_SECRET_FILE": str(secret_file),
            "REMEDIATE_SLACK_APPROVERS": json.dumps({ALICE: "alice"}),
        }
    )
    assert server.post_webhook(xid("node-a", "aaaa000000000001")).status_code == 200
    run_id = server.wait_for_run(status="awaiting_approval", playbook="ask-before-reset")["run_id"]

    announcement = slack.wait_for(timeout=10).json
    approve = announcement["blocks"][-1]["elements"][-1]
    assert (approve["action_id"], approve["value"], "url" in approve) == ("remediate-approve", str(run_id), False)

    # The click as Slack posts it, around the message Slack shows (the announcement's own blocks).
    payload = block_actions(run_id, response_url=answers.url)
    payload["message"]["blocks"] = announcement["blocks"]
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time()))
    response = _post_signed(server, body, stamp)
    assert response.status_code == 200, response.text

    replaced = answers.wait_for(timeout=10).json
    assert replaced["replace_original"] is True
    assert replaced["text"].startswith(f"✅ Approved by <@{ALICE}> (recorded as slack:alice): run {run_id} is queued")
    # Every block of the announcement kept in its place; its buttons' block swapped for who approved (Open run
    # after it), and its Status field no longer says it awaits approval.
    *kept, line, buttons = replaced["blocks"]
    assert line == {"type": "section", "text": {"type": "mrkdwn", "text": replaced["text"]}}
    assert [e["action_id"] for e in buttons["elements"]] == ["open-run"]
    assert len(kept) == len(announcement["blocks"]) - 1
    for shown, was in zip(kept, announcement["blocks"], strict=False):
        assert shown == was or shown["fields"][0]["text"] == "*Status*\napproved, queued", shown

    done = server.wait_for_run_status(run_id, "succeeded")
    assert done["approved_by"] == "slack:alice"
    step = slack.wait_for(lambda r: r.header("Idempotency-Key") == f"remediate-run-{run_id}-step-1", 10).json
    assert "remediation running (approved by slack:alice)" in step["text"]

    # A replay of the same signed request (still within the window) finds the run no longer waiting.
    answers.clear()
    again = _post_signed(server, body, stamp)
    assert again.status_code == 200
    assert answers.wait_for(timeout=10).json["text"] == (
        f"Run {run_id} no longer waits for approval: it is succeeded (approved by slack:alice). Nothing was done."
    )


def _post_signed(server: RemediateServer, body: bytes, stamp: str) -> requests.Response:
    """POST /slack/interactions as Slack posts a click: form-encoded, signed with the app's signing secret."""
    return requests.post(
        f"{server.url}/slack/interactions",
        data=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": slack_signature(SECRET, stamp, body),
        },
        timeout=scaled(10),
    )
